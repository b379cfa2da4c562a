// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench's report: a table for people, one JSON object for
// programs, with chargeonce's ratio over the baseline per client count.
#pragma once

#include "main/bench/loop.hpp"
#include "main/bench/options.hpp"
#include "main/bench/persistence.hpp"

#include <vector>

namespace chargeonce::bench {

/// One JSON object on stdout.
void print_json(const bench_options& o, const std::vector<run_result>& runs,
                const std::vector<persistence_run>& alone);

/// The summary, ratios, per-operation percentiles, outcomes and memory;
/// then the persistence layer alone, if measured.
void print_table(const bench_options& o, const std::vector<run_result>& runs,
                 const std::vector<persistence_run>& alone);

} // namespace chargeonce::bench
