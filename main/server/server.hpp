// SPDX-License-Identifier: Apache-2.0
// chargeonce-server: runs the billing server until SIGINT/SIGTERM, or until
// its actors die.
#pragma once

#include <caf/fwd.hpp>

#include <functional>

namespace chargeonce {

/// Exit statuses: 0 after SIGINT/SIGTERM, 1 when the server cannot start
/// (database, ports), 2 for bad options, and this one when the actors died
/// while serving (the registry or the event bus, hence the supervisor).
inline constexpr int exit_core_down = 3;

/// What a test may do inside a running server: a C++ API only, no option
/// or environment variable reaches it; main() passes none.
struct server_hooks {
  /// Runs on the serving thread once every port listens and the port file
  /// is written, with the supervisor's handle; must return at once.
  std::function<void(caf::actor_system&, const caf::actor& supervisor)> serving;
};

/// The whole program behind main(): parses `argv` and returns the exit
/// status, so that tests can run it in-process.
int run_server(int argc, char** argv, const server_hooks& hooks = {});

} // namespace chargeonce
