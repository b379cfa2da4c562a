// SPDX-License-Identifier: Apache-2.0
// Every billing operation as one Postgres transaction. Blocking: call it
// from a detached actor or a test thread, never from CAF's scheduler.
#pragma once

#include "persistence/batch.hpp"
#include "protocol/catalog.hpp"
#include "protocol/events.hpp"
#include "protocol/history.hpp"
#include "protocol/types.hpp"

#include <caf/expected.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace chargeonce::persistence {

struct store_options {
  std::string dsn; ///< libpq connection string
  /// Postgres cancels a statement (lock waits included) after this long, so
  /// a stuck query becomes storage_unavailable instead of a hang.
  std::chrono::milliseconds statement_timeout{5000};
  /// Hard maximum age of a reservation; the sweeper releases older ones.
  std::chrono::milliseconds sweep_timeout{std::chrono::minutes(3)};
  /// How far one heartbeat pushes a started job's lease.
  std::chrono::milliseconds lease_duration{std::chrono::seconds(30)};
  /// How long a released reservation is remembered to answer `expired`.
  std::chrono::milliseconds release_retention{std::chrono::hours(24)};
  /// A window this old is refilled by the chat's next activity.
  std::chrono::milliseconds refill_interval{std::chrono::hours(24)};
  /// Started chats quiet for this long are refilled by the reactivation scan.
  std::chrono::milliseconds reactivation_after{std::chrono::hours(24)};
  /// The kinds of job this store sells (reserve refuses any other), the
  /// pockets that pay for them and the quotas a refill restores per plan.
  catalog products = builtin_catalog({});
  /// Jobs a chat may run at once unless it has its own limit, per plan.
  int32_t free_max_active_jobs = 1;
  int32_t premium_max_active_jobs = 1;
  /// How long a job that ended is still found by its request id: a reserve
  /// retried with it returns the job, never a new hold.
  std::chrono::milliseconds request_retention{std::chrono::hours(24)};
  /// How long an event stays in the events table for subscribers that
  /// resume after it.
  std::chrono::milliseconds event_retention{std::chrono::hours(24)};
  /// How long before a grant expires its chat hears credits_expiring (a
  /// grant made inside that time: from its top-up, at once).
  std::chrono::milliseconds expiry_notice{std::chrono::hours(24)};
  /// balance_low is written when a chat's available balance falls below
  /// this, unless the chat has its own threshold; 0: never. Every
  /// connection sets it as chargeonce.balance_low_threshold, where every
  /// SQL function that lowers a balance reads it.
  int32_t balance_low_threshold = 0;
  /// How long a job of unknown outcome (`uncertain`) keeps its hold before
  /// the sweep releases it unresolved, nothing charged.
  std::chrono::milliseconds reconcile_timeout{std::chrono::hours(24)};
};

/// One connection, (re)opened lazily. Errors are typed chargeonce::ec values:
/// business outcomes (busy, not_found, ...) as such, every other failure
/// (lost connection, timeout, unexpected SQL error) as storage_unavailable.
/// A result is returned only after its transaction committed.
class store {
public:
  explicit store(store_options opts);
  ~store();
  store(const store&) = delete;
  store& operator=(const store&) = delete;

  caf::expected<chat_status> create_chat(const chat_spec& spec);

  /// Locks the chat row, takes the lowest free slot below the chat's limit,
  /// decides the pockets from what the other active holds left, inserts the
  /// reservation. No free slot, or the UNIQUE (chat_id, slot) index's
  /// conflict, is busy. A non-empty request_id that names one of the chat's
  /// jobs, active or ended within request_retention, returns that job (with
  /// its final status once ended); of another kind it is invalid_argument.
  /// A chat whose limit is above 1 must send a request_id. `units` (0: 1)
  /// is split over the kind's pockets in the catalog's order
  /// (chargeonce_reserve).
  caf::expected<reservation> reserve(chat_id chat, const kind& k,
                                     const std::string& request_id,
                                     int32_t units = 0);

  /// queued -> in_progress; starting an in_progress one again returns it.
  /// A `worker` named ("" for none) is recorded by the start of a queued
  /// job; once started, a start, heartbeat, commit or fail naming another
  /// one is already_started (the one naming none goes on as before).
  caf::expected<reservation> start(chat_id chat, reservation_id id,
                                   const std::string& worker = {});

