// SPDX-License-Identifier: Apache-2.0
#include "actors/persistence_actor.hpp"

#include "actors/log_handlers.hpp"
#include "protocol/errors.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

namespace chargeonce {

namespace {

using self_ptr = persistence_self_actor::stateful_pointer<persistence_state>;
using persistence::batch_op;
using persistence::batch_operation;
using persistence::batch_result;

batch_operation op_on(batch_op op, chat_id chat, reservation_id id = 0) {
  return {op, chat, id, kind::text, {}};
}

/// Applies everything queued in one statement and answers each operation.
/// Runs when the flush message comes up: every operation that arrived
/// before it is in the batch, and nothing waits for a batch to fill.
void flush(self_ptr self) {
  auto& st = self->state;
  while (!st.queue.empty()) {
    auto n = std::min(st.queue.size(), st.limits.batch_operations_max);
    std::vector<queued_operation> batch;
    batch.reserve(n);
    std::move(st.queue.begin(), st.queue.begin() + n,
              std::back_inserter(batch));
    st.queue.erase(st.queue.begin(), st.queue.begin() + n);
    std::vector<batch_operation> ops;
    ops.reserve(n);
    for (const auto& x : batch)
      ops.push_back(x.op);
    auto results = st.db->apply(ops);
    metrics::observe_persistence_batch(n);
    st.depth.set(static_cast<int64_t>(st.queue.size()));
    bool outage = false;
    for (size_t i = 0; i < n; ++i) {
      if (auto err = std::get_if<caf::error>(&results[i]))
        outage = outage || *err == ec::storage_unavailable;
      batch[i].answer(std::move(results[i]));
    }
    if (outage)
      metrics::count_storage_error();
  }
}

/// Queues one hot operation for the next batch; `overloaded` when the queue
/// is full.
template <class T>
caf::result<T> enqueue(self_ptr self, batch_operation op) {
  auto& st = self->state;
  if (st.queue.size() >= st.limits.queue_operations_max) {
    spdlog::warn("overloaded op={} chat={} reservation={} queued={}",
                 to_string(op.op), op.chat, op.id, st.queue.size());
    return caf::make_error(ec::overloaded, "persistence queue full ("
                                             + std::to_string(st.queue.size())
                                             + " operations waiting)");
  }
  auto promise = self->make_response_promise<T>();
  st.queue.push_back({std::move(op), [promise](batch_result&& x) mutable {
                        if (auto err = std::get_if<caf::error>(&x))
                          promise.deliver(std::move(*err));
                        else
                          promise.deliver(std::get<T>(std::move(x)));
                      }});
  st.depth.set(static_cast<int64_t>(st.queue.size()));
  if (!st.flush_pending) {
    st.flush_pending = true;
    self->send(self, atom::flush_v);
  }
  return promise;
}

/// Everything else runs on its own, after what was queued before it, so the
/// actor still answers in arrival order.
template <class F>
auto in_order(self_ptr self, F&& run) {
  flush(self);
  auto result = run(*self->state.db);
  if (!result && result.error() == ec::storage_unavailable)
    metrics::count_storage_error();
  return result;
}

} // namespace

persistence_state::~persistence_state() {
  for (auto& x : queue)
    x.answer(caf::make_error(ec::storage_unavailable,
                             "persistence actor stopped before the batch "
                             "ran; nothing was written"));
}

persistence_self_actor::behavior_type
make_persistence(self_ptr self, persistence::store_options opts,
                 persistence_limits limits) {
  install_log_handlers(self);
  self->state.db = std::make_unique<persistence::store>(std::move(opts));
  self->state.limits = limits;
  using persistence::store;
  return {
    [self](atom::flush) {
      self->state.flush_pending = false;
      flush(self);
    },
    [self](atom::reserve, chat_id chat, kind k, const std::string& request_id) {
      return enqueue<reservation>(self,
                                  {batch_op::reserve, chat, 0, k, request_id});
    },
    [self](atom::start, chat_id chat, reservation_id id) {
      return enqueue<reservation>(self, op_on(batch_op::start, chat, id));
    },
    [self](atom::heartbeat, chat_id chat, reservation_id id) {
      return enqueue<reservation>(self, op_on(batch_op::heartbeat, chat, id));
    },
    [self](atom::commit, chat_id chat, reservation_id id) {
      return enqueue<receipt>(self, op_on(batch_op::commit, chat, id));
    },
    [self](atom::fail, chat_id chat, reservation_id id) {
      return enqueue<reservation>(self, op_on(batch_op::fail, chat, id));
    },
    [self](atom::cancel, chat_id chat) {
      return enqueue<reservation>(self, op_on(batch_op::cancel, chat));
    },
    [self](atom::status, chat_id chat) {
      return enqueue<chat_status>(self, op_on(batch_op::status, chat));
    },
    [self](atom::create, const chat_spec& spec) -> caf::result<chat_status> {
      return in_order(self, [&](store& db) { return db.create_chat(spec); });
    },
    [self](atom::release, chat_id chat,
           reservation_id id) -> caf::result<reservation_released> {
      return in_order(self, [&](store& db) { return db.release(chat, id); });
    },
    [self](atom::sweep, const sweep_cursor& after,
           uint32_t limit) -> caf::result<std::vector<sweep_candidate>> {
      return in_order(self,
                      [&](store& db) { return db.sweep_chunk(after, limit); });
    },
    [self](atom::prune) -> caf::result<uint64_t> {
      return in_order(self, [](store& db) { return db.prune(); });
    },
    [self](atom::count) -> caf::result<int64_t> {
      return in_order(self, [](store& db) { return db.count_active(); });
    },
    [self](atom::touch, chat_id chat) -> caf::result<chat_status> {
      return in_order(self, [&](store& db) { return db.touch(chat); });
    },
    [self](atom::top_up, chat_id chat, int64_t credits,
           const std::string& payment_id) -> caf::result<top_up_receipt> {
      return in_order(
        self, [&](store& db) { return db.top_up(chat, credits, payment_id); });
    },
    [self](atom::premium, chat_id chat,
           caf::timestamp until) -> caf::result<chat_status> {
      return in_order(self,
                      [&](store& db) { return db.set_premium(chat, until); });
    },
    [self](atom::flags, chat_id chat,
           const flags_update& x) -> caf::result<chat_status> {
      return in_order(self, [&](store& db) { return db.set_flags(chat, x); });
    },
    [self](atom::reactivate, const reactivation_cursor& after,
           uint32_t limit) -> caf::result<reactivation_page> {
      return in_order(
        self, [&](store& db) { return db.reactivation_chunk(after, limit); });
    },
  };
}

persistence_factory make_persistence_factory(caf::actor_system& sys,
                                             persistence::store_options opts,
                                             persistence_limits limits) {
  return [&sys, opts, limits]() -> persistence_actor {
    return sys.spawn<caf::detached>(make_persistence, opts, limits);
  };
}

} // namespace chargeonce
