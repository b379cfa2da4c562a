// SPDX-License-Identifier: Apache-2.0
#include "persistence/health.hpp"

#include "persistence/migrations.hpp"

#include <pqxx/pqxx>

#include <algorithm>
#include <set>

namespace chargeonce::persistence {

namespace {

/// In a key/value DSN the last value of a keyword wins, so appending
/// connect_timeout bounds the connect whatever the DSN says.
std::string with_timeouts(const std::string& dsn, std::chrono::seconds t) {
  auto secs = std::to_string(std::max<int64_t>(1, t.count()));
  // Key/value DSNs only: a URI DSN cannot take appended keywords.
  if (dsn.rfind("postgres://", 0) == 0 || dsn.rfind("postgresql://", 0) == 0)
    return dsn;
  return dsn + " connect_timeout=" + secs;
}

} // namespace

readiness check_ready(const std::string& dsn, std::chrono::seconds timeout) {
  try {
    pqxx::connection conn{with_timeouts(dsn, timeout)};
    pqxx::nontransaction q{conn};
    // statement_timeout in ms: a locked or overloaded server answers "not
    // ready" instead of hanging the probe.
    q.exec("SET statement_timeout = "
           + std::to_string(std::chrono::milliseconds{timeout}.count()));
    // A standby answers reads, but billing needs the primary.
    auto role = q.exec(read_only_sql);
    if (!role.empty() && role[0][0].as<bool>())
      return {false, "connected to a read-only Postgres (a standby), not the "
                     "primary"};
    auto rows = q.exec("SELECT name FROM schema_migrations");
    std::set<std::string> applied;
    for (const auto& row : rows)
      applied.insert(row[0].as<std::string>());
    for (const auto& m : migrations())
      if (applied.count(m.name) == 0)
        return {false, "migration " + m.name + " not applied"};
    return {true, {}};
  } catch (const std::exception& e) {
    return {false, e.what()};
  }
}

} // namespace chargeonce::persistence