  /// Sets a started job's lease to now + lease_duration.
  caf::expected<reservation> heartbeat(chat_id chat, reservation_id id,
                                       const std::string& worker = {});

  /// Subtracts exactly the held amounts of `units` (0: all held; more is
  /// invalid_argument) clamped at 0 under the chat row's lock, writes the
  /// ledger row and deletes the reservation, releasing the rest. Committing
  /// a committed reservation returns the first receipt and charges nothing.
  caf::expected<receipt> commit(chat_id chat, reservation_id id,
                                int32_t units = 0,
                                const std::string& worker = {});

  /// Deletes the reservation whatever its status; returns what it held.
  caf::expected<reservation> fail(chat_id chat, reservation_id id,
                                  const std::string& worker = {});

  /// Deletes the chat's only active reservation if still queued; too_late
  /// once started; invalid_argument (naming them) when several are active.
  caf::expected<reservation> cancel(chat_id chat);

  /// Cancels the reservation `id`, or (id 0) the job of `request_id`.
  caf::expected<reservation> cancel(chat_id chat, reservation_id id,
                                    const std::string& request_id);

  caf::expected<chat_status> status(chat_id chat);

  // -- the support view (protocol/history.hpp) -------------------------------

  /// One page of the chat's history: up to `limit` ledger rows below the
  /// ledger id `before` (0: the newest), newest first, with the
  /// reservations whose time falls in the page merged in. not_found for an
  /// unknown chat, invalid_argument for a `before` not of this chat.
  caf::expected<history_page> history(chat_id chat, int64_t before,
                                      uint32_t limit);

  /// Status, plan and why, next refill, deadlines and the last ten
  /// history entries, in one transaction.
  caf::expected<chat_explanation> explain(chat_id chat);

  // -- outcome unknown (server-side functions in either mode: rare) ----------

  /// A started job whose provider call timed out: out of its slot, its hold
  /// kept, until resolve or reconcile_timeout. Repeated with the same
  /// provider_ref, the same answer; with another, invalid_argument.
  caf::expected<reservation> uncertain(chat_id chat, reservation_id id,
                                       const std::string& provider_ref,
                                       const std::string& worker = {});

  /// "succeeded" charges the hold (of `units`, 0: all held) in one ledger
  /// row, "failed" releases it; once: a retry answers the first resolution,
  /// the other outcome is invalid_state, after reconcile_timeout expired.
  caf::expected<resolution> resolve(chat_id chat, reservation_id id,
                                    const std::string& outcome, int32_t units);

  /// Up to `limit` jobs of unknown outcome after reservation id `after`, by
  /// id (an index of the open ones: never a scan of the resolved).
  caf::expected<unresolved_page> unresolved(reservation_id after,
                                            uint32_t limit);

  /// Applies operations of different chats in one statement and one commit;
  /// the answer i belongs to operation i. Each is decided on its own (a busy
  /// one never fails its neighbours); an outage fails them all with
  /// storage_unavailable. Operations of one chat keep their order. At most
  /// statement_operations_max operations.
  std::vector<batch_result> apply(const std::vector<operation>& ops);

  /// apply() in steps, for a caller that overlaps batches: `send` hands a
  /// batch to Postgres without waiting; `await_rows` waits until the oldest
  /// batch sent has its rows (Postgres is committing it now) or failed;
  /// `receive` returns the oldest batch's answers once it committed. A
  /// batch sent after await_rows waits at Postgres while the one before
  /// commits, and starts right after it, without a round trip between them.
  /// Batches are received in the order they were sent; none may be in
  /// flight when another operation of the store runs. With `early_rows`
  /// false, Postgres sends the rows with the commit, in one read: await_rows
  /// then returns only once the batch committed (for a caller with nothing
  /// to send behind it, one wake-up instead of two).
  void send(const std::vector<operation>& ops, bool early_rows = true);
  void await_rows();
  std::vector<batch_result> receive();
  /// Batches sent and not yet received.
  size_t batches_in_flight() const;

  /// Connects if there is no open connection yet, then returns its Postgres
  /// backend's process id; 0 when Postgres cannot be reached.
  /// chargeonce-bench reads the backend's CPU time from /proc when Postgres
  /// runs on the same machine.
  int connect_backend();

  // -- limits and purchases ---------------------------------------------------

  /// Records activity under the chat row's lock; registers an unknown chat on
  /// the free plan (started false); opens the window, or refills the daily
  /// pockets to the plan's quota when refill_interval has passed. Never
  /// touches reservations.
  caf::expected<chat_status> touch(chat_id chat);

