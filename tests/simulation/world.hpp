// SPDX-License-Identifier: Apache-2.0
// An in-memory database with the semantics of the Postgres schema and of
// persistence/store*.cpp, for the seeded simulation. Every rule here mirrors
// one in the store; the real one is tested against Postgres elsewhere. It
// also keeps what the auditor needs and no table holds (every hold ever
// made, which starts and cancels were applied, refills), and the mutants
// that prove the auditor catches a broken rule.
#pragma once

#include "protocol/catalog.hpp"
#include "protocol/events.hpp"
#include "protocol/types.hpp"

#include <caf/actor_addr.hpp>
#include <caf/expected.hpp>

#include <chrono>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace chargeonce::test {

/// A deliberately broken rule, switched on at run time by the mutant tests:
/// each one must be caught by the auditor within a few seeds.
enum class sim_mutant : uint8_t {
  none,
  commit_not_idempotent, ///< a retried commit charges again (invariants 1, 2)
  charge_released,       ///< a released reservation can be committed (3)
  no_unique_index,       ///< reserve ignores the active reservation (3)
  cancel_in_progress,    ///< cancel deletes a started job (6)
  sweep_blind,           ///< the sweep never finds a lapsed lease (4)
  outage_says_busy,      ///< during an outage, a locked chat is busy (5)
  /// A commit whose transaction outlived its killed chat actor charges
  /// twice (invariants 1, 2): only a chat kill mid-operation triggers it.
  killed_commit_charges_twice,
  reserve_ignores_holds, ///< pays from pockets other jobs hold (8)
  limit_ignored,         ///< a chat gets one job more than its limit (7)
  request_id_forgotten,  ///< an ended job's request id starts a new one (9)
  /// A commit takes its price from balance while its receipt and ledger
  /// row name the pockets it held: every total adds up, only the
  /// conservation per pocket sees it (2).
  charged_from_balance,
  /// A commit naming more units than held charges the extra ones from the
  /// kind's last pocket instead of being refused (a charge beyond its hold).
  commit_units_unchecked,
  /// A commit of fewer units than held charges balance first, the daily
  /// pockets last (more than those units of the hold cost there).
  partial_commit_balance_first,
  /// Under the `request` policy, a cancel of a started job marks it but
  /// answers as if the job had been deleted while queued: the user is told
  /// "cancelled" of a job that runs on and is charged (10).
  cancel_request_acks_cancelled,
  /// A commit of a job cancelled while queued (a buggy worker's, told the
  /// job was gone) charges it (10).
  cancelled_job_committable,
  /// A worker's stale commit of a job it declared uncertain charges it,
  /// outside resolve (11).
  commit_of_uncertain,
  /// The sweep never finds a job of unknown outcome past reconcile-timeout:
  /// its hold stays forever (12).
  unresolved_never_released,
  /// A refill of the daily window changes the pockets and writes no ledger
  /// row: every total still adds up, only the ledger's chain sees it (13).
  refill_unrecorded,
  /// A lapsed lease's release writes no event (a trigger missing): the
  /// gateway is never told to retry (14).
  event_lost,
  /// A read of the events table starts one event past the reader's cursor
  /// (an off-by-one): written, never delivered (14).
  event_skipped_by_reader,
  /// A start naming another worker than the one that started the job is
  /// answered as the first one's retry: both workers run it (15).
  second_worker_starts,
  /// The behaviour before windows had numbers: holds of past windows count
  /// against the new window's pockets, and a commit of a past window's hold
  /// takes its daily part from them, after the refill threw away the unit
  /// that held it: a job reserved before a refill is paid by both windows
  /// (16).
  paid_by_new_window,
  /// A grant whose unheld credits a void took out of the balance gets the
  /// credits its holds release back, as if it were live: they return to
  /// the balance instead of being voided (17).
  void_releases_to_balance,
  /// Reserve neither expires the chat's due grants first nor skips them
  /// when it splits a hold: a grant past its expiry pays a new hold (18).
  hold_skips_expiry,
  /// A hold is split over the grants in creation order, not spending
  /// order (19).
  hold_in_creation_order,
  /// The expiry of a chat's grants does not skip grants that expired
  /// already: one that expired while a job held it expires again at the
  /// chat's next writer (20).
  expiry_repeated,
  /// The supervisor's expiry scan finds nothing: a quiet chat's grant,
  /// which no writer comes to expire, keeps its credits past its expiry
  /// (20).
  expiry_scan_blind,
};

