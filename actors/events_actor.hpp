// SPDX-License-Identifier: Apache-2.0
// The event bus: gateways subscribe; chat actors and the supervisor publish.
#pragma once

#include "protocol/events.hpp"
#include "protocol/type_ids.hpp"

#include <caf/actor.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <vector>

namespace chargeonce {

/// Fans events out to subscribers; never blocks a publisher. Internal to the
/// server: clients subscribe through the API, which delegates here.
using events_actor = caf::typed_actor<
  caf::replies_to<atom::subscribe, caf::actor>::with<bool>,
  caf::reacts_to<queue_notice>, caf::reacts_to<reservation_released>,
  caf::reacts_to<cancel_requested>, caf::reacts_to<reconcile_needed>,
  caf::reacts_to<limits_refilled>>;

struct events_state {
  static inline const char* name = "events";
  std::vector<caf::actor> subscribers; ///< monitored; dropped when down
};

/// Delivers every event to every live subscriber, at most once, with a plain
/// asynchronous send: a slow or dead subscriber never slows a publisher.
events_actor::behavior_type
make_events(events_actor::stateful_pointer<events_state> self);

} // namespace chargeonce
