// SPDX-License-Identifier: Apache-2.0
// The event bus: gateways subscribe; chat actors and the supervisor publish.
#pragma once

#include "protocol/interfaces.hpp"

#include <vector>

namespace chargeonce {

struct events_state {
  static inline const char* name = "events";
  std::vector<caf::actor> subscribers; ///< monitored; dropped when down
};

/// Delivers every event to every live subscriber, at most once, with a plain
/// asynchronous send: a slow or dead subscriber never slows a publisher.
events_actor::behavior_type
make_events(events_actor::stateful_pointer<events_state> self);

} // namespace chargeonce