const char* to_string(sim_mutant x);

struct sim_chat {
  pockets available;
  /// The window number: 0 at creation, one more at every refill; a hold's
  /// daily part belongs to the window it was taken in.
  int64_t window = 0;
  caf::optional<int32_t> max_active_jobs; ///< none: the plan's
  caf::optional<caf::timestamp> premium_until;
  bool started = false;
  bool blocked = false;
  bool banned = false;
  caf::optional<caf::timestamp> window_started_at;
  caf::optional<caf::timestamp> last_activity_at;
  caf::optional<caf::timestamp> reactivated_at;
};

/// One credit grant (a row of 004_grants.sql's grants): `left` = credits
/// - charged - expired - voided, its held credits still in it.
struct sim_grant {
  int64_t id = 0;
  chat_id chat = 0;
  std::string source = "purchase"; ///< purchase, promo or admin
  int32_t credits = 0;
  int32_t charged = 0;
  int32_t expired = 0;
  int32_t voided = 0;
  int32_t priority = grant_priority_default; ///< lower spends first
  caf::optional<caf::timestamp> expires_at;  ///< none: never
  int64_t expires_in_ms = 0; ///< as the top-up gave it; 0: not relative
  std::string payment_id;    ///< empty: an opening balance
  caf::timestamp created_at;
  /// Set once, when its unheld credits expired (held ones expire as their
  /// holds end).
  caf::optional<caf::timestamp> expired_at;
  caf::optional<caf::timestamp> voided_at;

  int32_t left() const { return credits - charged - expired - voided; }
};

/// A hold's part of one grant (held_grants, held_grant_credits), or a
/// ledger row's (grant_ids, grant_credits).
struct sim_grant_part {
  int64_t grant = 0;
  int32_t credits = 0;
};

/// A grant as a reserve saw it when it split its hold: the auditor judges
/// the split by these (invariants 18 and 19).
struct sim_grant_seen {
  sim_grant grant;
  int32_t held = 0; ///< by the chat's other open holds
};

/// What a reserve saw when it held: the pockets, the holds on them of every
/// active job of the chat including the new one (held_by: past windows'
/// holds by their balance part), the chat's limit, and the window the hold
/// was taken in; and for its balance part, when it held, the chat's grants
/// and the split over them.
struct sim_hold_record {
  chat_id chat = 0;
  pockets amounts;
  pockets held;
  int32_t limit = 1;
  int64_t window = 0;
  caf::timestamp at;
  std::vector<sim_grant_seen> grants_seen;
  std::vector<sim_grant_part> grants;
};

/// An open hold's split over grants: an active or uncertain job's.
struct sim_open_hold {
  chat_id chat = 0;
  std::vector<sim_grant_part> parts;
};

/// One row of the ledger of every pocket change, as 008_ledger_of_every_
/// change.sql writes it: its change (for a charge, what the receipt says it
/// took) and the chat's pockets after it.
struct sim_ledger_row {
  chat_id chat = 0;
  std::string entry; ///< charge, top_up, refill, admin, expire or void
  pockets change;
  pockets after;
  /// A charge's job; for an expire or void row, the hold whose end
  /// released them (the table says so in its detail), 0 for the grant's
  /// own expiry or void.
  reservation_id reservation = 0;
  /// The grants it took from (a charge) or gave to (a top-up), or the one
  /// that expired or was voided.
  std::vector<sim_grant_part> grants;
  /// The chat's window when the row was written (a refill's: the window it
  /// opened).
  int64_t window = 0;
};

/// The daily pockets of `x`: all but balance, the one purchased pocket,
/// which has no windows.
pockets daily_part(const pockets& x);

