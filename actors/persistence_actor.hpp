// SPDX-License-Identifier: Apache-2.0
// The persistence actor: owns one Postgres connection and answers each
// operation after its transaction committed.
#pragma once

#include "persistence/store.hpp"
#include "protocol/interfaces.hpp"

#include <memory>
#include <vector>

namespace chargeonce {

struct persistence_state {
  static inline const char* name = "persistence";
  std::unique_ptr<persistence::store> db; ///< blocking: hence detached
};

persistence_actor::behavior_type
make_persistence(persistence_actor::stateful_pointer<persistence_state> self,
                 persistence::store_options opts);

/// Spawns `size` detached persistence actors, one connection each. The
/// registry routes every chat to one of them, so one chat's writes stay in
/// order while different chats proceed in parallel.
std::vector<persistence_actor>
spawn_persistence_pool(caf::actor_system& sys,
                       const persistence::store_options& opts, size_t size);

} // namespace chargeonce
