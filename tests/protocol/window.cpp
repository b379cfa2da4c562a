// SPDX-License-Identifier: Apache-2.0
// The daily window over a deterministic clock: one meaning for "no window".
#include "protocol/window.hpp"

#include <doctest/doctest.h>

using namespace chargeonce;
using namespace std::chrono_literals;

TEST_SUITE("window") {

  TEST_CASE("the first activity opens a window without refilling") {
    caf::timestamp now{std::chrono::hours(1000)};
    CHECK(on_activity(caf::none, now, 24h) == window_action::open);
  }

  TEST_CASE("before the interval nothing changes; from its end the quota is "
            "restored") {
    caf::timestamp opened{std::chrono::hours(1000)};
    CHECK(on_activity(opened, opened, 24h) == window_action::none);
    CHECK(on_activity(opened, opened + 24h - 1us, 24h) == window_action::none);
    CHECK(on_activity(opened, opened + 24h, 24h) == window_action::refill);
    CHECK(on_activity(opened, opened + 30 * 24h, 24h) == window_action::refill);
  }

  TEST_CASE("a window closed by reactivation stays closed until the next "
            "activity, which opens it without a second refill") {
    // Reactivation refills and sets the window to none; then:
    caf::optional<caf::timestamp> closed;
    caf::timestamp later{std::chrono::hours(5000)};
    CHECK(on_activity(closed, later, 24h) == window_action::open);
  }

} // TEST_SUITE
