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

} // namespace chargeonce
