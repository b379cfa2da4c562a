// SPDX-License-Identifier: Apache-2.0
// The connection actor: one Postgres connection on its own thread. It runs
// the job its persistence actor handed over and reports back; everything
// else (queueing, batching, deadlines, answers) stays with the persistence
// actor, which never blocks.
#pragma once

#include "persistence/batch.hpp"
#include "persistence/store.hpp"
#include "protocol/type_ids.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace chargeonce {

/// What the connection reports for each job it finished.
struct finished_job {
  bool alone = false; ///< it was a `run` job (which keeps its own result)
  std::vector<persistence::batch_result> results; ///< else, one per op
  /// Staged operations the connection took as its next job (sent already
  /// while this one committed, or right after it).
  size_t taken = 0;
  /// The store after the job: connections it opened so far, and whether
  /// the job found no writable Postgres (the metrics of reconnects and of
  /// time without a primary).
  uint64_t connections_made = 0;
  bool unavailable = false;
};

/// What a persistence actor and its connection actor share. The persistence
/// actor fills in a job while the connection is idle, then sends `apply`.
/// While the connection works, the persistence actor stages the next
/// batch's hot operations; the connection takes them the moment Postgres
/// sent this batch's rows and commits it, and sends them at once (they wait
/// at Postgres until the commit is done), without waiting for a round trip
/// through the persistence actor (whose thread may be busy with other
/// actors). It reports each finished job with `done`.
struct connection_job {
  explicit connection_job(persistence::store_options opts);
  persistence::store db;
  /// The connection's job, touched by the persistence actor only while the
  /// connection is idle: a batch of hot operations ...
  std::vector<operation> ops;
  /// ... or one other operation, run on its own (it keeps its own result).
  std::function<void(persistence::store&)> run;

  std::mutex mtx;
  /// Under mtx: the next batch, in arrival order.
  std::vector<operation> staged;
  /// Under mtx: finished jobs whose `done` the persistence actor has not
  /// handled yet, oldest first.
  std::deque<finished_job> finished;
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
