// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench's report: a table for people, one JSON object for
// programs, with chargeonce's ratio over the baseline per client count.
#pragma once

#include "tools/bench/loop.hpp"
#include "tools/bench/options.hpp"
#include "tools/bench/persistence.hpp"
#include "tools/bench/reference.hpp"
#include "tools/bench/sweep.hpp"

#include <optional>
#include <vector>

namespace chargeonce::bench {

/// One JSON object on stdout; `reference` (and the comparison with it)
/// only when --reference ran, `sweep` only when --sweep ran, each run's
/// statements (and pg_stat_statements.track, `statements_track`) only with
/// --statements.
void print_json(const bench_options& o, const std::string& statements_track,
                const std::vector<run_result>& runs,
                const std::vector<persistence_run>& alone,
                const std::vector<reference_run>& reference,
                const std::optional<sweep_run>& sweep);

/// The summary, ratios, per-operation percentiles, outcomes, audits,
/// memory and CPU, and with --statements each run's statements; the
/// reference and the comparison with it, if run; then the persistence layer
/// alone, if measured; then the sweep, if measured.
void print_table(const bench_options& o, const std::string& statements_track,
                 const std::vector<run_result>& runs,
                 const std::vector<persistence_run>& alone,
                 const std::vector<reference_run>& reference,
                 const std::optional<sweep_run>& sweep);

} // namespace chargeonce::bench
