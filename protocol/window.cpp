// SPDX-License-Identifier: Apache-2.0
#include "protocol/window.hpp"

namespace chargeonce {

window_action on_activity(const caf::optional<caf::timestamp>& started,
                          caf::timestamp now, caf::timespan refill_interval) {
  if (!started)
    return window_action::open;
  if (now >= *started + refill_interval)
    return window_action::refill;
  return window_action::none;
}

} // namespace chargeonce
