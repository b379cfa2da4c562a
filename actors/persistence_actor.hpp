// SPDX-License-Identifier: Apache-2.0
// The persistence actor: owns one Postgres connection and answers each
// operation after its transaction committed.
#pragma once

#include "persistence/store.hpp"
#include "protocol/interfaces.hpp"

#include <functional>
#include <memory>

namespace chargeonce {

struct persistence_state {
  static inline const char* name = "persistence";
  std::unique_ptr<persistence::store> db; ///< blocking: hence detached
};

persistence_actor::behavior_type
make_persistence(persistence_actor::stateful_pointer<persistence_state> self,
                 persistence::store_options opts);

/// Makes one persistence actor; the supervisor calls it at start and for
/// every restart. Tests substitute fakes.
using persistence_factory = std::function<persistence_actor()>;

/// Spawns detached persistence actors (blocking libpqxx calls must not
/// stall CAF's scheduler threads), one connection each.
persistence_factory make_persistence_factory(caf::actor_system& sys,
                                             persistence::store_options opts);

} // namespace chargeonce
