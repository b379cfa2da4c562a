// SPDX-License-Identifier: Apache-2.0
// Routes CAF's console chatter (unexpected messages, unhandled exceptions)
// to spdlog, so every actor's trouble appears as a structured log line.
// What a peer sends unasked is logged bounded (see log_limiter.hpp).
#pragma once

#include "actors/log_limiter.hpp"

#include <caf/fwd.hpp>

#include <cstddef>

namespace chargeonce {

/// How much of an unexpected message its log line shows.
constexpr size_t unexpected_message_bytes_max = 160;

/// Call first thing in every actor's factory. Unexpected messages are
/// logged as excerpts, at most as often as log_limiter::limits{} allows per
/// peer (each actor counts its own).
void install_log_handlers(caf::scheduled_actor* self);

} // namespace chargeonce
