// SPDX-License-Identifier: Apache-2.0
// Load the asynchronous-call suites share: closed loops driven only by
// continuations, and 64 reserves of one chat racing each other.
#pragma once

#include "client/client.hpp"
#include "tests/client/async_test.hpp"

#include <atomic>
#include <cstdint>
#include <utility>

namespace chargeonce::test {

/// `cycles` reserve -> start -> commit cycles of one chat, each call issued
/// by the previous call's continuation.
struct closed_loop {
  client::client& c;
  tracker& t;
  countdown& done;
  std::atomic<int>& failures;
  surprises& odd;
  int cycles;

  /// Runs cycle `cycle` of `chat`, and from its last continuation the
  /// next; `done` hears of the chat after its last cycle or first failure.
  void run(chat_id chat, int cycle);
};

/// 64 asynchronous reserves of one chat (distinct request_ids) from a
/// client of their own: one reservation, 63 busy, each answered once.
/// Returns what the client sent in batches.
std::pair<uint64_t, uint64_t> race_reserves(const client::options& opts,
                                            chat_id chat);

} // namespace chargeonce::test