struct sim_world {
  // -- the database --
  std::map<chat_id, sim_chat> chats;
  std::map<reservation_id, reservation> reservations; ///< active only
  std::map<reservation_id, receipt> ledger;
  /// Every change of a chat's pockets, in order (the ledger's rows).
  std::vector<sim_ledger_row> history;
  std::map<reservation_id, chat_id> released;
  std::map<std::string, top_up_receipt> purchases;
  reservation_id next_id = 0;
  caf::timespan sweep_timeout = std::chrono::seconds(30);
  caf::timespan lease_duration = std::chrono::seconds(5);
  caf::timespan refill_interval = std::chrono::seconds(40);
  caf::timespan reactivation_after = std::chrono::seconds(25);
  /// The kinds and pockets sold: what reserve decides from and a refill
  /// restores (store_options::products).
  catalog products = builtin_catalog({});
  int32_t free_max_jobs = 1;
  int32_t premium_max_jobs = 1;
  /// Jobs with a request id after they ended (ended_reservations).
  std::map<reservation_id, reservation> ended;
  /// Jobs of unknown outcome, open (status outcome_unknown, no slot).
  std::map<reservation_id, reservation> uncertain;
  /// How each was settled: succeeded, failed, or released (the timeout).
  std::map<reservation_id, resolution> resolved;
  caf::timespan reconcile_timeout = std::chrono::seconds(60);
  /// The events table (010_events.sql): each event written with the change
  /// it announces, ids in commit order from 1.
  std::vector<event_record> events;
  /// The grants table, ids in creation order from 1.
  std::map<int64_t, sim_grant> grants;
  /// The splits of the open holds (active and uncertain jobs) over grants.
  std::map<reservation_id, sim_open_hold> holds_on_grants;

  // -- what the auditor needs beyond the tables --
  std::map<reservation_id, pockets> held_of; ///< every hold ever made
  std::set<reservation_id> started_applied;  ///< a start changed its status
  /// The worker a start recorded (013_worker_identity.sql).
  std::map<reservation_id, std::string> worker_of;
  std::set<reservation_id> cancelled_applied;
  /// A cancel marked a started job cancel_requested (the `request` policy).
  std::set<reservation_id> cancel_requested_applied;
  /// Went outcome_unknown; and what charged each ledger row ("commit" or
  /// "resolve").
  std::set<reservation_id> uncertain_applied;
  std::map<reservation_id, std::string> charged_by;
  std::set<reservation_id> failed_applied;
  std::map<chat_id, pockets> refilled; ///< net change made by refills
  std::map<reservation_id, sim_hold_record> made_with; ///< at each reserve
  /// Each reservation's units and the units its hold pays per pocket.
  std::map<reservation_id, std::pair<int32_t, pockets>> units_of;
  /// Every reservation each (chat, request_id) ever named.
  std::map<std::pair<chat_id, std::string>, std::set<reservation_id>> named;
  uint64_t refills = 0; ///< windows refilled, either way
  /// The daily pockets each window of each chat opened with (at creation,
  /// at each refill): the most that window can pay.
  std::map<std::pair<chat_id, int64_t>, pockets> opened_with;
  /// Grants that expired, or were voided, while a job held part of them:
  /// the figures that show the cases the grant invariants are about ran.
  uint64_t expired_while_held = 0;
  uint64_t voided_while_held = 0;

  // -- faults, chosen by the seeded generator --
  std::mt19937_64 rng;
  int fault_percent = 0; ///< per persistence operation
  bool outage = false;   ///< every operation fails before writing
  /// Faults injected so far by type (printed, summed over the seeds).
  std::map<std::string, uint64_t> faults;
  /// Until then, storage was impaired (a fault, a stall, a restart): the
  /// deadline check of invariant 4 starts after it.
  caf::timestamp impaired_until;
  sim_mutant mutant = sim_mutant::none;
  /// Upper bound of a delay fault (a stalled transaction).
  caf::timespan stall_max = std::chrono::seconds(10);
  /// The persistence actor answers storage_unavailable after this long.
  caf::timespan store_timeout = std::chrono::seconds(5);

  // -- hooks for the driver (weak handles: the world outlives no actor) --
  chat_id stall_next = 0;       ///< this chat's next operation stalls (forced)
  caf::actor_addr stalled_chat; ///< who sent that operation
  std::map<chat_id, caf::actor_addr> actors; ///< last chat actor seen
  std::set<caf::actor_addr> killed;          ///< chat actors sent an exit

