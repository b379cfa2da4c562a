// SPDX-License-Identifier: Apache-2.0
// Routes CAF's console chatter (unexpected messages, unhandled exceptions)
// to spdlog, so every actor's trouble appears as a structured log line.
#pragma once

#include <caf/fwd.hpp>

namespace chargeonce {

/// Call first thing in every actor's factory.
void install_log_handlers(caf::scheduled_actor* self);

} // namespace chargeonce
