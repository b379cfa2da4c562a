// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/async.hpp"

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
            time_window window, size_t loops, uint64_t min_cycles)
      : picker(chats, order), mix(mix), window(window),
        quota(loops, min_cycles), running(loops) {}

  chat_picker picker;
  const workload_mix mix;
  const time_window window;
  cycle_quota quota;

  /// A loop stopped: its figures join the run's.
  void arrive(const client_stats& stats) {
    std::lock_guard<std::mutex> guard{mtx};
    total.merge(stats);
    if (--running == 0)
      done.notify_all();
  }

  /// The merged figures once every loop stopped, or nothing when they
  /// have not `grace` after the window closed (which the quota may delay).
  std::optional<client_stats> wait(clock_type::duration grace) {
    std::unique_lock<std::mutex> guard{mtx};
    for (;;) {
      if (done.wait_for(guard, std::chrono::seconds(1),
                        [this] { return running == 0; }))
        return total;
      if (!quota.open() && clock_type::now() > quota.close_of(window) + grace)
        return std::nullopt;
    }
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
      : api_(api), run_(std::move(run)),
        rec_(stats_, run_->window, run_->quota), rng_(seed),
        dealer_(run_->mix, rng_) {}

  /// Starts a cycle unless the window is over; then hands in the figures.
  void next_cycle() {
    if (!rec_.running()) {
      run_->arrive(stats_);
      return;
    }
    chat_ = run_->picker.pick(rng_);
    cycle_t0_ = op_t0_ = clock_type::now();
    variant_ = dealer_.deal(cycle_t0_, run_->window);
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
    if (!variant_.double_tap) {
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
    if (variant_.cancel) {
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
    if (variant_.fail) {
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
    dealer_.completed();
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
  cycle_dealer dealer_; ///< draws from rng_, so declared after it
  chat_id chat_ = 0;
  cycle_variant variant_;
  reservation_id id_ = 0;
  clock_type::time_point cycle_t0_;
  clock_type::time_point op_t0_;
};

} // namespace

run_result run_async_clients(client::client& api, size_t clients,
                             const bench_options& o, const chat_range& chats,
                             const window_maker& make_window) {
  auto window = make_window();
  auto run = std::make_shared<async_run>(chats, o.order, o.mix, window, clients,
                                         static_cast<uint64_t>(o.min_cycles));
  std::random_device seed;
  for (size_t i = 0; i < clients; ++i) {
    auto loop_seed = (uint64_t{seed()} << 32) | seed();
    std::make_shared<async_loop>(api, run, loop_seed)->next_cycle();
  }
  // A loop's last call can take up to a request's timeout past the window.
  auto stats = run->wait(request_timeout + std::chrono::seconds(5));
  if (!stats)
    throw std::runtime_error("asynchronous clients did not stop after the "
                             "window");
  run_result out{"remote_async",
                 clients,
                 1,
                 run->quota.seconds_of(window),
                 *stats,
                 {},
                 {},
                 {},
                 {},
                 {},
                 {}};
  out.stats.touched = run->picker.touched();
  return out;
}

} // namespace chargeonce::bench
