// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/persistence.hpp"

#include "persistence/store.hpp"
#include "protocol/errors.hpp"
#include "tools/bench/baseline.hpp"
#include "tools/bench/postgres_cpu.hpp"

#include <spdlog/spdlog.h>

#include <utility>
#include <vector>

namespace chargeonce::bench {

namespace {

using persistence::batch_result;

/// Hands out the run's chats in order and wraps around: a chat comes back
/// only after all others, long after its own cycle ended.
class chat_cursor {
public:
  explicit chat_cursor(chat_range range) : range_(range) {}
  chat_id next() {
    auto out = range_.first + 1 + next_;
    next_ = (next_ + 1) % range_.count;
    return out;
  }

private:
  chat_range range_;
  int64_t next_ = 0;
};

/// The measured window of one run: opened at the first round trip after
/// the warm-up, with the backend's CPU at that moment.
class window_meter {
public:
  window_meter(const bench_options& o, int backend_pid)
      : window_(window_from_now(o)), pid_(backend_pid),
        min_cycles_(static_cast<uint64_t>(o.min_cycles)) {}

  /// Once its time is up, the window closes when the run has --min-cycles
  /// measured cycles and a local backend's CPU count has moved: /proc
  /// counts in clock ticks (10 ms), and a window in which the backend used
  /// less than one would report no CPU at all. After an unexpected error
  /// (the run has failed) the time alone decides.
  bool done(const persistence_run& run) const {
    if (clock_type::now() < window_.until)
      return false;
    return run.unexpected > 0
           || (run.cycles >= min_cycles_ && backend_cpu_moved());
  }

  /// Opens the window once the warm-up is over; true while it is open.
  bool measuring() {
    if (!open_ && clock_type::now() >= window_.from) {
      open_ = true;
      opened_at_ = clock_type::now();
      auto cpu = postgres_process_cpu_s(pid_);
      cpu_known_ = cpu.has_value();
      cpu_at_open_s_ = cpu.value_or(0.0);
    }
    return open_;
  }

  void record(persistence_run& run, clock_type::time_point started) {
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(
      clock_type::now() - started);
    ++run.statements;
    run.statement_us.record(static_cast<uint64_t>(us.count()));
  }

  void close(persistence_run& run) {
    if (!open_)
      return;
    run.duration_s =
      std::chrono::duration<double>(clock_type::now() - opened_at_).count();
    run.postgres_cpu_s = backend_cpu_s();
  }

private:
  /// The backend's CPU since the window opened; none when not measured.
  std::optional<double> backend_cpu_s() const {
    auto cpu = postgres_process_cpu_s(pid_);
    if (!open_ || !cpu || !cpu_known_)
      return std::nullopt;
    return *cpu - cpu_at_open_s_;
  }

  bool backend_cpu_moved() const {
    auto used = backend_cpu_s();
    return !used || *used > 0; // not measured: nothing to wait for
  }

  time_window window_;
  int pid_;
  uint64_t min_cycles_;
  bool open_ = false;
  clock_type::time_point opened_at_;
  /// The backend's CPU when the window opened, if known (a plain double:
  /// GCC 12 takes an optional's payload here for uninitialized).
  bool cpu_known_ = false;
  double cpu_at_open_s_ = 0;
};

void unexpected(persistence_run& run, const char* op, chat_id chat,
                const caf::error& err) {
  ++run.unexpected;
  spdlog::error("persistence bench {} failed chat={} error={} {}", op, chat,
                error_name(err), error_message(err));
}

/// Runs one round trip `f`, counting it (and its latency) if `measuring`.
template <class F>
auto timed(window_meter& meter, persistence_run& run, bool measuring, F f) {
  auto started = clock_type::now();
  auto out = f();
  if (measuring)
    meter.record(run, started);
  return out;
}

/// One operation per transaction, through the per-operation calls of the
/// store (functions) or of the baseline (per_operation).
template <class Store>
void run_per_operation(Store& db, window_meter& meter, chat_cursor& chats,
                       persistence_run& run) {
  while (!meter.done(run)) {
    auto chat = chats.next();
    auto measuring = meter.measuring();
    auto reserved = timed(meter, run, measuring,
                          [&] { return db.reserve(chat, kind::image, {}); });
    if (!reserved) {
      unexpected(run, "reserve", chat, reserved.error());
      continue;
    }
    auto id = reserved->id;
    auto started =
      timed(meter, run, measuring, [&] { return db.start(chat, id); });
    if (!started) {
      unexpected(run, "start", chat, started.error());
      continue;
    }
    auto committed =
      timed(meter, run, measuring, [&] { return db.commit(chat, id); });
    if (!committed)
      unexpected(run, "commit", chat, committed.error());
    else if (measuring)
      ++run.cycles;
  }
}

using in_flight = std::vector<std::pair<chat_id, reservation_id>>;

/// Each statement commits the cycles started by the previous one, starts
/// those it reserved, and reserves K new chats: K whole cycles per
/// statement once the pipeline is full, as under load.
void run_batched(persistence::store& db, window_meter& meter,
                 chat_cursor& chats, size_t k, persistence_run& run) {
  in_flight reserved;
  in_flight started;
  std::vector<operation> ops;
  while (!meter.done(run)) {
    ops.clear();
    for (auto [chat, id] : started)
      ops.push_back({operation_type::commit, chat, id, kind::image, {}});
    for (auto [chat, id] : reserved)
      ops.push_back({operation_type::start, chat, id, kind::image, {}});
    for (size_t i = 0; i < k; ++i)
      ops.push_back(
        {operation_type::reserve, chats.next(), 0, kind::image, {}});
    auto measuring = meter.measuring();
    auto results = timed(meter, run, measuring, [&] { return db.apply(ops); });
    reserved.clear();
    started.clear();
    for (size_t i = 0; i < ops.size(); ++i) {
      const auto& x = ops[i];
      if (auto err = std::get_if<caf::error>(&results[i])) {
        unexpected(run, to_string(x.type), x.chat, *err);
        continue;
      }
      if (x.type == operation_type::commit && measuring)
        ++run.cycles;
      else if (x.type == operation_type::start)
        started.emplace_back(x.chat, x.reservation);
      else if (x.type == operation_type::reserve)
        reserved.emplace_back(x.chat, std::get<reservation>(results[i]).id);
    }
  }
}

} // namespace

std::vector<persistence_mode> persistence_modes(const bench_options& o) {
  std::vector<persistence_mode> out{{"per_operation", 0}, {"functions", 0}};
  for (auto k : o.persistence_batches)
    out.push_back({"batched", k});
  return out;
}

persistence_run run_persistence(const persistence_mode& m,
                                const bench_options& o,
                                const chat_range& chats) {
  persistence_run run;
  run.mode = m.mode;
  run.batch_cycles = m.batch_cycles;
  chat_cursor cursor{chats};
  // per_operation is the baseline: the straightforward design, one
  // prepared statement per operation; the other modes use the server's
  // store and its functions.
  if (m.mode == "per_operation") {
    baseline_store db{o.postgres};
    window_meter meter{o, db.connect_backend()};
    run_per_operation(db, meter, cursor, run);
    meter.close(run);
    return run;
  }
  persistence::store db{persistence::store_options{o.postgres}};
  window_meter meter{o, db.connect_backend()};
  if (m.mode == "batched")
    run_batched(db, meter, cursor, m.batch_cycles, run);
  else
    run_per_operation(db, meter, cursor, run);
  meter.close(run);
  return run;
}

} // namespace chargeonce::bench
