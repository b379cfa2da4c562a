// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench --async: the closed-loop clients as continuations of the
// client library's asynchronous calls (the way an event-loop gateway would
// use it), so that no client parks a thread while it waits.
#pragma once

#include "client/client.hpp"
#include "tools/bench/loop.hpp"
#include "tools/bench/options.hpp"

namespace chargeonce::bench {

/// Runs `clients` closed loops on the client library's own threads, each
/// starting its next call from the previous one's continuation; returns
/// once every loop has stopped (mode remote_async).
run_result run_async_clients(client::client& api, size_t clients,
                             const bench_options& o, const chat_range& chats,
                             const window_maker& make_window);

} // namespace chargeonce::bench
