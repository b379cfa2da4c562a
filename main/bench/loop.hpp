// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench's measuring: the closed loop of one client thread, the
// gate that releases all threads into one window, and what they measured.
#pragma once

#include "main/bench/audit.hpp"
#include "main/bench/drivers.hpp"
#include "main/bench/histogram.hpp"
#include "main/bench/options.hpp"

#include <caf/error.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>

namespace chargeonce::bench {

/// The chats of one run: ids first + 1 … first + count.
struct chat_range {
  chat_id first = 0;
  int64_t count = 0;
};

/// Hands each cycle its chat, shared by a run's client threads.
class chat_picker {
public:
  chat_picker(chat_range range, chat_order order)
      : range_(range), order_(order) {}

  chat_id pick(std::mt19937_64& rng);

  /// Distinct chats handed out so far (sequential order only, else 0).
  uint64_t touched() const;

private:
  chat_range range_;
  chat_order order_;
  std::atomic<int64_t> next_{0}; ///< sequential: chats handed out so far
};

enum class op : size_t {
  reserve,
  start,
  commit,
  cancel,
  fail,
  double_tap, ///< the second reserve of a double tap
  cycle,      ///< a whole cycle, first reserve to last answer
};

constexpr size_t op_count = 7;
constexpr std::array<const char*, op_count> op_names{
  "reserve", "start", "commit", "cancel", "fail", "double", "cycle"};

/// What client threads saw in the measured window (merged afterwards).
struct client_stats {
  std::array<histogram, op_count> latency;
  /// outcome name (ok, busy, an error's name) → count, per operation
  std::array<std::map<std::string, uint64_t>, op_count> outcomes;
  uint64_t cycles = 0;  ///< completed in the window, any variant
  uint64_t commits = 0; ///< of which ended with a commit
  /// Commits answered ok over the whole run, warm-up included: what the
  /// ledger must hold afterwards.
  uint64_t acknowledged = 0;
  uint64_t unexpected = 0; ///< whole run, warm-up included
  uint64_t touched = 0;    ///< distinct chats (sequential order), 0 if unknown

  void merge(const client_stats& other);
};

/// Operations that complete in [from, until) are measured; nothing starts
/// at or after `until`.
struct time_window {
  clock_type::time_point from;
  clock_type::time_point until;

  bool contains(clock_type::time_point t) const {
    return t >= from && t < until;
  }
};

/// What one closed-loop client measures: latency and outcome of every
/// operation and cycle that ends in the window, and every unexpected error
/// (warm-up included).
class cycle_recorder {
public:
  cycle_recorder(client_stats& stats, const time_window& window)
      : stats_(stats), window_(window) {}

  /// `which` began at t0 and ended now with `err`, which it returns.
  caf::error ended(op which, clock_type::time_point t0, caf::error err);

  /// A whole cycle begun at t0 ended now.
  void finish_cycle(clock_type::time_point t0, bool committed);

  void unexpected(op which, chat_id chat, const std::string& name,
                  const std::string& message);
  void unexpected(op which, chat_id chat, const caf::error& err);

  const time_window& window() const { return window_; }

private:
  void record(op which, clock_type::time_point t0, clock_type::time_point t1);

  client_stats& stats_;
  time_window window_;
};

/// A double tap's second reserve must be busy, never a reservation; any
/// other answer is recorded as unexpected.
bool double_tap_was_busy(cycle_recorder& rec, chat_id chat,
                         const caf::expected<reservation_id>& second);

/// A uniform draw of 0..99, for the workload mix.
int percent(std::mt19937_64& rng);

/// Resident memory of one process after a run (from /proc/PID/status).
struct memory_figures {
  std::string process;      ///< bench or server
  int64_t peak_rss_kib = 0; ///< VmHWM
  int64_t rss_kib = 0;      ///< VmRSS
};

/// One run's figures, per mode and client count.
struct run_result {
  std::string mode; ///< remote, in_process or baseline
  size_t clients = 0;
  size_t processes = 1;
  double duration_s = 0;
  client_stats stats;
  std::optional<memory_figures> memory;
  std::optional<run_audit> audit; ///< Postgres after the run

  double cycles_per_s() const {
    return duration_s > 0 ? static_cast<double>(stats.cycles) / duration_s
                          : 0.0;
  }

  const histogram& latency(op which) const {
    return stats.latency[static_cast<size_t>(which)];
  }
};

/// Called once every client thread is connected; returns the window.
using window_maker = std::function<time_window()>;

/// The window of a single-process run: warm-up from now, then duration.
time_window window_from_now(const bench_options& o);

/// Starts `clients` threads, each with its own driver, releases them
/// together into the window `make_window` returns and merges what they
/// measured.
run_result run_clients(const std::string& mode, size_t clients,
                       const bench_options& o, const chat_range& chats,
                       const driver_factory& make_driver,
                       const window_maker& make_window);

} // namespace chargeonce::bench
