// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench's comparison with the per-operation baselines: per
// client count, chargeonce's cycles/s over the FASTER of the two
// per-operation designs (the in-run baseline and the reference's
// cycle_per_op.sql) at that count and over their BEST at any count of the
// invocation, and as a share of the reference's set-based batches
// (cycle_batch_set.sql), the ceiling of group commit on this machine.
#pragma once

#include "tools/bench/loop.hpp"
#include "tools/bench/reference.hpp"

#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <vector>

namespace chargeonce::bench {

/// Cycles/s and latency of one run. Latency is one cycle's, except for
/// batch_set: one transaction of 100 cycles.
struct throughput {
  double cycles_per_s = 0;
  uint64_t p50_us = 0;
  uint64_t p99_us = 0;
};

/// One client count and chargeonce mode against the baselines measured at
/// the same client count in the same invocation.
struct comparison {
  size_t clients = 0;
  std::string mode; ///< remote, remote_async, in_process; "" for none
  std::optional<throughput> chargeonce;
  std::optional<throughput> baseline;  ///< the in-run baseline
  std::optional<throughput> per_op;    ///< reference cycle_per_op.sql
  std::optional<throughput> batch_set; ///< reference cycle_batch_set.sql
  /// "baseline" or "reference_per_op", whichever made more cycles/s.
  std::string faster_per_op;
  std::optional<double> vs_faster_per_op; ///< chargeonce over it
  /// The per-operation designs' best: the most cycles/s either made at any
  /// client count of the invocation. A team writing that design by hand
  /// runs it where it is fastest, not into the collapse of its row locks
  /// at many connections, so this is the fair bar at every count.
  std::optional<throughput> best_per_op;
  size_t best_per_op_clients = 0;       ///< where it was measured
  std::string best_per_op_design;       ///< "baseline" or "reference_per_op"
  std::optional<double> vs_best_per_op; ///< chargeonce over it
  std::optional<double> share_of_batch_set; ///< chargeonce over the ceiling
};

/// One row per client count and chargeonce mode (one row with mode "" at
/// a client count without chargeonce runs). Failed reference runs are left
/// out.
std::vector<comparison> compare(const std::vector<run_result>& runs,
                                const std::vector<reference_run>& reference);

nlohmann::json reference_json(const std::vector<reference_run>& reference);
nlohmann::json comparisons_json(const std::vector<comparison>& rows);

/// The reference's runs, then the comparison and its latencies.
void print_comparisons(const std::vector<reference_run>& reference,
                       const std::vector<comparison>& rows);

} // namespace chargeonce::bench
