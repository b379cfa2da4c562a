// SPDX-License-Identifier: Apache-2.0
// The recording half of the process-wide metrics: what actors call on their
// hot paths. Every series is a fixed slot in a static array (no lookup, no
// lock): labels are enums or small closed sets, resolved to an index when
// recorded, and every counter and gauge is a relaxed atomic. rendering.hpp
// turns them into the text GET /metrics serves.
#pragma once

#include "protocol/operation_type.hpp"
#include "protocol/types.hpp"

#include <caf/fwd.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace chargeonce::metrics {

// -- operations (recorded by the facades) -------------------------------------

/// The client operations: operation_type, one `operation` label value each
/// (operation_traits::name), in enum order.
using chargeonce::operation_type;

/// How many operations there are: the series of each per-operation family.
inline constexpr size_t operation_count = operation_type_count;

/// One operation answered to a client after `elapsed`: counted in
/// chargeonce_operations_total{operation, outcome} (outcome `ok` for an empty
/// error, else error_name(err): our codes, `request_timeout`,
/// `request_receiver_down`, or `other`) and observed in
/// chargeonce_operation_duration_seconds{operation}; an `internal` error (a
/// bug) is also counted in chargeonce_internal_errors_total{operation}.
void record_operation(operation_type op, const caf::error& err,
                      std::chrono::nanoseconds elapsed);

// -- events, scans and actors -------------------------------------------------

/// A queue_notice was published.
void count_queue_notice();

/// The event bus cut a subscriber off: it left events unanswered too long.
void count_subscriber_cut_off();

/// A cancel_requested event was published: a user cancelled a started job.
void count_cancel_request();

/// A reconcile_needed event was published: a job's outcome is unknown.
void count_reconcile_needed();

/// A reservation was released by the sweeper; `reason` as Postgres records
/// it (`lease_expired`, `sweep_timeout`), anything else counts as `other`.
void count_release(std::string_view reason);

/// The reactivation scan refilled `chats` quiet chats.
void count_reactivations(uint64_t chats);

/// One sweep run ended (whether it released anything or its scan failed).
void count_sweep();

/// A dead persistence actor (and its Postgres connection) is being
/// restarted.
void count_persistence_restart();

/// Postgres failed an operation (lost connection, timeout, SQL error other
/// than the busy index): the persistence layer answered storage_unavailable.
void count_storage_error();

/// The registry passivated an idle chat actor.
void count_passivation();

/// A chat actor was spawned / has terminated (gauge of resident actors).
void chat_actor_started();
void chat_actor_stopped();

// -- persistence --------------------------------------------------------------

/// One Postgres round trip carried `operations` client operations.
void observe_persistence_batch(size_t operations);

/// persistence-queue-max: operations one persistence actor lets wait before
/// it answers overloaded (the same for every actor of the server).
void set_persistence_queue_max(size_t operations);

/// One persistence actor's share of chargeonce_persistence_queue_depth (the
/// sum over the pool): `set` replaces this share, the destructor withdraws it,
/// so a dead actor never leaves its backlog in the gauge. Keep one in the
/// actor's state; not thread-safe on its own (one owner).
class queue_depth_share {
public:
  queue_depth_share() = default;
  queue_depth_share(const queue_depth_share&) = delete;
  queue_depth_share& operator=(const queue_depth_share&) = delete;
  ~queue_depth_share();

  /// Operations waiting in this actor right now.
  void set(int64_t depth);

private:
  int64_t current_ = 0;
};

/// A persistence connection was opened again after its first (a lost
/// connection, a failover, a standby refused): `n` of them.
void count_reconnects(uint64_t n);

/// One persistence actor's part in chargeonce_storage_unavailable (how many
/// find no writable Postgres now) and in
/// chargeonce_storage_unavailable_seconds_total (the time during which at
/// least one did: the process had no primary for some of its chats). The
/// destructor withdraws it. One owner; the shared part is locked.
class unavailable_share {
public:
  unavailable_share() = default;
  unavailable_share(const unavailable_share&) = delete;
  unavailable_share& operator=(const unavailable_share&) = delete;
  ~unavailable_share();

  /// This actor's last operation found no writable Postgres (true) or
  /// reached it (false).
  void set(bool unavailable);

  bool get() const { return unavailable_; }

private:
  bool unavailable_ = false;
};

/// Active reservations as Postgres counts them (all servers); the gauge is
/// absent until someone sets it. Not derived from this process' operations:
/// a reserve on one server and a commit on another, or an idempotent replay,
/// would make such a count drift.
void set_active_reservations(const active_count& n);

} // namespace chargeonce::metrics
