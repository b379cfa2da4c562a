// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench's measuring: the closed loop of one client thread, the
// gate that releases all threads into one window, and what they measured.
#pragma once

#include "tools/bench/audit.hpp"
#include "tools/bench/drivers.hpp"
#include "tools/bench/histogram.hpp"
#include "tools/bench/options.hpp"
#include "tools/bench/statements.hpp"

#include <caf/error.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

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
/// at or after `until` (unless a cycle_quota holds the window open).
struct time_window {
  clock_type::time_point from;
  clock_type::time_point until;
};

/// --min-cycles: the measured window stays open past its `until` while a
/// client of the run still lacks its quota of measured cycles, so that a
/// short run on a slow machine still measures every variant of the mix.
/// Shared by the clients of one run (threads or asynchronous loops).
class cycle_quota {
public:
  /// `clients` that each must complete `min_cycles` (0: none must).
  cycle_quota(size_t clients, uint64_t min_cycles)
      : min_cycles_(min_cycles), short_(min_cycles > 0 ? clients : 0) {}

  uint64_t min_cycles() const { return min_cycles_; }

  /// True while a client still lacks its quota: the window stays open.
  bool open() const { return short_.load() > 0; }

  /// A client has its quota, or gave up on it (an unexpected error has
  /// failed the run already); the last one closes the window.
  void leave();

  /// When `window` closed: at its `until`, or when the last client got its
  /// quota if that was later.
  clock_type::time_point close_of(const time_window& window) const;

  /// How long `window` was open, in seconds: the run's duration_s.
  double seconds_of(const time_window& window) const;

private:
  uint64_t min_cycles_;
  std::atomic<size_t> short_;
  /// When the last client left, as a count of clock ticks; the clock's
  /// earliest time until then.
  std::atomic<clock_type::rep> met_at_{
    clock_type::time_point::min().time_since_epoch().count()};
};

/// What one closed-loop client measures: latency and outcome of every
/// operation and cycle that ends in the window, and every unexpected error
/// (warm-up included); and its share of the run's cycle quota.
class cycle_recorder {
public:
  cycle_recorder(client_stats& stats, const time_window& window,
                 cycle_quota& quota)
      : stats_(stats), window_(window), quota_(quota),
        owes_quota_(quota.min_cycles() > 0) {}

  /// Another cycle may start: the window's time is not up, or a client of
  /// the run still lacks its quota.
  bool running() const;

  /// `which` began at t0 and ended now with `err`, which it returns.
  caf::error ended(op which, clock_type::time_point t0, caf::error err);

  /// A whole cycle begun at t0 ended now. It counts toward the quota if it
  /// began in the window too.
  void finish_cycle(clock_type::time_point t0, bool committed);

  /// The run has failed: this client stops holding the window open.
  void unexpected(op which, chat_id chat, const std::string& name,
                  const std::string& message);
  void unexpected(op which, chat_id chat, const caf::error& err);

  const time_window& window() const { return window_; }

private:
  bool in_window(clock_type::time_point t) const;
  void record(op which, clock_type::time_point t0, clock_type::time_point t1);
  void leave_quota();

  client_stats& stats_;
  time_window window_;
  cycle_quota& quota_;
  bool owes_quota_;
  uint64_t quota_cycles_ = 0; ///< cycles begun and ended in the window
};

/// A double tap's second reserve must be busy, never a reservation; any
/// other answer is recorded as unexpected.
bool double_tap_was_busy(cycle_recorder& rec, chat_id chat,
                         const caf::expected<reservation_id>& second);

/// The workload mix's draws of 0..99, dealt without replacement: every 100
/// draws from a restart hold each value once. A uniform draw per cycle
/// leaves a 10 % variant out of 100 cycles once in about 37,000 runs, and
/// out of 10 cycles one run in three; dealt, 100 cycles take it exactly 10
/// times and the long-run shares stay the same.
class percent_deck {
public:
  explicit percent_deck(std::mt19937_64& rng) { restart(rng); }

  /// The current draw; the same until next().
  int draw() const { return cards_[at_]; }

  /// Moves on; after the 100th draw, a freshly shuffled deck.
  void next(std::mt19937_64& rng);

  /// A freshly shuffled deck.
  void restart(std::mt19937_64& rng);

private:
  std::array<int, 100> cards_{};
  size_t at_ = 0;
};

/// What one cycle does besides reserve → start → commit.
struct cycle_variant {
  bool cancel = false;     ///< reserve → cancel
  bool fail = false;       ///< reserve → start → fail
  bool double_tap = false; ///< a second reserve right after the first
};

/// Deals each cycle of one client its variant from two decks: one for
/// cancel, fail or commit, one for the double tap (independent, as two
/// uniform draws were). A variant is spent only by a completed cycle: one
/// abandoned before (busy on its first reserve) is tried again with it. The
/// first cycle to begin in the measured window starts fresh decks, so that
/// a client's first 100 cycles measured from the window's start hold each
/// variant exactly its percent of the time: with --min-cycles=100 every
/// variant of a nonzero percent comes in every client's run.
class cycle_dealer {
public:
  cycle_dealer(const workload_mix& mix, std::mt19937_64& rng)
      : mix_(mix), rng_(rng), variants_(rng), taps_(rng) {}

  /// The variant of a cycle beginning at t0 in a run measuring `window`.
  cycle_variant deal(clock_type::time_point t0, const time_window& window);

  /// The cycle dealt last completed: the next one gets the next draws.
  void completed();

private:
  workload_mix mix_;
  std::mt19937_64& rng_;
  percent_deck variants_;
  percent_deck taps_;
  bool measuring_ = false; ///< the decks were restarted at the window
};

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
  /// The measured window: --duration, or longer when --min-cycles held it
  /// open.
  double duration_s = 0;
  client_stats stats;
  std::optional<memory_figures> memory;
  std::optional<run_audit> audit; ///< Postgres after the run
  /// CPU (user + system) over the measured window, per measured cycle: the
  /// server's (--server-pid), this process's when it runs the clients, and
  /// the Postgres cluster's when it runs on this machine.
  std::optional<double> server_cpu_us_per_cycle;
  std::optional<double> bench_cpu_us_per_cycle;
  std::optional<double> postgres_cpu_us_per_cycle;
  /// --statements: what Postgres ran in the window, costliest first.
  std::vector<statement_figures> statements;

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
/// together into the window `make_window` returns (kept open past its end
/// while a thread still lacks o.min_cycles measured cycles) and merges what
/// they measured.
run_result run_clients(const std::string& mode, size_t clients,
                       const bench_options& o, const chat_range& chats,
                       const driver_factory& make_driver,
                       const window_maker& make_window);

} // namespace chargeonce::bench
