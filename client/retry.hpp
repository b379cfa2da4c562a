// SPDX-License-Identifier: Apache-2.0
// Which requests the client may repeat on a chat's next server after a
// connection error, when it cannot know whether the first server acted.
// Only a connection error (no answer) is ever retried: every answer of the
// service is final and goes to the caller (is_service_error). That includes
// storage_unavailable (the caller retries it with the same ids) and
// internal, a bug: repeating it would most likely hit the same bug, so the
// client never retries it automatically.
#pragma once

#include "protocol/batch.hpp"

#include <cstdint>
#include <string>

namespace chargeonce::client {

/// True if a request that met a connection error may be sent again to the
/// chat's next server: operation_traits::retry_safe (the reasons are with
/// operation_table), and a reserve only with a `request_id`, its
/// idempotency key; the other operations ignore it.
bool retry_safe(operation_type x, const std::string& request_id = {});

/// The same decision for an operation of a batch.
bool retry_safe(const operation& x);

/// A request id for a reserve its caller gave none: auto_request_id_prefix
/// and 128 random bits in hex. The client sends it with the first try and
/// every retry of that call, which makes the reserve retry-safe: an answer
/// lost after the commit finds the job instead of leaving a hold nobody
/// knows about (at limit 1, a chat locked until the sweep).
std::string make_auto_request_id();

} // namespace chargeonce::client