  /// Counts one fault and extends the impaired period to `until`.
  void impair(const char* type, caf::timestamp until);

  // -- operations (same answers as the store) --
  caf::expected<chat_status> create(const chat_spec& spec, caf::timestamp now);
  caf::expected<reservation> reserve(chat_id chat, kind k,
                                     const std::string& request_id,
                                     caf::timestamp now, int32_t units = 0);
  /// `who`: the worker's identity, "" for none (chargeonce_claim).
  caf::expected<reservation> start(chat_id chat, reservation_id id,
                                   const std::string& who);
  caf::expected<reservation> heartbeat(chat_id chat, reservation_id id,
                                       caf::timestamp now,
                                       const std::string& who);
  caf::expected<receipt> commit(chat_id chat, reservation_id id,
                                caf::timestamp now, int32_t units,
                                const std::string& who);
  caf::expected<reservation> fail(chat_id chat, reservation_id id,
                                  const std::string& who, caf::timestamp now);
  caf::expected<reservation> cancel(chat_id chat, caf::timestamp now);
  caf::expected<reservation> cancel(chat_id chat, reservation_id id,
                                    const std::string& request_id,
                                    caf::timestamp now);
  caf::expected<reservation> uncertain_of(chat_id chat, reservation_id id,
                                          const std::string& provider_ref,
                                          caf::timestamp now,
                                          const std::string& who);
  /// Whether `who` may go on with `op` on reservation `id`: none, or
  /// already_started; a start of a queued job records `who`.
  caf::error claim(const char* op, chat_id chat, reservation_id id,
                   const std::string& who);
  caf::expected<resolution> resolve(chat_id chat, reservation_id id,
                                    const std::string& outcome, int32_t units,
                                    caf::timestamp now);
  unresolved_page unresolved(reservation_id after, uint32_t limit) const;
  /// Active reservations by the chat's plan at `now` (the metrics gauge;
  /// store::count_active).
  active_count count_active(caf::timestamp now) const;
  caf::expected<chat_status> status(chat_id chat, caf::timestamp now);
  caf::expected<chat_status> touch(chat_id chat, caf::timestamp now);
  caf::expected<reservation_released> release(chat_id chat, reservation_id id,
                                              caf::timestamp now);
  std::vector<sweep_candidate> sweep(const sweep_cursor& after, uint32_t limit,
                                     caf::timestamp now);
  /// A top-up: a grant with `terms` (chargeonce_top_up).
  caf::expected<top_up_receipt> top_up(chat_id chat, int64_t credits,
                                       const std::string& payment_id,
                                       const grant_terms& terms,
                                       caf::timestamp now);
  /// Voids a grant named by id or payment id (chargeonce_void_grant).
  caf::expected<grant_info> void_grant(chat_id chat, int64_t grant,
                                       const std::string& payment_id,
                                       caf::timestamp now);
  /// The supervisor's expiry scan: every chat with a grant due, in chat
  /// order, its due grants expired (chargeonce_expire_due). Grants expired.
  uint64_t expire_due(caf::timestamp now);
  caf::expected<chat_status> set_premium(chat_id chat, caf::timestamp until,
                                         caf::timestamp now);
  caf::expected<chat_status> set_flags(chat_id chat, const flags_update& x,
                                       caf::timestamp now);
  reactivation_page reactivate(const reactivation_cursor& after, uint32_t limit,
                               caf::timestamp now);
  /// At most `limit` events after `after`, and the newest id
  /// (store::events_after).
  event_page events_after(event_id after, uint32_t limit) const;

  /// The killed_commit_charges_twice mutant: takes the hold of a committed
  /// reservation once more.
  void charge_again(chat_id chat, reservation_id id);

  /// Past its deadline: older than sweep_timeout, or its lease lapsed.
  bool due(const reservation& r, caf::timestamp now) const;

  /// When `r` becomes due: the earlier of its age limit and its lease.
  caf::timestamp deadline(const reservation& r) const;

  caf::optional<reservation> active_of(chat_id chat) const;

  /// The chat's active reservations, oldest first.
  std::vector<reservation> active_in(chat_id chat) const;

  /// The chat's jobs of unknown outcome, whose holds count too.
  std::vector<reservation> uncertain_in(chat_id chat) const;

