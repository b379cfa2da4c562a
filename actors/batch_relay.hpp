// SPDX-License-Identifier: Apache-2.0
// The server's side of client batching: a facade relays each operation of a
// batch to the registry (each chat actor still serializes its own chat, and
// the persistence actors group what arrives together into one commit), then
// answers the whole batch at once, in order.
#pragma once

#include "actors/metrics.hpp"
#include "protocol/errors.hpp"
#include "protocol/interfaces.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <vector>

namespace chargeonce {

namespace detail {

inline outcome as_outcome(reservation x) {
  return {caf::none, std::move(x), caf::none, caf::none};
}

inline outcome as_outcome(receipt x) {
  return {caf::none, caf::none, std::move(x), caf::none};
}

inline outcome as_outcome(chat_status x) {
  return {caf::none, caf::none, caf::none, std::move(x)};
}

inline outcome as_outcome(caf::error x) {
  return {std::move(x), caf::none, caf::none, caf::none};
}

/// The metrics label of a batched operation.
inline metrics::operation metric_of(operation_type x) {
  switch (x) {
  case operation_type::touch:
    return metrics::operation::touch;
  case operation_type::reserve:
    return metrics::operation::reserve;
  case operation_type::cancel:
    return metrics::operation::cancel;
  case operation_type::start:
    return metrics::operation::start;
  case operation_type::heartbeat:
    return metrics::operation::heartbeat;
  case operation_type::commit:
    return metrics::operation::commit;
  case operation_type::fail:
    return metrics::operation::fail;
  case operation_type::status:
    break;
  }
  return metrics::operation::status;
}

/// One operation of the batch to the registry; `done` gets its outcome.
template <class T, class Self, class Done, class... Ts>
void relay_one(Self* self, const api_actor& api, const caf::duration& timeout,
               Done done, Ts... xs) {
  self->request(api, timeout, xs...)
    .then(
      [done](T& x) mutable { done(as_outcome(std::move(x))); },
      [done](caf::error& err) mutable { done(as_outcome(std::move(err))); });
}

template <class Self, class Done>
void dispatch(Self* self, const api_actor& api, const caf::duration& timeout,
              const operation& op, Done done) {
  switch (op.type) {
  case operation_type::touch:
    return relay_one<chat_status>(self, api, timeout, done, atom::touch_v,
                                  op.chat);
  case operation_type::reserve:
    return relay_one<reservation>(self, api, timeout, done, atom::reserve_v,
                                  op.chat, op.kind, op.request_id);
  case operation_type::cancel:
    return relay_one<reservation>(self, api, timeout, done, atom::cancel_v,
                                  op.chat);
  case operation_type::status:
    return relay_one<chat_status>(self, api, timeout, done, atom::status_v,
                                  op.chat);
  case operation_type::start:
    return relay_one<reservation>(self, api, timeout, done, atom::start_v,
                                  op.chat, op.reservation);
  case operation_type::heartbeat:
    return relay_one<reservation>(self, api, timeout, done, atom::heartbeat_v,
                                  op.chat, op.reservation);
  case operation_type::commit:
    return relay_one<receipt>(self, api, timeout, done, atom::commit_v, op.chat,
                              op.reservation);
  case operation_type::fail:
    return relay_one<reservation>(self, api, timeout, done, atom::fail_v,
                                  op.chat, op.reservation);
  }
}

} // namespace detail

/// Relays `ops` and answers them all at once. `allowed` is the endpoint's
/// role: an operation outside it is refused with invalid_argument and never
/// reaches the registry.
template <class Self>
caf::result<std::vector<outcome>>
relay_batch(Self* self, const api_actor& api, const caf::duration& timeout,
            std::vector<operation> ops, bool (*allowed)(operation_type)) {
  if (ops.size() > batch_operations_max)
    return caf::make_error(ec::invalid_argument,
                           "a batch holds at most "
                             + std::to_string(batch_operations_max)
                             + " operations");
  if (ops.empty())
    return std::vector<outcome>{};
  auto rp = self->template make_response_promise<std::vector<outcome>>();
  // Callbacks run in this actor, one at a time: no atomics needed.
  auto answers = std::make_shared<std::vector<outcome>>(ops.size());
  auto left = std::make_shared<size_t>(ops.size());
  auto t0 = self->clock().now();
  for (size_t i = 0; i < ops.size(); ++i) {
    auto type = ops[i].type;
    auto done = [self, t0, type, rp, answers, left, i](outcome x) mutable {
      // Counted like single operations (one per operation, not per batch).
      if (is_valid(type))
        metrics::record_operation(detail::metric_of(type), x.error,
                                  self->clock().now() - t0);
      (*answers)[i] = std::move(x);
      if (--*left == 0)
        rp.deliver(std::move(*answers));
    };
    const auto& op = ops[i];
    if (!is_valid(op.type) || !allowed(op.type))
      done(detail::as_outcome(caf::make_error(
        ec::invalid_argument, std::string{"operation "} + to_string(op.type)
                                + " is not offered on this port")));
    else
      detail::dispatch(self, api, timeout, op, done);
  }
  return rp;
}

inline bool any_operation(operation_type) {
  return true;
}

inline bool gateway_operation(operation_type x) {
  return is_gateway_operation(x);
}

inline bool worker_operation(operation_type x) {
  return !is_gateway_operation(x);
}

} // namespace chargeonce
