// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/loop.hpp"

#include "protocol/errors.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

namespace chargeonce::bench {

namespace {

/// Unexpected errors printed per run; the rest are only counted.
constexpr int unexpected_printed_max = 5;

const char* name_of(op x) {
  return op_names[static_cast<size_t>(x)];
}

std::string outcome_name(op which, const caf::error& err) {
  if (!err)
    return which == op::double_tap ? "not_busy" : "ok";
  return error_name(err);
}

/// Releases all client threads at once, after their connections are open,
/// and hands them the measuring window.
class start_gate {
public:
  explicit start_gate(size_t parties) : waiting_(parties) {}

  time_window arrive_and_wait() {
    std::unique_lock<std::mutex> guard{mtx_};
    if (--waiting_ == 0)
      cv_.notify_all();
    cv_.wait(guard, [this] { return open_; });
    return window_;
  }

  time_window open_when_ready(const window_maker& make_window) {
    std::unique_lock<std::mutex> guard{mtx_};
    cv_.wait(guard, [this] { return waiting_ == 0; });
    window_ = make_window();
    open_ = true;
    cv_.notify_all();
    return window_;
  }

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  size_t waiting_;
  bool open_ = false;
  time_window window_;
};

/// The closed loop of one client thread: the next cycle starts when the
/// previous one ended.
class client_loop {
public:
  client_loop(driver& d, chat_picker& chats, const workload_mix& mix,
              client_stats& stats, const time_window& window,
              cycle_quota& quota, uint64_t seed)
      : d_(d), chats_(chats), rec_(stats, window, quota), rng_(seed),
        dealer_(mix, rng_) {}

  void run() {
    while (rec_.running())
      cycle();
  }

private:
  /// Busy on the first reserve is a chat held by another client: an
  /// outcome, not an error. Every other failure is unexpected.
  void cycle() {
    auto chat = chats_.pick(rng_);
    auto t0 = clock_type::now();
    auto variant = dealer_.deal(t0, rec_.window());
    auto id = reserve(chat);
    if (!id)
      return;
    bool ok = true;
    if (variant.double_tap)
      ok = double_tap(chat);
    bool committed = false;
    if (ok && variant.cancel)
      ok = step(op::cancel, chat, [&] { return d_.cancel(chat); });
    else if (ok) {
      ok = step(op::start, chat, [&] { return d_.start(chat, *id); });
      if (ok && variant.fail)
        ok = step(op::fail, chat, [&] { return d_.fail(chat, *id); });
      else if (ok)
        ok = committed =
          step(op::commit, chat, [&] { return d_.commit(chat, *id); });
    }
    if (!ok) {
      d_.fail(chat, *id); // free the chat for later cycles; best effort
      return;
    }
    rec_.finish_cycle(t0, committed);
    dealer_.completed();
  }

  caf::expected<reservation_id> reserve(chat_id chat) {
    auto t0 = clock_type::now();
    auto out = d_.reserve(chat);
    auto err = rec_.ended(op::reserve, t0, error_of(out));
    if (err && err != ec::busy)
      rec_.unexpected(op::reserve, chat, err);
    return out;
  }

  /// A second reserve of a chat we hold must be busy, never a reservation.
  bool double_tap(chat_id chat) {
    auto t0 = clock_type::now();
    auto second = d_.reserve(chat);
    rec_.ended(op::double_tap, t0, error_of(second));
    return double_tap_was_busy(rec_, chat, second);
  }

  template <class F>
  bool step(op which, chat_id chat, F call) {
    auto t0 = clock_type::now();
    auto err = rec_.ended(which, t0, call());
    if (err)
      rec_.unexpected(which, chat, err);
    return !err;
  }

  driver& d_;
  chat_picker& chats_;
  cycle_recorder rec_;
  std::mt19937_64 rng_;
  cycle_dealer dealer_; ///< draws from rng_, so declared after it
};

} // namespace

void cycle_quota::leave() {
  if (--short_ == 0)
    met_at_ = clock_type::now().time_since_epoch().count();
}

clock_type::time_point cycle_quota::close_of(const time_window& window) const {
  clock_type::time_point met{clock_type::duration{met_at_.load()}};
  return std::max(window.until, met);
}

double cycle_quota::seconds_of(const time_window& window) const {
  return std::chrono::duration<double>(close_of(window) - window.from).count();
}

bool cycle_recorder::running() const {
  return clock_type::now() < window_.until || quota_.open();
}

/// Checked as an operation ends: while a client lacks its quota, the end
/// of the window is not yet known.
bool cycle_recorder::in_window(clock_type::time_point t) const {
  return t >= window_.from && (t < window_.until || quota_.open());
}

void cycle_recorder::leave_quota() {
  if (!owes_quota_)
    return;
  owes_quota_ = false;
  quota_.leave();
}

caf::error cycle_recorder::ended(op which, clock_type::time_point t0,
                                 caf::error err) {
  auto t1 = clock_type::now();
  if (which == op::commit && !err)
    ++stats_.acknowledged;
  if (in_window(t1)) {
    record(which, t0, t1);
    ++stats_.outcomes[static_cast<size_t>(which)][outcome_name(which, err)];
  }
  return err;
}

void cycle_recorder::finish_cycle(clock_type::time_point t0, bool committed) {
  auto t1 = clock_type::now();
  if (!in_window(t1))
    return;
  record(op::cycle, t0, t1);
  ++stats_.cycles;
  stats_.commits += committed ? 1 : 0;
  if (t0 >= window_.from && ++quota_cycles_ >= quota_.min_cycles())
    leave_quota();
}

void cycle_recorder::record(op which, clock_type::time_point t0,
                            clock_type::time_point t1) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0);
  stats_.latency[static_cast<size_t>(which)].record(
    static_cast<uint64_t>(us.count()));
}

