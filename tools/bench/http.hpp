// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench --client-api=http: one closed-loop client per thread on
// its own kept-alive HTTP connection, the way a PHP or Python gateway with
// a reused curl handle or a requests.Session calls the server (mode http).
#pragma once

#include "tools/bench/drivers.hpp"
#include "tools/bench/options.hpp"

#include <memory>

namespace chargeonce::bench {

/// A client thread's driver over HTTP: one connection, kept alive, with
/// TCP_NODELAY as a well-configured client library sets it.
std::unique_ptr<driver> make_http_driver(const http_target& target);

/// Fails with a clear message when the server's HTTP port cannot be reached,
/// refuses a token, or does not know `chat` (not the bench's database).
void check_http_sees(const http_target& target, chat_id chat);

} // namespace chargeonce::bench
