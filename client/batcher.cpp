// SPDX-License-Identifier: Apache-2.0
#include "client/batcher.hpp"

#include "protocol/interfaces.hpp"

#include <caf/all.hpp>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

namespace chargeonce::client {

namespace {

struct queued {
  operation op;
  std::function<void(outcome)> answer;
};

/// What a batch-capable endpoint answers; the sender only needs this much.
using batch_endpoint = caf::typed_actor<batch_signature>;

} // namespace

/// Shared by the calling threads (which queue) and the sender actor (which
/// drains): one queue and one in-flight count per server.
struct batcher::state {
  struct lane {
    std::vector<queued> queue;
    size_t in_flight = 0;
  };
  batcher_options opts;
  std::mutex mtx;
  std::map<caf::actor_addr, lane> lanes;
  std::map<caf::actor_addr, caf::actor> handles;
  batcher::totals sent; ///< guarded by mtx
};

namespace {

using state_ptr = std::shared_ptr<batcher::state>;

void drain(caf::event_based_actor* self, const state_ptr& st,
           const caf::actor_addr& to);

/// Answers every operation of a batch, then sends what queued meanwhile.
void settle(caf::event_based_actor* self, const state_ptr& st,
            const caf::actor_addr& to, std::vector<queued>& batch,
            std::vector<outcome>* answers, const caf::error& failure) {
  for (size_t i = 0; i < batch.size(); ++i) {
    if (answers != nullptr && i < answers->size())
      batch[i].answer(std::move((*answers)[i]));
    else
      batch[i].answer(outcome{
        failure ? failure
                : caf::make_error(caf::sec::unexpected_response,
                                  "the server answered fewer operations "
                                  "than the batch held"),
        caf::none, caf::none, caf::none});
  }
  {
    std::lock_guard<std::mutex> guard{st->mtx};
    --st->lanes[to].in_flight;
  }
  drain(self, st, to);
}

/// Sends everything queued for `to` as batches, while the in-flight limit
/// allows.
void drain(caf::event_based_actor* self, const state_ptr& st,
           const caf::actor_addr& to) {
  for (;;) {
    auto batch = std::make_shared<std::vector<queued>>();
    caf::actor dst;
    {
      std::lock_guard<std::mutex> guard{st->mtx};
      auto& lane = st->lanes[to];
      if (lane.queue.empty()
          || lane.in_flight >= st->opts.batches_in_flight_max)
        return;
      auto n = std::min(lane.queue.size(), st->opts.batch_operations_max);
      auto batch_end = lane.queue.begin() + static_cast<std::ptrdiff_t>(n);
      std::move(lane.queue.begin(), batch_end, std::back_inserter(*batch));
      lane.queue.erase(lane.queue.begin(), batch_end);
      ++lane.in_flight;
      ++st->sent.batches;
      st->sent.operations += n;
      dst = st->handles[to];
    }
    std::vector<operation> ops;
    ops.reserve(batch->size());
    for (const auto& x : *batch)
      ops.push_back(x.op);
    self
      ->request(caf::actor_cast<batch_endpoint>(dst), st->opts.timeout,
                atom::batch_v, std::move(ops))
      .then(
        [self, st, to, batch](std::vector<outcome>& answers) {
          settle(self, st, to, *batch, &answers, caf::none);
        },
        [self, st, to, batch](caf::error& err) {
          settle(self, st, to, *batch, nullptr, err);
        });
  }
}

caf::behavior sender(caf::event_based_actor* self, state_ptr st) {
  return {
    [self, st = std::move(st)](atom::batch, const caf::actor_addr& to) {
      drain(self, st, to);
    },
  };
}

} // namespace

batcher::batcher(caf::actor_system& sys, batcher_options opts)
    : state_(std::make_shared<state>()) {
  state_->opts = opts;
  // The server refuses a larger batch as a whole: never send one.
  state_->opts.batch_operations_max = std::clamp<size_t>(
    opts.batch_operations_max, 1, batch_message_operations_max);
  sender_ = sys.spawn(sender, state_);
}

batcher::~batcher() {
  // Operations still queued are dropped by an actor of the client's, not
  // by the thread destroying the batcher: dropping one answers its caller
  // (a broken promise, or an asynchronous call's continuation).
  auto orphans = std::make_shared<std::vector<queued>>();
  {
    std::lock_guard<std::mutex> guard{state_->mtx};
    for (auto& [to, lane] : state_->lanes) {
      std::move(lane.queue.begin(), lane.queue.end(),
                std::back_inserter(*orphans));
      lane.queue.clear();
    }
  }
  caf::anon_send_exit(sender_, caf::exit_reason::user_shutdown);
  if (!orphans->empty())
    sender_->home_system().spawn(
      [orphans](caf::event_based_actor*) { orphans->clear(); });
}

batcher::totals batcher::sent() const {
  std::lock_guard<std::mutex> guard{state_->mtx};
  return state_->sent;
}

std::future<outcome> batcher::submit(const caf::actor& to, operation op) {
  // Shared: std::function needs a copyable target. A promise destroyed
  // unset breaks the future, which the caller sees.
  auto answer = std::make_shared<std::promise<outcome>>();
  auto out = answer->get_future();
  submit(to, std::move(op),
         [answer](outcome x) { answer->set_value(std::move(x)); });
  return out;
}

void batcher::submit(const caf::actor& to, operation op,
                     std::function<void(outcome)> done) {
  {
    std::lock_guard<std::mutex> guard{state_->mtx};
    state_->handles[to.address()] = to;
    state_->lanes[to.address()].queue.push_back(
      queued{std::move(op), std::move(done)});
  }
  // The sender takes everything queued by then: later nudges find less.
  caf::anon_send(sender_, atom::batch_v, to.address());
}

} // namespace chargeonce::client
