// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench --persistence: the persistence layer alone, on one
// connection, without actors or network. The same reserve → start → commit
// cycles run one operation per transaction (the baseline's statements,
// then the server's functions) and in batches of K cycles per statement
// (persistence::store::apply, as the persistence actor sends them). Where
// Postgres runs on this machine, the backend's CPU per cycle says what a
// cycle costs Postgres itself, whatever else shares the cores.
#pragma once

#include "tools/bench/histogram.hpp"
#include "tools/bench/loop.hpp"
#include "tools/bench/options.hpp"

#include <optional>
#include <string>

namespace chargeonce::bench {

/// One run of the persistence layer alone.
struct persistence_run {
  /// per_operation (the baseline's prepared statements), functions (one
  /// server-side function call per operation) or batched (K cycles per
  /// statement)
  std::string mode;
  /// Cycles per statement: K when batched; 0 for the per-operation modes,
  /// whose statements hold one operation each.
  size_t batch_cycles = 0;
  double duration_s = 0;
  uint64_t cycles = 0;     ///< commits in the measured window
  uint64_t statements = 0; ///< round trips in the measured window
  histogram statement_us;  ///< latency of each round trip
  /// The backend's user + system CPU over the window; none when Postgres
  /// is not on this machine.
  std::optional<double> postgres_cpu_s;
  uint64_t unexpected = 0; ///< whole run, warm-up included

  double cycles_per_s() const {
    return duration_s > 0 ? static_cast<double>(cycles) / duration_s : 0.0;
  }

  std::optional<double> postgres_cpu_us_per_cycle() const {
    if (!postgres_cpu_s || cycles == 0)
      return std::nullopt;
    return *postgres_cpu_s * 1e6 / static_cast<double>(cycles);
  }
};

/// The modes a --persistence run has: per_operation and functions, then
/// batched once per K of o.persistence_batches.
struct persistence_mode {
  std::string mode;
  size_t batch_cycles = 0;
};
std::vector<persistence_mode> persistence_modes(const bench_options& o);

/// Runs one mode on `chats` (seeded by the caller) for o.warmup_s and then
/// o.duration_s, or longer until o.min_cycles cycles were measured and a
/// local backend's CPU count has moved.
persistence_run run_persistence(const persistence_mode& m,
                                const bench_options& o,
                                const chat_range& chats);

} // namespace chargeonce::bench