  /// The chat's own limit, else its plan's now.
  int32_t job_limit(const sim_chat& c, caf::timestamp now) const;

private:
  caf::error explain_missing(chat_id chat, reservation_id id) const;
  caf::optional<reservation> find_request(chat_id chat,
                                          const std::string& request_id) const;
  /// Remembers `r` as ended `how` when it has a request id (its ended_at is
  /// not simulated: the auditor does not read it).
  void remember_end(reservation r, reservation_status how);
  /// Appends the ledger row of a change of `chat`'s pockets, with the
  /// pockets they have now.
  void record(chat_id chat, const char* entry, pockets change,
              reservation_id id = 0, std::vector<sim_grant_part> parts = {});
  /// The row of job `id`'s charge: what it took from the pockets, and from
  /// which grants.
  void record_charge(chat_id chat, reservation_id id, const pockets& taken,
                     std::vector<sim_grant_part> parts = {});
  /// A charge of `nominal` for a hold taken in window `taken_in`: takes
  /// from the chat's pockets what falls on its current window (`taken`,
  /// each pocket stopping at zero) and returns the receipt's `charged`. In
  /// the hold's own window that is all of it; after a refill only the
  /// balance part, and `charged` still names the daily part, which the
  /// hold's window paid.
  pockets pay(chat_id chat, int64_t taken_in, const pockets& nominal,
              pockets& taken);
  /// What `holding` holds on the chat's pockets in `window` (held_by).
  pockets holds_on(const std::vector<reservation>& holding,
                   int64_t window) const;
  void refill(chat_id chat, sim_chat& c, caf::timestamp now);
  /// Writes the event that 010_events.sql's triggers write with a change.
  void announce(const char* event, chat_id chat, reservation_id id,
                std::string detail);

  // -- grants (grants.cpp, after functions/12_grants.sql) --

  /// The grant of an opening balance: admin, never expires.
  void grant_balance(chat_id chat, int32_t credits, caf::timestamp now);
  /// Credits held per grant of the chat by its open holds.
  std::map<int64_t, int32_t> grants_held(chat_id chat) const;
  /// The soonest expiry of the chat's grants that may still expire.
  caf::optional<caf::timestamp> next_expiry(chat_id chat) const;
  /// Expires the chat's due grants: their unheld credits leave the
  /// balance, held ones stay with their holds. Grants expired.
  uint64_t expire_grants(chat_id chat, caf::timestamp now);
  /// The lazy expiry every writer of the balance makes first.
  void expire_if_due(chat_id chat, caf::timestamp now);
  /// Whether job `id`'s hold has a part on grants: then its end may write
  /// the balance, and expires what is due first (chargeonce_lock_for_settle,
  /// as its callers call it).
  bool holds_grants(reservation_id id) const;
  /// Splits `credits` of balance over the chat's live grants in spending
  /// order, each at most what it has unheld; records what it saw in `seen`.
  std::vector<sim_grant_part> hold_grants(chat_id chat, int32_t credits,
                                          caf::timestamp now,
                                          std::vector<sim_grant_seen>& seen);
  /// Ends job `id`'s hold on grants: `charge` credits charged from its
  /// grants in its order (each at most its part and what it has left),
  /// the rest returned to the balance while its grant is live, else
  /// expired or voided. The credits charged of each.
  std::vector<sim_grant_part> settle_hold(chat_id chat, reservation_id id,
                                          int32_t charge, caf::timestamp now);
  /// `nominal` with its balance part charged through job `id`'s grants:
  /// clamped at the balance, settled, and the sum of what they gave. The
  /// parts charged, for the charge's ledger row, in `parts`.
  pockets charge_grants(chat_id chat, reservation_id id, pockets nominal,
                        caf::timestamp now, std::vector<sim_grant_part>& parts);
  /// `credits` of grant `g` leave the balance: one ledger row `entry`.
  void grant_leaves(sim_grant& g, int32_t credits, const char* entry,
                    reservation_id released_by);
  /// What a top-up and a void answer of a grant.
  top_up_receipt receipt_of(const sim_grant& g) const;
  grant_info info_of(const sim_grant& g) const;
};

} // namespace chargeonce::test
