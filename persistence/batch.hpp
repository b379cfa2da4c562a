// SPDX-License-Identifier: Apache-2.0
// The hot billing operations as one batch: applied by one statement (one
// round trip, one commit) through chargeonce_apply_batch and the
// per-operation functions it calls (persistence/functions/09_batch.sql).
#pragma once

#include "protocol/batch.hpp"
#include "protocol/operation_type.hpp"
#include "protocol/types.hpp"

#include <caf/error.hpp>

#include <string>
#include <variant>
#include <vector>

namespace chargeonce::persistence {

// An operation of a batch is the wire's `operation` (protocol/batch.hpp):
// one struct from the client to the statement. `reservation` for
// start/heartbeat/commit/fail; cancel names its job by `reservation`, else
// by `request_id`, else it is the chat's only active one. `worker`: the
// identity of the worker's attempt, "" for none (chargeonce_claim,
// persistence/functions/05_start.sql). A statement carries the operations
// operation_traits::in_statement marks.

/// True for the operations a worker sends, which may name the worker.
inline bool is_worker_op(operation_type x) {
  return is_operation_type(x) && traits_of(x).role == operation_role::worker;
}

/// What one operation produced: its refusal, or its value (a reservation for
/// reserve/start/heartbeat/fail/cancel, a receipt for commit, a chat_status
/// for status).
using batch_result =
  std::variant<caf::error, reservation, receipt, chat_status>;

/// At most this many operations share one statement: bounds the statement's
/// size and the time one chat row lock is held. Also the default of the
/// server's persistence-batch-max, which may only lower it.
inline constexpr size_t statement_operations_max = 128;

} // namespace chargeonce::persistence
