// SPDX-License-Identifier: Apache-2.0
#include "persistence/migrations.hpp"

#include "protocol/errors.hpp"

#include <pqxx/pqxx>
#include <spdlog/spdlog.h>

namespace chargeonce::persistence {

namespace {

/// Arbitrary but fixed: every chargeonce server takes the same advisory lock.
constexpr int64_t migration_lock_key = 0x63686172676531; // "charge1"

bool applied(pqxx::connection& conn, const std::string& name) {
  pqxx::nontransaction q{conn};
  return !q.exec_params("SELECT 1 FROM schema_migrations WHERE name = $1", name)
            .empty();
}

} // namespace

caf::expected<std::vector<std::string>> migrate(const std::string& dsn) {
  std::vector<std::string> done;
  try {
    pqxx::connection conn{dsn};
    pqxx::nontransaction setup{conn};
    setup.exec_params("SELECT pg_advisory_lock($1)", migration_lock_key);
    setup.exec("CREATE TABLE IF NOT EXISTS schema_migrations ("
               "name text PRIMARY KEY, "
               "applied_at timestamptz NOT NULL DEFAULT now())");
    setup.commit();
    for (const auto& m : migrations()) {
      if (applied(conn, m.name))
        continue;
      pqxx::work tx{conn};
      tx.exec(m.sql);
      tx.exec_params("INSERT INTO schema_migrations (name) VALUES ($1)",
                     m.name);
      tx.commit();
      spdlog::info("migration applied name={}", m.name);
      done.push_back(m.name);
    }
    // The session-level advisory lock ends with the connection.
  } catch (const std::exception& e) {
    spdlog::error("migration failed error={}", e.what());
    return caf::make_error(ec::storage_unavailable,
                           std::string{"migration failed: "} + e.what());
  }
  return done;
}

} // namespace chargeonce::persistence
