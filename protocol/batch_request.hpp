// SPDX-License-Identifier: Apache-2.0
// One operation of a batch as a request of its own, answered as an outcome:
// the client library sends operations this way to servers that take no
// batches. (Inside the server, an operation travels as itself:
// actors/interfaces.hpp.)
#pragma once

#include "protocol/batch.hpp"
#include "protocol/errors.hpp"
#include "protocol/type_ids.hpp"
#include "protocol/types.hpp"

#include <caf/all.hpp>

#include <string>

namespace chargeonce {

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

namespace detail {

template <class T, class Self, class Handle, class Timeout, class Done,
          class... Ts>
void request_one(Self* self, const Handle& to, const Timeout& timeout,
                 Done done, Ts... xs) {
  self->request(to, timeout, xs...)
    .then(
      [done](T& x) mutable { done(as_outcome(std::move(x))); },
      [done](caf::error& err) mutable { done(as_outcome(std::move(err))); });
}

/// A commit in the form its units and worker call for: the forms without
/// them are the ones a server of the previous release knows.
template <class Self, class Handle, class Timeout, class Done>
void request_commit(Self* self, const Handle& to, const Timeout& timeout,
                    const operation& op, Done done) {
  if (!op.worker.empty() && op.units != 0)
    return request_one<receipt>(self, to, timeout, done, atom::commit_v,
                                op.chat, op.reservation, op.units, op.worker);
  if (!op.worker.empty())
    return request_one<receipt>(self, to, timeout, done, atom::commit_v,
                                op.chat, op.reservation, op.worker);
  if (op.units != 0)
    return request_one<receipt>(self, to, timeout, done, atom::commit_v,
                                op.chat, op.reservation, op.units);
  return request_one<receipt>(self, to, timeout, done, atom::commit_v, op.chat,
                              op.reservation);
}

} // namespace detail

/// Sends `op` to `to` (any handle that takes the operation's request) as
/// the single request it stands for; `done` gets its outcome.
template <class Self, class Handle, class Timeout, class Done>
void request_operation(Self* self, const Handle& to, const Timeout& timeout,
                       const operation& op, Done done) {
  using detail::request_commit;
  using detail::request_one;
  switch (op.type) {
  case operation_type::touch:
    return request_one<chat_status>(self, to, timeout, done, atom::touch_v,
                                    op.chat);
  case operation_type::reserve:
    // The forms without units while none are named: a server of the
    // previous release knows only those.
    if (op.units != 0)
      return request_one<reservation>(self, to, timeout, done, atom::reserve_v,
                                      op.chat, op.kind, op.request_id,
                                      op.units);
    return request_one<reservation>(self, to, timeout, done, atom::reserve_v,
                                    op.chat, op.kind, op.request_id);
  case operation_type::cancel:
    // The bare form while the job is not named: a server of the previous
    // release knows only that one.
    if (op.reservation == 0 && op.request_id.empty())
      return request_one<reservation>(self, to, timeout, done, atom::cancel_v,
                                      op.chat);
    return request_one<reservation>(self, to, timeout, done, atom::cancel_v,
                                    op.chat, op.reservation, op.request_id);
  case operation_type::status:
    return request_one<chat_status>(self, to, timeout, done, atom::status_v,
                                    op.chat);
  case operation_type::start:
    if (!op.worker.empty())
      return request_one<reservation>(self, to, timeout, done, atom::start_v,
                                      op.chat, op.reservation, op.worker);
    return request_one<reservation>(self, to, timeout, done, atom::start_v,
                                    op.chat, op.reservation);
  case operation_type::heartbeat:
    if (!op.worker.empty())
      return request_one<reservation>(self, to, timeout, done,
                                      atom::heartbeat_v, op.chat,
                                      op.reservation, op.worker);
    return request_one<reservation>(self, to, timeout, done, atom::heartbeat_v,
                                    op.chat, op.reservation);
  case operation_type::commit:
    return request_commit(self, to, timeout, op, done);
  case operation_type::fail:
    if (!op.worker.empty())
      return request_one<reservation>(self, to, timeout, done, atom::fail_v,
                                      op.chat, op.reservation, op.worker);
    return request_one<reservation>(self, to, timeout, done, atom::fail_v,
                                    op.chat, op.reservation);
  default: // travels alone, never in a batch (is_valid refuses it)
    break;
  }
  done(as_outcome(caf::make_error(ec::invalid_argument,
                                  std::string{"not an operation of a batch: "}
                                    + to_string(op.type))));
}

} // namespace chargeonce