void cycle_recorder::unexpected(op which, chat_id chat, const std::string& name,
                                const std::string& message) {
  leave_quota();
  if (++stats_.unexpected <= unexpected_printed_max)
    spdlog::error("unexpected outcome op={} chat={} error={} message={}",
                  name_of(which), chat, name, message);
}

void cycle_recorder::unexpected(op which, chat_id chat, const caf::error& err) {
  unexpected(which, chat, error_name(err), error_message(err));
}

bool double_tap_was_busy(cycle_recorder& rec, chat_id chat,
                         const caf::expected<reservation_id>& second) {
  if (!second && second.error() == ec::busy)
    return true;
  if (second)
    rec.unexpected(op::double_tap, chat, "not_busy",
                   "a second reserve got reservation "
                     + std::to_string(*second));
  else
    rec.unexpected(op::double_tap, chat, second.error());
  return false;
}

void percent_deck::next(std::mt19937_64& rng) {
  if (++at_ == cards_.size())
    restart(rng);
}

void percent_deck::restart(std::mt19937_64& rng) {
  std::iota(cards_.begin(), cards_.end(), 0);
  std::shuffle(cards_.begin(), cards_.end(), rng);
  at_ = 0;
}

cycle_variant cycle_dealer::deal(clock_type::time_point t0,
                                 const time_window& window) {
  if (!measuring_ && t0 >= window.from) {
    measuring_ = true;
    variants_.restart(rng_);
    taps_.restart(rng_);
  }
  auto roll = variants_.draw();
  cycle_variant out;
  out.cancel = roll < mix_.cancel;
  out.fail = !out.cancel && roll < mix_.cancel + mix_.fail;
  out.double_tap = taps_.draw() < mix_.double_tap;
  return out;
}

void cycle_dealer::completed() {
  variants_.next(rng_);
  taps_.next(rng_);
}

chat_id chat_picker::pick(std::mt19937_64& rng) {
  if (order_ == chat_order::sequential)
    return range_.first + 1 + next_.fetch_add(1) % range_.count;
  std::uniform_int_distribution<int64_t> offset{1, range_.count};
  return range_.first + offset(rng);
}

uint64_t chat_picker::touched() const {
  if (order_ != chat_order::sequential)
    return 0;
  return static_cast<uint64_t>(std::min(next_.load(), range_.count));
}

void client_stats::merge(const client_stats& other) {
  for (size_t i = 0; i < op_count; ++i) {
    latency[i].merge(other.latency[i]);
    for (const auto& [name, n] : other.outcomes[i])
      outcomes[i][name] += n;
  }
  cycles += other.cycles;
  commits += other.commits;
  acknowledged += other.acknowledged;
  unexpected += other.unexpected;
  touched += other.touched;
}

time_window window_from_now(const bench_options& o) {
  auto from = clock_type::now() + std::chrono::seconds(o.warmup_s);
  return time_window{from, from + std::chrono::seconds(o.duration_s)};
}

run_result run_clients(const std::string& mode, size_t clients,
                       const bench_options& o, const chat_range& chats,
                       const driver_factory& make_driver,
                       const window_maker& make_window) {
  std::vector<client_stats> per_thread(clients);
  std::vector<std::thread> threads;
  chat_picker picker{chats, o.order};
  start_gate gate{clients};
  cycle_quota quota{clients, static_cast<uint64_t>(o.min_cycles)};
  std::random_device seed;
  for (size_t i = 0; i < clients; ++i) {
    auto thread_seed = (uint64_t{seed()} << 32) | seed();
    threads.emplace_back([&, i, thread_seed] {
      auto d = make_driver();
      d->connect(chats.first + 1);
      auto window = gate.arrive_and_wait();
      client_loop loop{*d,     picker, o.mix,      per_thread[i],
                       window, quota,  thread_seed};
      loop.run();
    });
  }
  auto window = gate.open_when_ready(make_window);
  for (auto& t : threads)
    t.join();
  run_result out{mode, clients, 1, quota.seconds_of(window), {}, {}, {}, {},
                 {},   {},      {}};
  for (const auto& x : per_thread)
    out.stats.merge(x);
  out.stats.touched = picker.touched();
  return out;
}

} // namespace chargeonce::bench
