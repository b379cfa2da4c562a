// SPDX-License-Identifier: Apache-2.0
#include "main/bench_loop.hpp"

#include "protocol/errors.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace chargeonce::bench {

namespace {

/// Unexpected errors printed per run; the rest are only counted.
constexpr int unexpected_printed_max = 5;

const char* name_of(op x) {
  return op_names[static_cast<size_t>(x)];
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

  void open_when_ready(const window_maker& make_window) {
    std::unique_lock<std::mutex> guard{mtx_};
    cv_.wait(guard, [this] { return waiting_ == 0; });
    window_ = make_window();
    open_ = true;
    cv_.notify_all();
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
              client_stats& stats, uint64_t seed)
      : d_(d), chats_(chats), mix_(mix), stats_(stats), rng_(seed) {}

  void run(const time_window& window) {
    window_ = window;
    while (clock_type::now() < window_.until)
      cycle();
  }

private:
  /// Busy on the first reserve is a chat held by another client: an
  /// outcome, not an error. Every other failure is unexpected.
  void cycle() {
    auto chat = chats_.pick(rng_);
    auto roll = percent();
    auto t0 = clock_type::now();
    auto id = reserve(chat);
    if (!id)
      return;
    bool ok = true;
    if (percent() < mix_.double_tap)
      ok = double_tap(chat);
    bool committed = false;
    if (ok && roll < mix_.cancel)
      ok = step(op::cancel, chat, [&] { return d_.cancel(chat); });
    else if (ok) {
      ok = step(op::start, chat, [&] { return d_.start(chat, *id); });
      bool fails = roll < mix_.cancel + mix_.fail;
      if (ok && fails)
        ok = step(op::fail, chat, [&] { return d_.fail(chat, *id); });
      else if (ok)
        ok = committed =
          step(op::commit, chat, [&] { return d_.commit(chat, *id); });
    }
    if (!ok) {
      d_.fail(chat, *id); // free the chat for later cycles; best effort
      return;
    }
    finish_cycle(t0, committed);
  }

  caf::expected<reservation_id> reserve(chat_id chat) {
    caf::expected<reservation_id> out{caf::sec::none};
    auto err = timed(op::reserve, [&] {
      out = d_.reserve(chat);
      return error_of(out);
    });
    if (err && err != ec::busy)
      unexpected(op::reserve, chat, error_name(err), error_message(err));
    return out;
  }

  /// A second reserve of a chat we hold must be busy, never a reservation.
  bool double_tap(chat_id chat) {
    caf::expected<reservation_id> second{caf::sec::none};
    auto err = timed(op::double_tap, [&] {
      second = d_.reserve(chat);
      return error_of(second);
    });
    if (err == ec::busy)
      return true;
    if (second)
      unexpected(op::double_tap, chat, "not_busy",
                 "a second reserve got reservation " + std::to_string(*second));
    else
      unexpected(op::double_tap, chat, error_name(err), error_message(err));
    return false;
  }

  template <class F>
  bool step(op which, chat_id chat, F call) {
    auto err = timed(which, call);
    if (err)
      unexpected(which, chat, error_name(err), error_message(err));
    return !err;
  }

  /// Runs `call`, records its latency and outcome if it ended in the window.
  template <class F>
  caf::error timed(op which, F call) {
    auto t0 = clock_type::now();
    caf::error err = call();
    auto t1 = clock_type::now();
    if (window_.contains(t1)) {
      record(which, t0, t1);
      ++outcomes(which)[outcome_name(which, err)];
    }
    return err;
  }

  static std::string outcome_name(op which, const caf::error& err) {
    if (!err)
      return which == op::double_tap ? "not_busy" : "ok";
    return error_name(err);
  }

  void finish_cycle(clock_type::time_point t0, bool committed) {
    auto t1 = clock_type::now();
    if (!window_.contains(t1))
      return;
    record(op::cycle, t0, t1);
    ++stats_.cycles;
    stats_.commits += committed ? 1 : 0;
  }

  void record(op which, clock_type::time_point t0, clock_type::time_point t1) {
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0);
    stats_.latency[static_cast<size_t>(which)].record(
      static_cast<uint64_t>(us.count()));
  }

  std::map<std::string, uint64_t>& outcomes(op which) {
    return stats_.outcomes[static_cast<size_t>(which)];
  }

  void unexpected(op which, chat_id chat, const std::string& name,
                  const std::string& message) {
    if (++stats_.unexpected <= unexpected_printed_max)
      spdlog::error("unexpected outcome op={} chat={} error={} message={}",
                    name_of(which), chat, name, message);
  }

  int percent() { return std::uniform_int_distribution<int>{0, 99}(rng_); }

  driver& d_;
  chat_picker& chats_;
  const workload_mix& mix_;
  client_stats& stats_;
  std::mt19937_64 rng_;
  time_window window_;
};

} // namespace

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
  std::random_device seed;
  for (size_t i = 0; i < clients; ++i) {
    auto thread_seed = (uint64_t{seed()} << 32) | seed();
    threads.emplace_back([&, i, thread_seed] {
      auto d = make_driver();
      d->connect(chats.first + 1);
      client_loop loop{*d, picker, o.mix, per_thread[i], thread_seed};
      loop.run(gate.arrive_and_wait());
    });
  }
  gate.open_when_ready(make_window);
  for (auto& t : threads)
    t.join();
  run_result out{mode, clients, 1, static_cast<double>(o.duration_s), {}, {}};
  for (const auto& x : per_thread)
    out.stats.merge(x);
  out.stats.touched = picker.touched();
  return out;
}

} // namespace chargeonce::bench
