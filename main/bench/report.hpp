// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench's report: a table for people, one JSON object for
// programs, with chargeonce's ratio over the baseline per client count.
#pragma once

#include "main/bench/loop.hpp"
#include "main/bench/options.hpp"
#include "main/bench/persistence.hpp"
#include "main/bench/reference.hpp"

#include <vector>

namespace chargeonce::bench {

/// One JSON object on stdout; `reference` (and the comparison with it)
/// only when --reference ran.
void print_json(const bench_options& o, const std::vector<run_result>& runs,
                const std::vector<persistence_run>& alone,
                const std::vector<reference_run>& reference);

/// The summary, ratios, per-operation percentiles, outcomes, audits and
/// memory; the reference and the comparison with it, if run; then the
/// persistence layer alone, if measured.
void print_table(const bench_options& o, const std::vector<run_result>& runs,
                 const std::vector<persistence_run>& alone,
                 const std::vector<reference_run>& reference);

} // namespace chargeonce::bench
