// SPDX-License-Identifier: Apache-2.0
// What a run costs besides its time, over its measured window: the CPU of
// the server, of this process and of the Postgres cluster, per cycle, and
// with --statements the statements Postgres ran (pg_stat_statements).
#pragma once

#include "tools/bench/loop.hpp"
#include "tools/bench/options.hpp"
#include "tools/bench/statements.hpp"

#include <exception>
#include <memory>
#include <optional>
#include <thread>

namespace chargeonce::bench {

/// What a run can read of Postgres, found once per invocation.
struct postgres_watch {
  /// The cluster's postmaster when it runs on this machine, else none.
  std::optional<int64_t> postmaster;
  /// --statements: pg_stat_statements of --postgres's database.
  std::unique_ptr<statements_reader> statements;

  /// Finds the local postmaster of o.postgres and, with --statements, checks
  /// that pg_stat_statements can be read (throws std::runtime_error if not).
  static postgres_watch of(const bench_options& o);
};

/// One run's meter: reads when the run's measured window opens (a thread
/// waits for it, so that connecting and the warm-up are left out) and when
/// the run ended (its clients' last cycles, at most one each past the
/// window, are in), and sets the run's figures per measured cycle.
class run_meter {
public:
  /// `server_pid`: the server the run goes through (0: none). This
  /// process's CPU counts only when the run's clients are its threads.
  run_meter(const bench_options& o, postgres_watch& pg, int64_t server_pid);
  ~run_meter();
  run_meter(const run_meter&) = delete;
  run_meter& operator=(const run_meter&) = delete;

  /// The run's window, arming the first reading at its start.
  window_maker window();

  /// Sets the run's CPU per cycle and statements, once it has ended;
  /// throws when pg_stat_statements could not be reset at the start.
  void finish(run_result& r);

private:
  struct reading {
    std::optional<double> server_s;
    std::optional<double> bench_s;
    std::optional<double> postgres_s;
  };

  reading sample() const;
  void open_window();

  const bench_options& options_;
  postgres_watch& pg_;
  int64_t server_pid_;
  std::thread waiter_;
  bool armed_ = false;
  reading at_open_;
  std::exception_ptr reset_failed_;
};

} // namespace chargeonce::bench
