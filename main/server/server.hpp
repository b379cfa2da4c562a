// SPDX-License-Identifier: Apache-2.0
// chargeonce-server: runs the billing server until SIGINT/SIGTERM.
#pragma once

namespace chargeonce {

/// The whole program behind main(): parses `argv` and returns the exit
/// status, so that tests can run it in-process.
int run_server(int argc, char** argv);

} // namespace chargeonce
