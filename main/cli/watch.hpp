// SPDX-License-Identifier: Apache-2.0
// chargeonce-cli watch: every server's events as JSON lines until a signal.
#pragma once

#include "main/cli/output.hpp"

#include <csignal>

namespace chargeonce::cli {

/// The signals that end a watch; blocked in every thread before the actor
/// system starts, so that only sigwait sees them.
sigset_t watch_signals();

/// Subscribes a local printer on every server (after event `after`: the
/// kept events after it first) and waits for SIGINT/SIGTERM (exit 0), a
/// server going away or cutting the watch off (exit 2).
int watch(session& s, caf::optional<event_id> after);

} // namespace chargeonce::cli
