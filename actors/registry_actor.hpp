// SPDX-License-Identifier: Apache-2.0
// The registry: the server's published entry point. Validates input, spawns
// one chat actor per chat on its first message and passivates idle ones.
#pragma once

#include "actors/chat_actor.hpp"
#include "actors/events_actor.hpp"
#include "actors/interfaces.hpp"
#include "actors/liveness.hpp"
#include "actors/notice_timer_actor.hpp"
#include "actors/persistence_actor.hpp"
#include "protocol/interfaces.hpp"
#include "protocol/type_ids.hpp"
#include "protocol/types.hpp"

#include <caf/actor_addr.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace chargeonce {

/// Routes to chat actors. `idle` is a chat actor's passivation request
/// (chat_owner) carrying how many operations it has received; `store`
/// replaces the persistence actor of one partition after a restart; `ping`
/// answers while the registry runs.
using registry_actor = core_actor::extend_with<chat_owner>::extend<
  release_signature, caf::reacts_to<atom::store, uint64_t, persistence_actor>,
  ping_signature>;

struct registry_state {
  static inline const char* name = "registry";

  struct entry {
    chat_self_actor handle;
    uint64_t routed = 0; ///< operations sent to it; compared when it is idle
  };

  std::unordered_map<chat_id, entry> chats; ///< live chat actors
  /// Who is who when a monitored chat actor goes down (passivated ones too,
  /// until their down message arrives).
  std::unordered_map<caf::actor_addr, chat_id> by_address;
  std::vector<persistence_actor> pool; ///< partitioned by chat_id
  events_actor events;                 ///< handed to every chat actor
  notice_timer_actor notice_timer;     ///< handed to every chat actor
  chat_options options;

  /// Chat actors never outlive their registry, however it ends.
  ~registry_state();
};

/// Answers what the facades ask by delegating to chat actors. Bad input (zero
/// ids, unknown kinds, negative amounts) is refused here, before anything
/// spawns.
registry_actor::behavior_type
make_registry(registry_actor::stateful_pointer<registry_state> self,
              std::vector<persistence_actor> pool, events_actor events,
              chat_options options);

/// The pool member that owns `chat`: stable for the pool's lifetime.
size_t partition_of(chat_id chat, size_t pool_size);

} // namespace chargeonce
