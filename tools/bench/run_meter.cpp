// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/run_meter.hpp"

#include "tools/bench/postgres_cpu.hpp"
#include "tools/bench/processes.hpp"

namespace chargeonce::bench {

postgres_watch postgres_watch::of(const bench_options& o) {
  postgres_watch out;
  out.postmaster = local_postmaster(o.postgres);
  if (o.statements)
    out.statements = std::make_unique<statements_reader>(o.postgres);
  return out;
}

run_meter::run_meter(const bench_options& o, postgres_watch& pg,
                     int64_t server_pid)
    : options_(o), pg_(pg), server_pid_(server_pid) {}

run_meter::~run_meter() {
  if (waiter_.joinable())
    waiter_.join();
}

window_maker run_meter::window() {
  return [this] {
    auto w = window_from_now(options_);
    armed_ = true;
    waiter_ = std::thread{[this, from = w.from] {
      std::this_thread::sleep_until(from);
      open_window();
    }};
    return w;
  };
}

void run_meter::open_window() {
  // The reset first: it is a round trip, and the CPU it costs Postgres
  // falls before the window's first reading rather than inside it.
  if (pg_.statements) {
    try {
      pg_.statements->reset();
    } catch (...) {
      reset_failed_ = std::current_exception();
    }
  }
  at_open_ = sample();
}

run_meter::reading run_meter::sample() const {
  reading out;
  if (server_pid_ > 0)
    out.server_s = read_cpu_s(server_pid_);
  // With --processes the clients are other processes: this one only waits.
  if (options_.processes <= 1)
    out.bench_s = read_cpu_s(0);
  if (pg_.postmaster)
    out.postgres_s = postgres_cluster_cpu_s(*pg_.postmaster);
  return out;
}

void run_meter::finish(run_result& r) {
  if (waiter_.joinable())
    waiter_.join();
  if (reset_failed_)
    std::rethrow_exception(reset_failed_);
  auto at_close = sample();
  if (r.stats.cycles == 0 || !armed_)
    return;
  auto per_cycle =
    [&](const std::optional<double>& from,
        const std::optional<double>& until) -> std::optional<double> {
    if (!from || !until)
      return std::nullopt;
    return (*until - *from) * 1e6 / static_cast<double>(r.stats.cycles);
  };
  r.server_cpu_us_per_cycle = per_cycle(at_open_.server_s, at_close.server_s);
  r.bench_cpu_us_per_cycle = per_cycle(at_open_.bench_s, at_close.bench_s);
  r.postgres_cpu_us_per_cycle =
    per_cycle(at_open_.postgres_s, at_close.postgres_s);
  if (pg_.statements)
    r.statements = pg_.statements->read(r.stats.cycles);
}

} // namespace chargeonce::bench
