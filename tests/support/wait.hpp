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

} // namespace chargeonce::test
