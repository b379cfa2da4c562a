// SPDX-License-Identifier: Apache-2.0
// The simulated persistence actor: one "connection" to the in-memory world
// that answers like the real persistence actor and injects the faults the
// seeded generator picks.
#pragma once

#include "actors/persistence_actor.hpp"
#include "tests/simulation/world.hpp"

#include <caf/fwd.hpp>

#include <memory>

namespace chargeonce::test {

/// Spawns one simulated persistence actor over `w`. Like a real connection
/// it runs one transaction at a time: while one stalls (a delay fault), the
/// next operations wait behind it. Faults, per operation, with probability
/// w->fault_percent (split evenly): an error before the write, an error
/// after it (lost ack), a delay of up to w->stall_max with the write done
/// before or after it, and a dropped connection (the write happened or not;
/// it refuses everything for up to 3 s while it reconnects). w->outage
/// refuses everything. A kill while a write is still pending commits it or
/// not, by coin. Like the real persistence actor it answers
/// storage_unavailable store-timeout after a call, and when it stops; the
/// write may still happen later (even a queued one, which the real actor
/// drops unwritten: the harder case for the auditor).
persistence_actor spawn_sim_persistence(caf::actor_system& sys,
                                        std::shared_ptr<sim_world> w);

} // namespace chargeonce::test
