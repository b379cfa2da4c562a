// SPDX-License-Identifier: Apache-2.0
// The chat actor: one per active chat, serializes that chat's operations.
#pragma once

#include "actors/events_actor.hpp"
#include "actors/notice_timer_actor.hpp"
#include "actors/persistence_actor.hpp"
#include "protocol/interfaces.hpp"
#include "protocol/type_ids.hpp"
#include "protocol/types.hpp"

#include <caf/actor_clock.hpp>
#include <caf/replies_to.hpp>
#include <caf/response_promise.hpp>
#include <caf/timespan.hpp>
#include <caf/typed_actor.hpp>

#include <chrono>
#include <cstdint>

namespace chargeonce {

/// Serializes the operations of one chat. `store` replaces its persistence
/// actor after a restart; `stop` ends it after passivation.
using chat_actor =
  operations_actor::extend<release_signature,
                           caf::reacts_to<atom::store, persistence_actor>,
                           caf::reacts_to<atom::stop>>;

/// What a chat actor may ask of its registry: to be passivated when idle,
/// with how many operations it has received. Narrower than registry_actor,
/// which extends it: the chat actor can ask for nothing else, and this
/// header need not include the registry's (which includes this one).
using chat_owner =
  caf::typed_actor<caf::reacts_to<atom::idle, chat_id, uint64_t>>;

/// Timing of a chat actor, from the server's configuration.
struct chat_options {
  /// How long the queue notice's status lookup waits. (Operations wait as
  /// long as the persistence actor's store-timeout, which it enforces.)
  caf::timespan store_timeout = default_store_timeout;
  /// Without operations for this long, the actor asks to be passivated.
  caf::timespan idle_timeout = std::chrono::seconds(60);
  /// After a reserve, "you are in the queue" if the job is still active.
  caf::timespan queue_notice_delay = std::chrono::seconds(5);
};

/// Adds the chat actor's own timer messages to its interface: the idle
/// countdown and the queue notice (per reservation, from the notice timer).
using chat_self_actor =
  chat_actor::extend<caf::reacts_to<atom::idle>,
                     caf::reacts_to<atom::notice, reservation_id>>;

struct chat_state {
  static inline const char* name = "chat";
  chat_id id = 0;                  ///< the chat this actor serializes
  persistence_actor store;         ///< this chat's partition of the pool
  chat_owner registry;             ///< asked for passivation when idle
  events_actor events;             ///< where notices and releases are published
  notice_timer_actor notice_timer; ///< hands armed queue notices back
  chat_options options;
  uint64_t received = 0;           ///< operations received, reported when idle
  bool idle_timer_pending = false; ///< at most one idle timer at a time
  /// The last operation's end: the idle countdown runs from here.
  caf::actor_clock::time_point last_activity;
  uint32_t notices_pending = 0; ///< armed queue-notice timers
  reservation_id noticed = 0;   ///< last reservation with a notice armed
  /// Last reservation this actor saw end (committed, failed, cancelled,
  /// released): its notice needs no look at Postgres.
  reservation_id finished = 0;
  /// Last reservation whose cancel_requested event this actor published.
  reservation_id cancel_published = 0;
  /// Last reservation whose reconcile_needed event this actor published.
  reservation_id reconcile_published = 0;
  caf::response_promise pending; ///< the caller awaiting Postgres, if any

  /// A caller never waits for its timeout because this actor went away.
  ~chat_state();
};

/// Serializes the chat's operations and releases: the next one waits in the
/// mailbox until Postgres answered the current one. Not spawned directly: the
/// registry does, and passivates it.
chat_self_actor::behavior_type
make_chat(chat_self_actor::stateful_pointer<chat_state> self, chat_id id,
          persistence_actor store, chat_owner registry, events_actor events,
          notice_timer_actor notice_timer, chat_options options);

} // namespace chargeonce
