// SPDX-License-Identifier: Apache-2.0
// Registration shared by every actor system that speaks chargeonce.
#pragma once

#include <caf/fwd.hpp>

namespace chargeonce {

/// Loads the type-ID block and the error category renderer into `cfg`.
/// Call in the constructor of every config: server, tools and tests, on
/// both ends of a connection.
void register_protocol(caf::actor_system_config& cfg);

/// Sets the scheduler of a server or client process: the sharing policy
/// (a sleeping worker is woken at once instead of polling first) and half
/// the cores as worker threads, at least one. Chargeonce's actors do little
/// work per message; more workers than that mostly add wake-ups and leave
/// fewer cores to Postgres and the other processes. Overridable with
/// --scheduler.policy and --scheduler.max-threads (parsed afterwards).
void prefer_few_workers(caf::actor_system_config& cfg);

/// Deserializes incoming messages on the middleman's own thread instead of
/// CAF 0.17.6's BASP worker (middleman.workers=0). With a worker, a message
/// can be credited to the wrong sender: when one peer disconnects and the
/// next connects on the same socket number before CAF has dropped the old
/// peer's route, the new peer's request is answered to the old peer and
/// lost (about 1 request in 100 from 16 short-lived clients at once; none
/// in 4,000 without the worker). Call on both ends of a connection.
void deserialize_on_middleman_thread(caf::actor_system_config& cfg);

} // namespace chargeonce