  /// Adds credits to the balance as a grant with `terms` and writes a
  /// ledger row, once per payment_id: a retry with the same terms returns
  /// the first receipt, other terms are invalid_argument.
  caf::expected<top_up_receipt> top_up(chat_id chat, int64_t credits,
                                       const std::string& payment_id,
                                       const grant_terms& terms = {});

  /// Voids a grant named by id (payment_id empty) or by its top-up's
  /// payment_id (grant 0): its unheld credits leave the balance (ledger
  /// `void`), its holds finish normally. Answers the grant after the void;
  /// a second void changes nothing and answers the same.
  caf::expected<grant_info> void_grant(chat_id chat, int64_t grant,
                                       const std::string& payment_id);

  caf::expected<chat_status> set_premium(chat_id chat, caf::timestamp until);

  caf::expected<chat_status> set_flags(chat_id chat, const flags_update& x);

  /// Sets the chat's own limit of active jobs (none: its plan's again) and
  /// its own balance-low threshold (none: the server's again), each when
  /// `x` sets it. Jobs above a lowered limit finish; new ones wait until
  /// the count is below. A threshold changed fires nothing by itself:
  /// balance_low marks a fall of the balance across it.
  caf::expected<chat_status> set_limits(chat_id chat, const limits_update& x);
  /// Sets the job limit alone, the threshold left as it is.
  caf::expected<chat_status>
  set_limits(chat_id chat, const caf::optional<int32_t>& max_active_jobs) {
    return set_limits(chat,
                      limits_update{max_active_jobs, true, caf::none, false});
  }

  /// Refills up to `limit` started, unblocked, unbanned chats quiet for
  /// reactivation_after and not reactivated since, after `after` in
  /// (last_activity_at, chat_id) order; closes their windows.
  caf::expected<reactivation_page>
  reactivation_chunk(const reactivation_cursor& after, uint32_t limit);

  // -- sweeping ---------------------------------------------------------------

  /// Up to `limit` reservations past their deadline after `after`, in the
  /// order of the phase's index (keyset pagination: never a full scan, never
  /// all rows at once).
  caf::expected<std::vector<sweep_candidate>>
  sweep_chunk(const sweep_cursor& after, uint32_t limit);

  /// Deletes the reservation if it is still past its deadline (re-checked:
  /// a heartbeat or a commit may have come first) and records it as
  /// released, in one transaction; or releases a job of unknown outcome
  /// past reconcile_timeout, unless it was resolved meanwhile (reason
  /// "unresolved"). not_found when there was nothing to do.
  caf::expected<reservation_released> release(chat_id chat, reservation_id id);

  /// Forgets released reservations and resolved jobs of unknown outcome
  /// older than release_retention, ended jobs older than
  /// request_retention and events older than event_retention, in chunks;
  /// returns how many rows were deleted.
  caf::expected<uint64_t> prune();

  /// The supervisor's expiry scan: grants past their expires_at expire
  /// (their unheld credits leave the balance, one `expire` ledger row and
  /// one credits_expired event each), their chats locked in chat-id order
  /// as every writer locks them, a chunk per transaction; then grants that
  /// expire within expiry_notice get their one credits_expiring event.
  /// Returns how many grants expired.
  caf::expected<uint64_t> expire_grants();

  /// Up to `limit` events with an id above `after`, in id order, and the
  /// newest id given. Numbers the events committed without an id first
  /// (at most 10,000 per call), under the clock's row lock until this
  /// transaction commits: a later read never finds a smaller id.
  caf::expected<event_page> events_after(event_id after, uint32_t limit);

  /// Active reservations in Postgres, of every server, by the chat's plan
  /// now (the metrics gauges).
  caf::expected<active_count> count_active();

  /// The server process id of the current connection (0 if none); lets tests
  /// kill exactly this backend.
  int backend_pid() const;

  /// One round trip (connecting first if needed): true if a writable
  /// Postgres answered; storage_unavailable if none did.
  caf::expected<bool> ping();

  /// Connections this store has opened: 1 after the first operation, one
  /// more for each reconnect (a lost connection, a failover).
  uint64_t connections_made() const;

  /// True while the last operation found no writable Postgres (a lost or
  /// refused connection, a standby: persistence::lost_primary); false again
  /// once one reaches it. A deadlock or a statement timeout is not that.
  bool unavailable() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace chargeonce::persistence
