// SPDX-License-Identifier: Apache-2.0
// chargeonce-cli: one command against a server, its answer as JSON.
#pragma once

namespace chargeonce {

/// The whole program behind main(): parses `argv` and returns the exit
/// status, so that tests can run it in-process.
int run_cli(int argc, char** argv);

} // namespace chargeonce
