// SPDX-License-Identifier: Apache-2.0
// Role facades: separate actors that relay only their role's operations to
// the registry (each converted there, once, into what the server's actors
// speak: actors/interfaces.hpp) and answer themselves, so a client never learns
// the handle of an internal actor. A narrowed handle is only a compile-time
// view (actor_cast gives everything back); a facade is a real actor in between.
#pragma once

#include "actors/interfaces.hpp"
#include "protocol/interfaces.hpp"

namespace chargeonce {

/// Every role's operations (the loopback --port): relays like the role
/// facades, so that operations on every port are counted and timed in one
/// place and no internal handle reaches a client.
api_facade_actor::behavior_type make_api_facade(api_facade_actor::pointer self,
                                                const core_actor& api);

gateway_actor::behavior_type make_gateway(gateway_actor::pointer self,
                                          const core_actor& api);

worker_actor::behavior_type make_worker(worker_actor::pointer self,
                                        const core_actor& api);

admin_actor::behavior_type make_admin(admin_actor::pointer self,
                                      const core_actor& api);

} // namespace chargeonce
