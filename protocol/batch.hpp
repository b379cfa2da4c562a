// SPDX-License-Identifier: Apache-2.0
// Client batches: operations of many callers headed for one server travel
// as one message and come back as one. The server answers each operation as
// if it had come alone (same actors, same guarantees).
#pragma once

#include "protocol/operation_type.hpp"
#include "protocol/types.hpp"

#include <caf/error.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/optional.hpp>

#include <cstdint>
#include <string>

namespace chargeonce {

/// One operation of a batch.
struct operation {
  operation_type type = operation_type::status;
  chat_id chat = 0;
  /// start, heartbeat, commit, fail; cancel of a named job
  reservation_id reservation = 0;
  chargeonce::kind kind = kind::text; ///< reserve
  std::string request_id;             ///< reserve; cancel of a named job
  /// reserve: what the job may cost at most; commit: what it cost. 0: not
  /// given (reserve holds 1 unit, commit charges the whole hold).
  int32_t units = 0;
  /// start, heartbeat, commit, fail: the worker that names itself ("" for
  /// none); once a job runs, another one is already_started.
  std::string worker{};
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, operation& x) {
  return f(caf::meta::type_name("operation"), x.type, x.chat, x.reservation,
           x.kind, x.request_id, x.units, x.worker);
}

/// An operation on `chat` (and the reservation `id`) with no other field
/// given.
inline operation operation_on(operation_type type, chat_id chat,
                              reservation_id id = 0) {
  return {type, chat, id, kind::text, {}, 0, {}};
}

/// The answer to one operation: its error, or the value its type returns
/// (a chat_status for touch and status, a receipt for commit, a reservation
/// for the rest).
struct outcome {
  caf::error error;
  caf::optional<chargeonce::reservation> reservation;
  caf::optional<chargeonce::receipt> receipt;
  caf::optional<chat_status> status;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, outcome& x) {
  return f(caf::meta::type_name("outcome"), x.error, x.reservation, x.receipt,
           x.status);
}

/// Operations in one batch message at most; a larger batch is refused with
/// invalid_argument as a whole. A wire limit: clients split below it.
inline constexpr size_t batch_message_operations_max = 1024;

} // namespace chargeonce
