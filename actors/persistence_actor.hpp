// SPDX-License-Identifier: Apache-2.0
// The persistence actor: queues operations for its Postgres connection and
// answers each after its transaction committed. The hot operations of
// different chats that arrive together share one statement and one commit
// (group commit); each is still answered on its own. It never blocks (its
// connection actor does), so it also answers within store-timeout when
// Postgres does not.
#pragma once

#include "actors/connection_actor.hpp"
#include "actors/interfaces.hpp"
#include "actors/metrics/recording.hpp"
#include "persistence/store.hpp"
#include "protocol/events.hpp"
#include "protocol/interfaces.hpp"
#include "protocol/type_ids.hpp"
#include "protocol/types.hpp"

#include <caf/actor_clock.hpp>
#include <caf/replies_to.hpp>
#include <caf/timespan.hpp>
#include <caf/typed_actor.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

namespace chargeonce {

/// Releases a reservation past its deadline (sweeper only); not_found when
/// it was committed, failed or got a fresh lease meanwhile. The chat actors
/// and the registry pass it on to here.
using release_signature =
  caf::replies_to<atom::release, chat_id,
                  reservation_id>::with<reservation_released>;

/// Owns one Postgres connection; answers after the transaction committed.
using persistence_actor = operations_actor::extend<
  release_signature,
  /// Jobs of unknown outcome after an id (store::unresolved).
  caf::replies_to<atom::unresolved, reservation_id,
                  uint32_t>::with<unresolved_page>,
  /// The support view of one chat (store::history, store::explain).
  caf::replies_to<atom::history, chat_id, int64_t,
                  uint32_t>::with<history_page>,
  caf::replies_to<atom::explain, chat_id>::with<chat_explanation>,
  /// The next chunk of reservations past their deadline after a cursor
  /// (keyset pagination, at most `limit` rows).
  caf::replies_to<atom::sweep, sweep_cursor,
                  uint32_t>::with<std::vector<sweep_candidate>>,
  /// Events after an id, in id order, and the newest id
  /// (store::events_after): the event bus reads them.
  caf::replies_to<atom::events, event_id, uint32_t>::with<event_page>,
  /// Forgets released reservations older than release-retention; returns
  /// how many rows were deleted.
  caf::replies_to<atom::prune>::with<uint64_t>,
  /// The expiry scan (store::expire_grants): grants expired.
  caf::replies_to<atom::expiry>::with<uint64_t>,
  /// Active reservations in Postgres, of every server, by plan.
  caf::replies_to<atom::count>::with<active_count>,
  /// Refills the next page of quiet chats after a cursor and returns them.
  caf::replies_to<atom::reactivate, reactivation_cursor,
                  uint32_t>::with<reactivation_page>>;

/// How long an operation waits for Postgres before it is answered
/// storage_unavailable: the default of the server's store-timeout, and what
/// every actor that waits for a persistence actor waits by default.
inline constexpr caf::timespan default_store_timeout = std::chrono::seconds(10);

/// Operations waiting per persistence actor at most, by default.
inline constexpr size_t default_queue_operations_max = 4096;

/// Limits of one persistence actor, from the server's configuration.
struct persistence_limits {
  /// Operations sharing one statement at most.
  size_t statement_operations_max = persistence::statement_operations_max;
  /// Operations waiting for the next batch at most; beyond it, callers get
  /// `overloaded` at once instead of waiting for their timeout.
  size_t queue_operations_max = default_queue_operations_max;
  /// An operation not answered by Postgres this long after it arrived is
  /// answered storage_unavailable (it may still commit later).
  caf::timespan store_timeout = default_store_timeout;
};

/// Adds the actor's own messages to its interface: flush (batch what has
/// arrived), done (its connection finished a job), expire (deadlines),
/// probe (is a writable Postgres back?).
using persistence_self_actor = persistence_actor::extend<
  caf::reacts_to<atom::flush>, caf::reacts_to<atom::done>,
  caf::reacts_to<atom::expire>, caf::reacts_to<atom::probe>>;

/// The first and the longest wait before a persistence actor whose
/// connection found no writable Postgres tries again on its own.
inline constexpr caf::timespan probe_delay_min = std::chrono::milliseconds(250);
inline constexpr caf::timespan probe_delay_max = std::chrono::seconds(5);

/// One operation waiting for Postgres, with the way to answer it.
struct queued_operation {
  operation op;
  /// The operation's name in logs for those that run alone.
  const char* name = nullptr;
  /// Set for the operations that run alone (everything but the hot ones).
  std::function<void(persistence::store&)> run;
  /// Answers the caller: with the batch's result for a hot operation, with
  /// an error for any operation. Empty once answered.
  std::function<void(persistence::batch_result&&)> answer;
  /// Answers an operation that ran alone with the result it keeps.
  std::function<void()> finish;
  caf::actor_clock::time_point deadline;
};

struct persistence_state {
  static inline const char* name = "persistence";
  persistence_limits limits;
  std::deque<queued_operation> queue;    ///< waiting for the connection
  connection_actor connection;           ///< runs one job at a time
  std::shared_ptr<connection_job> job;   ///< shared with `connection`
  std::vector<queued_operation> running; ///< the job's operations, if busy
  /// Handed to the connection as its next batch (job->staged), in arrival
  /// order; a prefix may already run, which the next `done` tells.
  std::deque<queued_operation> staged;
  bool busy = false;                ///< the connection runs a job
  bool flush_pending = false;       ///< a flush message is in the mailbox
  bool expiry_pending = false;      ///< an expire message is on its way
  metrics::queue_depth_share depth; ///< this actor's share of the gauge
  /// Whether this actor's connection finds no writable Postgres now.
  metrics::unavailable_share unavailable;
  /// Connections its store had opened at the last finished job.
  uint64_t connections_seen = 0;
  /// A probe is scheduled, and how long the next one waits.
  bool probe_pending = false;
  caf::timespan probe_delay = probe_delay_min;

  /// Nobody waits for their timeout because this actor went away.
  ~persistence_state();
};

persistence_self_actor::behavior_type make_persistence(
  persistence_self_actor::stateful_pointer<persistence_state> self,
  persistence::store_options opts, persistence_limits limits);

/// Makes one persistence actor; the supervisor calls it at start and for
/// every restart. Tests substitute fakes.
using persistence_factory = std::function<persistence_actor()>;

/// Spawns persistence actors, each with its detached connection actor
/// (blocking libpqxx calls must not stall CAF's scheduler threads).
persistence_factory make_persistence_factory(caf::actor_system& sys,
                                             persistence::store_options opts,
                                             persistence_limits limits = {});

} // namespace chargeonce
