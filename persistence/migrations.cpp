// SPDX-License-Identifier: Apache-2.0
#include "persistence/migrations.hpp"

#include "protocol/errors.hpp"

#include <pqxx/pqxx>
#include <spdlog/spdlog.h>

#include <map>
#include <optional>
#include <sstream>

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

/// The migrations of 0.2's development, which the release squashed into
/// 003_release_0_2: a database that has them holds development data only.
bool of_development_chain(const std::string& name) {
  static const char* const chain[] = {"003_parallel_jobs",
                                      "004_catalog",
                                      "005_units",
                                      "006_cancel_after_start",
                                      "007_outcome_unknown",
                                      "008_ledger_of_every_change",
                                      "009_history_indexes",
                                      "010_events",
                                      "011_single_operation_batches",
                                      "012_pockets_by_ordinal",
                                      "013_worker_identity"};
  for (const char* c : chain)
    if (name == c)
      return true;
  return false;
}

caf::error development_database(const std::string& name) {
  return caf::make_error(
    ec::invalid_argument,
    "database has migration " + name
      + " of 0.2's development chain, which the release replaced: it holds "
        "development data only; recreate it (drop the database, or point "
        "--postgres at an empty one) and this server migrates it afresh");
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
  for (const auto& name : unknown)
    if (of_development_chain(name))
      return development_database(name);
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

/// The function files as one text: name, newline, body, for each in order.
std::string function_set() {
  std::string out;
  for (const auto& f : function_files())
    out += f.name + "\n" + f.sql;
  return out;
}

/// The function set the database runs: its checksum and release, or none.
struct recorded_functions {
  std::string checksum;
  std::string version;
};

std::optional<recorded_functions> functions_of(pqxx::transaction_base& q) {
  auto rows = q.exec("SELECT checksum, version FROM schema_functions");
  if (rows.empty())
    return std::nullopt;
  return recorded_functions{rows[0][0].as<std::string>(),
                            rows[0][1].as<std::string>()};
}

/// Applies the function files in one transaction unless the database runs
/// this set already or a newer release's; true when it applied them.
bool apply_functions(pqxx::connection& conn) {
  pqxx::work tx{conn};
  tx.exec("CREATE TABLE IF NOT EXISTS schema_functions ("
          "only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), "
          "checksum text NOT NULL, version text NOT NULL, "
          "applied_at timestamptz NOT NULL DEFAULT now())");
  auto ours = checksum_of(tx, function_set());
  auto live = functions_of(tx);
  if (live && live->checksum == ours)
    return false;
  if (live && newer_release(live->version, release_version())) {
    spdlog::warn("functions left as they are: recorded by release {} "
                 "(checksum {}), newer than this server's {}; this server "
                 "runs on them",
                 live->version, live->checksum, release_version());
    return false;
  }
  for (const auto& f : function_files())
    tx.exec(f.sql);
  tx.exec_params("INSERT INTO schema_functions (checksum, version) "
                 "VALUES ($1, $2) ON CONFLICT (only_row) DO UPDATE SET "
                 "checksum = EXCLUDED.checksum, version = EXCLUDED.version, "
                 "applied_at = now()",
                 ours, release_version());
  tx.commit();
  spdlog::info("functions applied checksum={} version={} files={}", ours,
               release_version(), function_files().size());
  return true;
}

std::vector<long> release_parts(const std::string& v) {
  std::vector<long> out;
  std::istringstream in{v};
  for (std::string part; std::getline(in, part, '.');) {
    char* end = nullptr;
    long n = std::strtol(part.c_str(), &end, 10);
    out.push_back(end != nullptr && *end == '\0' && !part.empty() ? n : 0);
  }
  return out;
}

} // namespace

std::string release_version() {
  return CHARGEONCE_VERSION;
}

bool newer_release(const std::string& a, const std::string& b) {
  auto pa = release_parts(a);
  auto pb = release_parts(b);
  auto n = std::max(pa.size(), pb.size());
  pa.resize(n, 0);
  pb.resize(n, 0);
  return pa > pb;
}

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
    if (apply_functions(conn))
      done.emplace_back("functions");
    // The session-level advisory lock ends with the connection.
  } catch (const std::exception& e) {
    spdlog::error("migration failed error={}", e.what());
    return caf::make_error(ec::storage_unavailable,
                           std::string{"migration failed: "} + e.what());
  }
  return done;
}

} // namespace chargeonce::persistence
