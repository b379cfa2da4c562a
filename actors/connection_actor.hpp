// SPDX-License-Identifier: Apache-2.0
// The connection actor: one Postgres connection on its own thread. It runs
// the job its persistence actor handed over and reports back; everything
// else (queueing, batching, deadlines, answers) stays with the persistence
// actor, which never blocks.
#pragma once

#include "persistence/batch.hpp"
#include "persistence/store.hpp"
#include "protocol/interfaces.hpp"

#include <functional>
#include <memory>
#include <vector>

namespace chargeonce {

/// What a persistence actor and its connection actor share. The persistence
/// actor fills in a job, then sends `apply`; the connection actor runs it and
/// answers `done`. Neither touches the job between those two messages, and
/// the messages order the accesses, so no lock is needed.
struct connection_job {
  explicit connection_job(persistence::store_options opts);
  persistence::store db;
  /// A batch of hot operations ...
  std::vector<persistence::batch_operation> ops;
  std::vector<persistence::batch_result> results;
  /// ... or one other operation, run on its own (it keeps its own result).
  std::function<void(persistence::store&)> run;
};

/// `apply` runs the current job.
using connection_actor = caf::typed_actor<caf::reacts_to<atom::apply>>;

/// Where a connection actor reports a finished job.
using connection_owner = caf::typed_actor<caf::reacts_to<atom::done>>;

struct connection_state {
  static inline const char* name = "connection";
};

/// Spawned detached (libpqxx blocks) and linked by its persistence actor.
connection_actor::behavior_type
make_connection(connection_actor::stateful_pointer<connection_state> self,
                std::shared_ptr<connection_job> job, connection_owner owner);

} // namespace chargeonce
