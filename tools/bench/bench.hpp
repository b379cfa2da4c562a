// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench: throughput and latency against the baselines.
#pragma once

namespace chargeonce {

/// The whole program behind main(): parses `argv` and returns the exit
/// status, so that tests can run it in-process.
int run_bench(int argc, char** argv);

} // namespace chargeonce
