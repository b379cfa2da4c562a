// SPDX-License-Identifier: Apache-2.0
// The schema migrations, embedded at build time from migrations/*.sql.
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

/// Applies every migration not yet recorded in schema_migrations, each in its
/// own transaction, and records it with the sha256 of its file, under an
/// advisory lock so that servers starting together do not race. Returns the
/// names applied by this call. Fails with ec::invalid_argument, changing
/// nothing, when the database recorded a migration this server does not know
/// (a newer server's, or the 0.1 chain's) or one whose checksum differs from
/// the embedded file's; with ec::storage_unavailable when Postgres fails.
caf::expected<std::vector<std::string>> migrate(const std::string& dsn);

} // namespace chargeonce::persistence
