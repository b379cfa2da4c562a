// SPDX-License-Identifier: Apache-2.0
#include "persistence/migrations.hpp"

#include "protocol/errors.hpp"

#include <pqxx/pqxx>
#include <spdlog/spdlog.h>

#include <map>
#include <optional>

namespace chargeonce::persistence {

namespace {

/// Arbitrary but fixed: every chargeonce server takes the same advisory lock.
constexpr int64_t migration_lock_key = 0x63686172676531; // "charge1"

/// Migration name -> checksum (sha256 in hex); "" for a row without one.
using checksums = std::map<std::string, std::string>;

std::string to_hex(const std::string& bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 0xf];
  }
  return out;
}

/// What `sha256sum` prints for the file. Postgres computes it; the bytes
/// travel as hex, so the database's encoding cannot change them.
std::string checksum_of(pqxx::transaction_base& q, const std::string& sql) {
  return q
    .exec_params1("SELECT encode(sha256(decode($1, 'hex')), 'hex')",
                  to_hex(sql))[0]
    .as<std::string>();
}

/// 0.1 made schema_migrations without the checksum column.
bool has_checksum_column(pqxx::transaction_base& q) {
  return q
    .exec1("SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = "
           "'schema_migrations'::regclass AND attname = 'checksum' "
           "AND NOT attisdropped)")[0]
    .as<bool>();
}

checksums recorded(pqxx::transaction_base& q) {
  checksums out;
  // to_jsonb: reads the checksum of a row whether the column exists or not.
  for (const auto& row :
       q.exec("SELECT name, coalesce(to_jsonb(m) ->> 'checksum', '') "
              "FROM schema_migrations m"))
    out.emplace(row[0].as<std::string>(), row[1].as<std::string>());
  return out;
}

/// Migration `name` was applied with checksum `recorded` but is `ours` now.
caf::error edited_after_applied(const std::string& name,
                                const std::string& recorded,
                                const std::string& ours) {
  return caf::make_error(
    ec::invalid_argument,
    "migration " + name + " was edited after it was applied: checksum "
      + (recorded.empty() ? "(none)" : recorded) + " != " + ours
      + " (recorded != this server's); an applied migration never "
        "changes, a change is a new migration");
}

/// Why this server must not touch a database that recorded `applied`, or
/// nothing. A migration the server does not know, or one whose file changed
/// since it was applied, means the schema is not the one its code expects.
std::optional<caf::error> mismatch(const checksums& applied,
                                   const checksums& embedded) {
  std::vector<std::string> unknown;
  for (const auto& [name, sum] : applied)
    if (embedded.count(name) == 0)
      unknown.push_back(name);
  if (!unknown.empty()) {
    auto more = unknown.size() == 1
                  ? std::string{}
                  : " (and " + std::to_string(unknown.size() - 1) + " more)";
    return caf::make_error(
      ec::invalid_argument,
      "database has migration " + unknown.front() + more
        + " that this server does not know: it was migrated by a newer "
          "chargeonce or by the old 0.1 chain; this server does not change "
          "such a database (one of the 0.1 chain holds only test data: "
          "migrate a fresh one)");
  }
  for (const auto& [name, sum] : applied)
    if (const auto& ours = embedded.at(name); sum != ours)
      return edited_after_applied(name, sum, ours);
  return std::nullopt;
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
               "applied_at timestamptz NOT NULL DEFAULT now(), "
               "checksum text NOT NULL)");
    checksums embedded;
    for (const auto& m : migrations())
      embedded.emplace(m.name, checksum_of(setup, m.sql));
    auto applied = recorded(setup);
    if (auto err = mismatch(applied, embedded)) {
      spdlog::error("migration refused error={}", error_message(*err));
      return std::move(*err);
    }
    // Only an empty table gets here without the column (mismatch refuses
    // every row without a checksum).
    if (!has_checksum_column(setup))
      setup.exec("ALTER TABLE schema_migrations "
                 "ADD COLUMN checksum text NOT NULL");
    setup.commit();
    for (const auto& m : migrations()) {
      if (applied.count(m.name) != 0)
        continue;
      pqxx::work tx{conn};
      tx.exec(m.sql);
      tx.exec_params("INSERT INTO schema_migrations (name, checksum) "
                     "VALUES ($1, $2)",
                     m.name, embedded.at(m.name));
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
