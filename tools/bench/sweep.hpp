// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench --sweep: how fast the server's sweep releases stuck
// reservations. N reservations whose workers died an hour ago, released by
// the supervisor's sweep as the server runs it (its own scan connection,
// each release through the chat's actor on the chat partitions); then N
// more made the same way, removed by one plain DELETE ... RETURNING, in the
// same run, for scale.
#pragma once

#include "tools/bench/loop.hpp"
#include "tools/bench/options.hpp"

#include <cstdint>
#include <optional>

namespace chargeonce::bench {

/// One --sweep run: the sweep's figures beside the DELETE's.
struct sweep_run {
  int64_t reservations = 0; ///< N: stuck before each of the two measurements
  size_t connections = 0;   ///< the supervisor's chat partitions
  /// What the sweep answered it released: the run's N, plus any other stuck
  /// reservation the database held.
  uint64_t sweep_released = 0;
  /// Of the run's N, read back from Postgres after the sweep: remembered as
  /// released by the sweep, and still held (both must say all N went).
  int64_t released_rows = 0;
  int64_t left = 0;
  double sweep_s = 0;
  uint64_t deleted = 0; ///< rows the DELETE returned
  double delete_s = 0;
  /// This process's peak RSS over the sweep (the server's actors run here).
  std::optional<memory_figures> memory;

  double sweep_releases_per_s() const {
    return sweep_s > 0 ? static_cast<double>(sweep_released) / sweep_s : 0.0;
  }

  double delete_rows_per_s() const {
    return delete_s > 0 ? static_cast<double>(deleted) / delete_s : 0.0;
  }

  /// The sweep's releases per second over the DELETE's rows per second.
  double ratio() const {
    auto base = delete_rows_per_s();
    return base > 0 ? sweep_releases_per_s() / base : 0.0;
  }

  /// Every one of the N released by the sweep and all N deleted.
  bool ok() const {
    return released_rows == reservations && left == 0
           && deleted == static_cast<uint64_t>(reservations);
  }
};

/// Makes `swept`'s stuck reservations and has the supervisor sweep them,
/// then makes `deleted`'s (as many, the same way) and deletes them in one
/// statement; removes every row it made. Throws when setup, the sweep or
/// Postgres fails.
sweep_run run_sweep(const bench_options& o, const chat_range& swept,
                    const chat_range& deleted);

} // namespace chargeonce::bench
