// SPDX-License-Identifier: Apache-2.0
// What chargeonce-chaos reads and does to Postgres from the outside: the
// rows its auditor checks against its own record, and the backend kills it
// injects as faults. All the chaos tool's SQL lives here.
#pragma once

#include "protocol/types.hpp"

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace chargeonce::persistence {

/// One chat's pockets as Postgres has them now.
struct audit_chat {
  chat_id chat = 0;
  pockets available;
  int64_t window = 0; ///< its window number: one more at every refill
  /// What its grants have left (credits - charged - expired - voided):
  /// the balance pocket, grant by grant.
  int64_t grants_left = 0;
  /// What contradicts its sole grant (chats.sole_grant, the fast path of a
  /// hold on balance): its other live grants with credits nobody holds,
  /// and one more when the sole grant is not the chat's or has ended
  /// (expired or voided, as written). 0 without one.
  int64_t sole_grant_rivals = 0;
};

/// One ledger row: a charge (reservation set), a top-up (payment_id set),
/// a refill or an admin change (detail set).
struct audit_ledger_row {
  int64_t id = 0;
  std::string entry = "charge";   ///< charge, top_up, refill or admin
  bool charge = true;             ///< entry = 'charge'
  reservation_id reservation = 0; ///< charges only
  chat_id chat = 0;
  pockets charged;        ///< charges only
  int32_t credited = 0;   ///< top-ups only
  std::string payment_id; ///< top-ups only
  /// Signed, per pocket: what a refill or an admin change did to the
  /// pockets, and what a charge took from them (less than `charged` names
  /// when a past window's daily part paid).
  pockets changed;
  std::string detail;     ///< refills and admin changes
  bool has_after = false; ///< rows written before the ledger kept pockets: no
  pockets after;          ///< the chat's pockets after this row's change
  int64_t at_us = 0;      ///< committed_at, microseconds since the epoch
  /// A charge: the window that paid (its hold's); a refill: the window it
  /// opened. No window (NULL) for the others.
  bool has_window = false;
  int64_t window = 0;
  /// The grants the row names: a charge's hold's grants (in the hold's
  /// order) with what it took of each; a top-up's, expire's or void's one
  /// grant with the credits it gave or took out of the balance.
  std::vector<int64_t> grant_ids;
  std::vector<int32_t> grant_credits;

  /// The row's change of the pockets: a charge's `changed` (-charged for a
  /// charge written before charges named their window), +credited in
  /// balance, or changed.
  pockets change() const;
};

/// A reservation still in the table.
struct audit_reservation {
  reservation_id id = 0;
  chat_id chat = 0;
  bool started = false;
  pockets held;
  int64_t created_us = 0;
  int64_t window = 0; ///< the window its hold was taken in
};

/// A reservation the sweeper released (released_reservations).
struct audit_release {
  reservation_id id = 0;
  chat_id chat = 0;
  std::string reason;
  int64_t released_us = 0; ///< the releasing transaction's start
};

/// A job of unknown outcome (uncertain_reservations), open or settled.
struct audit_uncertain {
  reservation_id id = 0;
  chat_id chat = 0;
  std::string outcome; ///< "" while open; succeeded, failed, released
  int64_t uncertain_us = 0;
  int64_t window = 0;      ///< the window its hold was taken in
  int64_t created_us = 0;  ///< its reservation's created_at
  int64_t resolved_us = 0; ///< when it was settled; 0 while open
  pockets held{};
};

/// A job with a request id that ended (ended_reservations).
struct audit_ended {
  reservation_id id = 0;
  int64_t window = 0; ///< the window its hold was taken in
  chat_id chat = 0;
  int64_t created_us = 0; ///< the reservation's created_at
  int64_t ended_us = 0;   ///< the ending transaction's start
  pockets held{};
};

/// One credit grant as Postgres has it now. Times are microseconds since
/// the epoch in Postgres' clock; 0 where the column is NULL.
struct audit_grant {
  int64_t id = 0;
  chat_id chat = 0;
  std::string source = "purchase";
  int32_t credits = 0;
  int32_t charged = 0;
  int32_t expired = 0;
  int32_t voided = 0;
  int32_t priority = 100;
  bool expires = false; ///< expires_at is set
  int64_t expires_us = 0;
  int64_t created_us = 0;
  std::string payment_id; ///< empty: not a top-up's (create-chat's)
  int64_t expired_us = 0; ///< expired_at: its unheld credits expired
  int64_t voided_us = 0;
  int64_t noticed_us = 0; ///< expiring_noticed_at

  /// credits - charged - expired - voided: what holds hold of it included.
  int64_t left() const { return int64_t{credits} - charged - expired - voided; }
};

/// A hold on grants that Postgres still keeps whole: an active
/// reservation's, or a job of unknown outcome's (open or settled).
struct audit_hold {
  reservation_id id = 0;
  chat_id chat = 0;
  int64_t created_us = 0;
  bool open = true;            ///< active, or uncertain and unresolved
  std::vector<int64_t> grants; ///< in the hold's (spending) order
  std::vector<int32_t> credits;
};

/// One row of the events table (numbered or not yet).
struct audit_event {
  std::string event;
  chat_id chat = 0;
  reservation_id reservation = 0; ///< 0 for limits_refilled
  std::string detail;             ///< a release's reason, a provider_ref
};

/// Everything the auditor compares with its record, for chats in
/// (first, first + count].
struct audit_snapshot {
  std::vector<audit_chat> chats;
  std::vector<audit_ledger_row> ledger;
  std::vector<audit_reservation> reservations;
  std::vector<audit_release> releases;
  std::vector<audit_uncertain> uncertain;
  std::vector<audit_event> events;
  /// Jobs with a request id that ended, by id.
  std::vector<audit_ended> ended;
  std::vector<audit_grant> grants;
  std::vector<audit_hold> holds;
  int64_t read_us = 0; ///< the snapshot's now(), in Postgres' clock
};

/// Reads chats, ledger, reservations, releases, jobs of unknown outcome,
/// events, grants and holds of the chat range in one repeatable-read
/// transaction, so they agree with each other.
caf::expected<audit_snapshot> read_audit_snapshot(const std::string& dsn,
                                                  chat_id first, int64_t count);

/// How many reservations the chat range still has, jobs of unknown outcome
/// not yet settled included.
caf::expected<int64_t> count_reservations(const std::string& dsn, chat_id first,
                                          int64_t count);

/// pg_terminate_backend of every client backend whose application_name is
/// `application_name` (the chaos tool's servers); how many were terminated.
caf::expected<int64_t> terminate_backends(const std::string& dsn,
                                          const std::string& application_name);

/// Self-test of the auditor only: deletes one event of the range (not a
/// refill's), as if its change had committed without it; in a range
/// without one, writes a release event of a reservation that never was.
caf::error forge_lost_event(const std::string& dsn, chat_id first,
                            int64_t count);

/// Self-test of the auditor only: writes a ledger charge for `chat` that no
/// commit made (reservation id `forged`), so the audit must report it. It
/// names the window a server would: the reservation's, when Postgres still
/// knows it (ended or uncertain), else the chat's.
caf::error forge_charge(const std::string& dsn, chat_id chat,
                        reservation_id forged);

/// Self-test of the auditor only: moves one unit from the balance of a chat
/// of the range that has one into its pocket `to`, with no ledger row.
/// Every total still adds up; only conservation per pocket sees it.
/// ec::not_found when no chat of the range has a balance.
caf::error forge_pocket_move(const std::string& dsn, chat_id first,
                             int64_t count, const std::string& to);

/// Self-test of the auditor only: the pockets recorded in one ledger row of
/// the range (not an admin row: create-chat's is checked against what the
/// chaos tool asked for) that has a row after it (of the same chat) gain
/// one unit of balance, as if that row's "after" were not the next row's
/// "before". Every change and every current pocket stays as it was: only the
/// check of the ledger's chain sees it. ec::not_found when no chat has two
/// rows.
/// Charges one credit of the first grant in the range that has any left
/// without touching the balance pocket: the balance then says more than
/// its grants, which the audit must report.
caf::error forge_grant_left(const std::string& dsn, chat_id first,
                            int64_t count);

/// Names another chat's grant as the sole grant of the first chat in the
/// range that has one: its holds on balance would be taken from a grant
/// not its own, which the audit must report.
caf::error forge_sole_grant(const std::string& dsn, chat_id first,
                            int64_t count);

caf::error forge_ledger_after(const std::string& dsn, chat_id first,
                              int64_t count);

/// Self-test of the auditor only: the first top-up's grant of the range
/// gets one credit more and one charged more, with no ledger row: what it
/// has left and every pocket stay as they were; only the check of each
/// grant against the ledger's rows naming it sees it.
caf::error forge_grant_conserved(const std::string& dsn, chat_id first,
                                 int64_t count);

/// Self-test of the auditor only: the first grant of the range that a
/// charge's hold names and that has expired is made to have expired a
/// millisecond before that reservation was created (its expires_at moved,
/// nothing else), as if the hold had been taken from an expired grant.
caf::error forge_hold_expired(const std::string& dsn, chat_id first,
                              int64_t count);

/// Self-test of the auditor only: the first charge of the range whose hold
/// spans three grants or more is made to have passed over its second one:
/// that grant leaves the charge's row, and what the charge took of it is
/// taken of the hold's last grant instead (the row and both grants alike,
/// every total kept). ec::not_found when no hold spans three grants.
caf::error forge_grant_order(const std::string& dsn, chat_id first,
                             int64_t count);

/// Self-test of the auditor only: a second void row (of no credits, the
/// pockets unchanged) for the first voided grant of the range, as a void
/// that a retry repeated would write.
caf::error forge_void_twice(const std::string& dsn, chat_id first,
                            int64_t count);

/// Self-test of the auditor only: the first settled job of unknown outcome
/// of the range is made open again, as if the sweep had never released it
/// nor anyone resolved it. ec::not_found when the range has none.
caf::error forge_reopen_uncertain(const std::string& dsn, chat_id first,
                                  int64_t count);

/// Self-test of the auditor only: the first commit of fewer units than held
/// in the range is made to have charged its whole hold (its ledger row and
/// the chat's pockets alike, so every total still adds up): only the check
/// of each charge against what its units cost sees it. ec::not_found when
/// no commit of the range released anything.
caf::error forge_over_capture(const std::string& dsn, chat_id first,
                              int64_t count);

/// Self-test of the auditor only: the first charge of the range that a
/// past window paid (written after a refill row that opened a later window
/// than the charge names) and whose daily part every later pocket can
/// give, is made to have taken that daily part from the new window's
/// pockets too, as a commit that ignores hold windows would: its `changed`,
/// the pockets recorded from it on and the chat's pockets alike, so the
/// ledger's chain and every total still add up; only the check that a job
/// is paid by its own window sees it. ec::not_found when no charge of the
/// range was paid by a past window.
caf::error forge_window_paid_twice(const std::string& dsn, chat_id first,
                                   int64_t count);

} // namespace chargeonce::persistence
