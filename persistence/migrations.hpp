// SPDX-License-Identifier: Apache-2.0
// The schema: versioned migrations (migrations/*.sql: tables, types,
// indexes, conversions) and function files (functions/*.sql: the live body
// of every function), both embedded at build time.
#pragma once

#include <caf/expected.hpp>

#include <string>
#include <vector>

namespace chargeonce::persistence {

struct migration {
  std::string name; ///< file name without .sql, e.g. "001_schema"
  std::string sql;
};

/// All migrations in the order they must be applied.
const std::vector<migration>& migrations();

/// The function files in the order they are applied (name order); each
/// declares its functions with CREATE OR REPLACE, so applying them again
/// changes nothing.
const std::vector<migration>& function_files();

/// The release this server is (project(... VERSION)), recorded with the
/// function set it applies.
std::string release_version();

/// Whether release `a` is newer than release `b` (numeric "x.y.z"; a part
/// that is missing or not a number counts as 0).
bool newer_release(const std::string& a, const std::string& b);

/// Applies every migration not yet recorded in schema_migrations, each in its
/// own transaction, and records it with the sha256 of its file; then the
/// function files, all in one transaction, when their checksum differs from
/// the one schema_functions recorded, recording it with release_version().
/// A function set recorded by a newer release is left as it is (logged): a
/// rolling upgrade's old servers run on the new functions, which keep every
/// signature the previous release calls. All under an advisory lock so that
/// servers starting together do not race. Returns the names applied by this
/// call ("functions" last when the function files were applied). Fails with
/// ec::invalid_argument, changing nothing, when the database recorded a
/// migration this server does not know (a newer server's, the 0.1 chain's,
/// or 0.2's development chain's) or one whose checksum differs from the
/// embedded file's; with ec::storage_unavailable when Postgres fails.
caf::expected<std::vector<std::string>> migrate(const std::string& dsn);

} // namespace chargeonce::persistence
