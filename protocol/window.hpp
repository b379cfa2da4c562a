// SPDX-License-Identifier: Apache-2.0
// The daily window's state machine. window_started_at has one meaning: when
// the current window opened; none means no window is open.
#pragma once

#include <caf/optional.hpp>
#include <caf/timestamp.hpp>

namespace chargeonce {

/// What a user's activity does to the window.
enum class window_action {
  none,   ///< a window is open and still running: nothing changes
  open,   ///< no window is open: this activity opens one (no refill)
  refill, ///< the window ran out: pockets back to quota, a new one opens now
};

/// Decides for an activity at `now`. Pure: tests drive it with any clock.
window_action on_activity(const caf::optional<caf::timestamp>& started,
                          caf::timestamp now, caf::timespan refill_interval);

} // namespace chargeonce
