// SPDX-License-Identifier: Apache-2.0
// chargeonce-chaos: servers and Postgres under injected faults, audited.
#pragma once

namespace chargeonce {

/// The whole program behind main(): parses `argv` and returns the exit
/// status, so that tests can run it in-process.
int run_chaos(int argc, char** argv);

} // namespace chargeonce
