// SPDX-License-Identifier: Apache-2.0
#include "main/bench/async.hpp"

#include "protocol/errors.hpp"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>

namespace chargeonce::bench {

namespace {

/// What every loop of one run shares. Held by the loops themselves, so
/// that nothing they touch goes away before their last continuation.
struct async_run {
  async_run(chat_range chats, chat_order order, workload_mix mix,
            time_window window, size_t loops)
      : picker(chats, order), mix(mix), window(window), running(loops) {}

  chat_picker picker;
  const workload_mix mix;
  const time_window window;

  /// A loop stopped: its figures join the run's.
  void arrive(const client_stats& stats) {
    std::lock_guard<std::mutex> guard{mtx};
    total.merge(stats);
    if (--running == 0)
      done.notify_all();
  }

  /// The merged figures once every loop stopped, or nothing by `deadline`.
  std::optional<client_stats> wait_until(clock_type::time_point deadline) {
    std::unique_lock<std::mutex> guard{mtx};
    if (!done.wait_until(guard, deadline, [this] { return running == 0; }))
      return std::nullopt;
    return total;
  }

private:
  std::mutex mtx;
  std::condition_variable done;
  size_t running;
  client_stats total;
};

/// One closed-loop client: every answer's continuation makes its next call,
/// on the client library's thread. Only one call of a loop is ever on the
/// way, so its members need no lock.
class async_loop : public std::enable_shared_from_this<async_loop> {
public:
  async_loop(client::client& api, std::shared_ptr<async_run> run, uint64_t seed)
      : api_(api), run_(std::move(run)), rec_(stats_, run_->window),
        rng_(seed) {}

  /// Starts a cycle unless the window is over; then hands in the figures.
  void next_cycle() {
    if (clock_type::now() >= run_->window.until) {
      run_->arrive(stats_);
      return;
    }
    chat_ = run_->picker.pick(rng_);
    roll_ = percent(rng_);
    cycle_t0_ = op_t0_ = clock_type::now();
    api_.reserve(chat_, kind::image, {},
                 [self = shared_from_this()](
                   const caf::expected<reservation>& x) { self->reserved(x); });
  }

private:
  /// Busy on the first reserve is a chat held by another client: an
  /// outcome, not an error. Every other failure is unexpected.
  void reserved(const caf::expected<reservation>& x) {
    auto err = rec_.ended(op::reserve, op_t0_, error_of(x));
    if (err) {
      if (err != ec::busy)
        rec_.unexpected(op::reserve, chat_, err);
      next_cycle();
      return;
    }
    id_ = x->id;
    if (percent(rng_) >= run_->mix.double_tap) {
      proceed();
      return;
    }
    op_t0_ = clock_type::now();
    api_.reserve(
      chat_, kind::image, {},
      [self = shared_from_this()](const caf::expected<reservation>& x) {
        self->double_tapped(x);
      });
  }

  void double_tapped(const caf::expected<reservation>& x) {
    rec_.ended(op::double_tap, op_t0_, error_of(x));
    caf::expected<reservation_id> second{caf::sec::none};
    if (x)
      second = x->id;
    else
      second = x.error();
    if (double_tap_was_busy(rec_, chat_, second))
      proceed();
    else
      release();
  }

  /// After the reserve: cancel, or start and then fail or commit.
  void proceed() {
    if (roll_ < run_->mix.cancel) {
      step<reservation>(
        op::cancel,
        [this](client::continuation<reservation> k) {
          api_.cancel(chat_, std::move(k));
        },
        [](async_loop& l) { l.finish(false); });
      return;
    }
    step<reservation>(
      op::start,
      [this](client::continuation<reservation> k) {
        api_.start(chat_, id_, std::move(k));
      },
      [](async_loop& l) { l.started(); });
  }

  void started() {
    if (roll_ < run_->mix.cancel + run_->mix.fail) {
      step<reservation>(
        op::fail,
        [this](client::continuation<reservation> k) {
          api_.fail(chat_, id_, std::move(k));
        },
        [](async_loop& l) { l.finish(false); });
      return;
    }
    step<receipt>(
      op::commit,
      [this](client::continuation<receipt> k) {
        api_.commit(chat_, id_, std::move(k));
      },
      [](async_loop& l) { l.finish(true); });
  }

  /// Makes one call through `issue`; its answer is recorded as `which`,
  /// then the cycle goes on with `next`, or the chat is freed on an error.
  template <class T, class Issue, class Next>
  void step(op which, Issue issue, Next next) {
    op_t0_ = clock_type::now();
    issue([self = shared_from_this(), which, next](caf::expected<T> x) {
      auto err = self->rec_.ended(which, self->op_t0_, error_of(x));
      if (err) {
        self->rec_.unexpected(which, self->chat_, err);
        self->release();
        return;
      }
      next(*self);
    });
  }

  void finish(bool committed) {
    rec_.finish_cycle(cycle_t0_, committed);
    next_cycle();
  }

  /// Frees the chat for later cycles after an unexpected error; best
  /// effort, as in the blocking loop.
  void release() {
    api_.fail(chat_, id_,
              [self = shared_from_this()](const caf::expected<reservation>&) {
                self->next_cycle();
              });
  }

  client::client& api_;
  std::shared_ptr<async_run> run_;
  client_stats stats_;
  cycle_recorder rec_;
  std::mt19937_64 rng_;
  chat_id chat_ = 0;
  int roll_ = 0;
  reservation_id id_ = 0;
  clock_type::time_point cycle_t0_;
  clock_type::time_point op_t0_;
};

} // namespace

run_result run_async_clients(client::client& api, size_t clients,
                             const bench_options& o, const chat_range& chats) {
  auto window = window_from_now(o);
  auto run =
    std::make_shared<async_run>(chats, o.order, o.mix, window, clients);
  std::random_device seed;
  for (size_t i = 0; i < clients; ++i) {
    auto loop_seed = (uint64_t{seed()} << 32) | seed();
    std::make_shared<async_loop>(api, run, loop_seed)->next_cycle();
  }
  // A loop's last call can take up to a request's timeout past the window.
  auto stats =
    run->wait_until(window.until + request_timeout + std::chrono::seconds(5));
  if (!stats)
    throw std::runtime_error("asynchronous clients did not stop after the "
                             "window");
  run_result out{"remote_async", clients, 1, static_cast<double>(o.duration_s),
                 *stats,         {},      {}};
  out.stats.touched = run->picker.touched();
  return out;
}

} // namespace chargeonce::bench
