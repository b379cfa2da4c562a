// SPDX-License-Identifier: Apache-2.0
// The persistence actor: owns one Postgres connection and answers each
// operation after its transaction committed. The hot operations of different
// chats that arrive together share one statement and one commit (group
// commit); each is still answered on its own.
#pragma once

#include "actors/metrics.hpp"
#include "persistence/store.hpp"
#include "protocol/interfaces.hpp"

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace chargeonce {

/// Limits of one persistence actor, from the server's configuration.
struct persistence_limits {
  /// Operations sharing one statement at most.
  size_t batch_operations_max = persistence::batch_operations_max;
  /// Operations waiting for the next batch at most; beyond it, callers get
  /// `overloaded` at once instead of waiting for their timeout.
  size_t queue_operations_max = 4096;
};

/// Adds the actor's own flush message to its interface.
using persistence_self_actor =
  persistence_actor::extend<caf::reacts_to<atom::flush>>;

/// One operation waiting for the next batch, with the way to answer it.
struct queued_operation {
  persistence::batch_operation op;
  std::function<void(persistence::batch_result&&)> answer;
};

struct persistence_state {
  static inline const char* name = "persistence";
  std::unique_ptr<persistence::store> db; ///< blocking: hence detached
  persistence_limits limits;
  std::vector<queued_operation> queue; ///< waiting for the next batch
  bool flush_pending = false;          ///< a flush message is in the mailbox
  metrics::queue_depth_share depth;    ///< this actor's share of the gauge

  /// Nobody waits for their timeout because this actor went away.
  ~persistence_state();
};

persistence_self_actor::behavior_type make_persistence(
  persistence_self_actor::stateful_pointer<persistence_state> self,
  persistence::store_options opts, persistence_limits limits);

/// Makes one persistence actor; the supervisor calls it at start and for
/// every restart. Tests substitute fakes.
using persistence_factory = std::function<persistence_actor()>;

/// Spawns detached persistence actors (blocking libpqxx calls must not
/// stall CAF's scheduler threads), one connection each.
persistence_factory make_persistence_factory(caf::actor_system& sys,
                                             persistence::store_options opts,
                                             persistence_limits limits = {});

} // namespace chargeonce
