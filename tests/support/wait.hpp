// SPDX-License-Identifier: Apache-2.0
// Waiting for what other threads, processes or Postgres do: poll until it
// holds. The bound only tells a hang from a slow machine, so it is at least
// ten times what the wait takes on a quiet one; the time the wait took is
// returned for the test to print.
#pragma once

#include <chrono>
#include <thread>

namespace chargeonce::test {

/// How a wait_until ended.
struct waited {
  bool held = false;                 ///< the condition held within the bound
  std::chrono::milliseconds took{0}; ///< until it held, or until given up

  explicit operator bool() const { return held; }

  /// `took` in milliseconds, for MESSAGE.
  long long ms() const { return static_cast<long long>(took.count()); }
};

/// Polls `condition` every `step` until it returns true or `bound` has
/// passed (then false, after one last look).
template <class Condition>
waited
wait_until(Condition&& condition, std::chrono::milliseconds bound,
           std::chrono::milliseconds step = std::chrono::milliseconds{5}) {
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  for (;;) {
    auto out_of_time = clock::now() - t0 >= bound;
    if (condition())
      return {true, std::chrono::duration_cast<std::chrono::milliseconds>(
                      clock::now() - t0)};
    if (out_of_time)
      return {false, std::chrono::duration_cast<std::chrono::milliseconds>(
                       clock::now() - t0)};
    std::this_thread::sleep_for(step);
  }
}

/// Polls `done` every `step` for as long as `progress` (a count of work done
/// that only grows: rows released, events delivered) keeps moving; gives up
/// once it has not moved for `stall_bound`. For waits whose length is a
/// volume of work rather than a timer: a slow machine stretches them, which
/// must not fail the test; a hang stops the count, which must.
template <class Done, class Progress>
waited wait_while_progressing(
  Done&& done, Progress&& progress, std::chrono::milliseconds stall_bound,
  std::chrono::milliseconds step = std::chrono::milliseconds{50}) {
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  auto since = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(clock::now()
                                                                 - t0);
  };
  auto last = progress();
  auto moved_at = clock::now();
  for (;;) {
    if (done())
      return {true, since()};
    auto now = progress();
    if (now != last) {
      last = now;
      moved_at = clock::now();
    } else if (clock::now() - moved_at >= stall_bound) {
      return {false, since()};
    }
    std::this_thread::sleep_for(step);
  }
}

} // namespace chargeonce::test
