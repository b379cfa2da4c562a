// SPDX-License-Identifier: Apache-2.0
// The server's side of client batching: a facade relays each operation of a
// batch to the registry as it came, an `apply` of the wire's operation (each
// chat actor still serializes its own chat, and the persistence actors group
// what arrives together into one commit), then answers the whole batch at
// once, in order.
#pragma once

#include "actors/interfaces.hpp"
#include "actors/metrics/recording.hpp"
#include "protocol/batch_request.hpp"
#include "protocol/errors.hpp"
#include "protocol/interfaces.hpp"

#include <caf/all.hpp>

#include <chrono>
#include <memory>
#include <vector>

namespace chargeonce {

/// Relays `ops` and answers them all at once. `allowed` is the endpoint's
/// role: an operation outside it is refused with invalid_argument and never
/// reaches the registry.
template <class Self>
caf::result<std::vector<outcome>>
relay_batch(Self* self, const core_actor& api, const caf::duration& timeout,
            std::vector<operation> ops, bool (*allowed)(operation_type)) {
  if (ops.size() > batch_message_operations_max)
    return caf::make_error(ec::invalid_argument,
                           "a batch holds at most "
                             + std::to_string(batch_message_operations_max)
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
        metrics::record_operation(type, x.error, self->clock().now() - t0);
      (*answers)[i] = std::move(x);
      if (--*left == 0)
        rp.deliver(std::move(*answers));
    };
    const auto& op = ops[i];
    if (!is_valid(op.type) || !allowed(op.type))
      done(as_outcome(caf::make_error(
        ec::invalid_argument, std::string{"operation "} + to_string(op.type)
                                + " is not offered on this port")));
    else
      self->request(api, timeout, atom::apply_v, op)
        .then([done](outcome& x) mutable { done(std::move(x)); },
              [done](caf::error& err) mutable {
                done(as_outcome(std::move(err)));
              });
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
