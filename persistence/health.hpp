// SPDX-License-Identifier: Apache-2.0
// Readiness: can this server do billing right now? Used by GET /readyz.
#pragma once

#include <chrono>
#include <string>

namespace chargeonce::persistence {

/// One boolean: the server this session reached cannot take writes (a
/// standby in recovery, or read-only by default). Billing needs the primary.
inline constexpr const char* read_only_sql =
  "SELECT pg_is_in_recovery() OR "
  "current_setting('default_transaction_read_only')::boolean";

/// The outcome of one readiness check.
struct readiness {
  bool ready = false;
  std::string reason; ///< why not, for the operator; empty when ready
};

/// Connects to `dsn` (giving up after `timeout`), and checks that it
/// reached a Postgres that takes writes (not a standby) and that every
/// embedded migration is recorded in schema_migrations. Never throws.
readiness check_ready(const std::string& dsn, std::chrono::seconds timeout);

} // namespace chargeonce::persistence
