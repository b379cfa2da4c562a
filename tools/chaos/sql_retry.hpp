// SPDX-License-Identifier: Apache-2.0
// The chaos tool's own SQL (migrations, clearing its chats, forgeries, the
// audit's reads) through a formation whose primary may be moving: retried,
// as any client of the formation must, on the errors that say so.
#pragma once

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>

namespace chargeonce::chaos {

/// What `err` (from persistence, which passes on the server's or libpq's
/// message, not the SQLSTATE) says: no writable primary answered. A
/// connection lost or refused, a server shutting down or starting (57P0x),
/// a read-only transaction (25006), a wait for synchronous replication
/// cancelled. Never a refusal that a working primary gives.
bool primary_moved(const caf::error& err);

/// A unique key already taken: after a repeat, what the attempt whose
/// answer was lost wrote.
bool key_taken(const caf::error& err);

/// How long a statement is repeated while the primary moves: a failover
/// leaves the formation without one for about 10 s on a quiet machine.
constexpr auto primary_moved_retry_max = std::chrono::seconds(120);
constexpr auto primary_moved_pause = std::chrono::milliseconds(500);

/// How retried_while_primary_moves bounds and paces its repeats: the
/// constants above on the steady clock; a test passes a simulated clock
/// that each pause advances, so the bound is met without waiting for it.
struct retry_schedule {
  using clock = std::chrono::steady_clock;
  clock::duration retry_max = primary_moved_retry_max;
  clock::duration pause = primary_moved_pause;
  std::function<clock::time_point()> now = [] {
    return clock::now();
  };
  std::function<void(clock::duration)> sleep = [](clock::duration d) {
    std::this_thread::sleep_for(d);
  };
};

/// Logs a repeat of `what`.
void log_retry(const std::string& what, int attempt, const caf::error& err);

inline caf::error error_of(const caf::error& x) {
  return x;
}

template <class T>
caf::error error_of(const caf::expected<T>& x) {
  return x ? caf::error{} : x.error();
}

/// Calls `statement` (returning caf::error or caf::expected) and repeats it,
/// unchanged, while it fails with primary_moved, for at most
/// `schedule.retry_max`. Every statement passed here is keyed: a write
/// names its rows (the chat range it clears, the migration version, the
/// reservation id of a forged charge), so a repeat after a lost answer
/// changes nothing; a repeat that meets the key of the lost attempt
/// (key_taken) is that attempt's success.
template <class Statement>
auto retried_while_primary_moves(const std::string& what, Statement&& statement,
                                 const retry_schedule& schedule = {}) {
  auto t0 = schedule.now();
  for (int attempt = 1;; ++attempt) {
    auto out = statement();
    auto err = error_of(out);
    if (!err)
      return out;
    if constexpr (std::is_same_v<decltype(out), caf::error>)
      if (attempt > 1 && key_taken(err))
        return caf::error{};
    if (!primary_moved(err) || schedule.now() - t0 > schedule.retry_max)
      return out;
    log_retry(what, attempt, err);
    schedule.sleep(schedule.pause);
  }
}

} // namespace chargeonce::chaos
