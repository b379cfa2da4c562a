// SPDX-License-Identifier: Apache-2.0
// Readiness: can this server do billing right now? Used by GET /readyz.
#pragma once

#include <chrono>
#include <string>

namespace chargeonce::persistence {

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
