// SPDX-License-Identifier: Apache-2.0
// Reading pgbench's per-transaction log (-l) the way the reference kit's
// runner does: the transactions that completed after the warm-up, for the
// measured duration, counted from the first transaction's start.
#pragma once

#include "tools/bench/histogram.hpp"

#include <cstdint>
#include <istream>
#include <vector>

namespace chargeonce::bench {

/// One completed transaction of the log.
struct pgbench_tx {
  int64_t latency_us = 0;
  int64_t completed_us = 0; ///< microseconds since the epoch
};

/// Appends the transactions of one log file. pgbench 15 writes
/// `client_id transaction_no time script_no time_epoch time_us [...]`;
/// lines whose time is not a number (failed or skipped transactions) and
/// malformed lines are left out.
void read_pgbench_log(std::istream& in, std::vector<pgbench_tx>& out);

/// The transactions of one run that completed in its measured window.
struct pgbench_window {
  uint64_t transactions = 0;
  histogram latency_us; ///< per pgbench transaction
};

/// The window opens `warmup_s` after the earliest start in `txs` and lasts
/// `duration_s`, as chargeonce-bench's own runs are measured.
pgbench_window window_of(const std::vector<pgbench_tx>& txs, int64_t warmup_s,
                         int64_t duration_s);

} // namespace chargeonce::bench
