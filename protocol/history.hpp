// SPDX-License-Identifier: Apache-2.0
// The support view of one chat: its history (ledger rows and reservations
// in one timeline, newest first) and `explain`, what support needs to
// answer "what happened to my credits?" in one look.
#pragma once

#include "protocol/types.hpp"

#include <caf/meta/type_name.hpp>
#include <caf/optional.hpp>
#include <caf/timestamp.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace chargeonce {

/// The credits of one grant that a ledger row moved (a charge: what it took
/// from each grant; a top-up: the grant it made; expire, void: the grant's
/// credits that left) or that a hold holds.
struct grant_part {
  int64_t grant = 0;
  int32_t credits = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, grant_part& x) {
  return f(caf::meta::type_name("grant_part"), x.grant, x.credits);
}

/// One entry of a chat's history: a ledger row (a change of its pockets:
/// cause commit, top_up, refill or admin) or a reservation (cause
/// reservation: active, or how it ended).
struct history_entry {
  caf::timestamp at; ///< the row's time; a reservation's end (or creation)
  std::string cause; ///< commit, top_up, refill, admin or reservation
  /// refill: window or reactivation; admin: create_chat, set_premium, seed
  /// or opening; reservation released: lease_expired, sweep_timeout or
  /// unresolved; a job that went uncertain: its resolution (succeeded,
  /// failed) or uncertain while open.
  std::string detail;
  int64_t ledger_id = 0;          ///< the ledger row (0: a reservation)
  reservation_id reservation = 0; ///< commit and reservation entries
  std::string request_id;         ///< when known
  std::string payment_id;         ///< top_up only
  std::string kind;               ///< commit and reservation; "" unknown
  /// Ledger rows: the signed change per pocket (a commit's is negative).
  pockets change;
  /// Ledger rows: the chat's pockets after the change; none for rows
  /// written before the ledger kept them.
  caf::optional<pockets> after;
  pockets released;  ///< commit: what the hold gave back
  int32_t units = 0; ///< commit: units charged; reservation: units held
  /// reservation: queued, in_progress, outcome_unknown while active; then
  /// committed, failed, cancelled or released.
  std::string status;
  pockets held;                             ///< reservation: its hold
  caf::optional<caf::timestamp> created_at; ///< reservation
  /// An active reservation: when the sweep releases it unless it ends (or,
  /// outcome unknown, unless it is resolved).
  caf::optional<caf::timestamp> deadline;
  bool cancel_requested = false; ///< reservation
  /// reservation: the window its hold was taken in; commit: the window
  /// that paid; refill: the window it opened. None for other rows.
  caf::optional<int64_t> window;
  /// The grants of the balance it concerns, in spending order: a ledger
  /// row's (grant_part), an active or uncertain reservation's hold; empty
  /// for rows without balance and for rows written before grants.
  std::vector<grant_part> grants;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, history_entry& x) {
  return f(caf::meta::type_name("history_entry"), x.at, x.cause, x.detail,
           x.ledger_id, x.reservation, x.request_id, x.payment_id, x.kind,
           x.change, x.after, x.released, x.units, x.status, x.held,
           x.created_at, x.deadline, x.cancel_requested, x.window, x.grants);
}

/// One page of a chat's history, newest first: up to `limit` ledger rows
/// below a ledger id, and the reservations whose time falls between the
/// oldest of them and the page before (the last page: every older one).
struct history_page {
  chat_id chat = 0;
  std::vector<history_entry> entries;
  /// The cursor of the next page (its `before`); 0: this is the last.
  int64_t next_before = 0;
  /// More reservations fell into this page than history_reservations_max:
  /// the oldest of them are left out.
  bool truncated = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, history_page& x) {
  return f(caf::meta::type_name("history_page"), x.chat, x.entries,
           x.next_before, x.truncated);
}

/// What a support person needs of one chat, read in one transaction.
struct chat_explanation {
  chat_status status; ///< its reservations with their deadlines below
  /// Why the chat is on its plan: "premium until …", "premium ended …" or
  /// "never premium".
  std::string plan_reason;
  /// When the open window may refill (its start plus refill-interval; the
  /// next activity after it refills); none: no window is open, the next
  /// activity opens one.
  caf::optional<caf::timestamp> next_refill_at;
  int64_t refill_interval_ms = 0;
  /// The deadline of each of status.reservations, in its order.
  std::vector<caf::optional<caf::timestamp>> deadlines;
  history_page recent; ///< the last explain_history_entries ledger rows
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chat_explanation& x) {
  return f(caf::meta::type_name("chat_explanation"), x.status, x.plan_reason,
           x.next_refill_at, x.refill_interval_ms, x.deadlines, x.recent);
}

/// A page holds 1 to history_page_max ledger rows (default
/// history_page_default).
inline constexpr uint32_t history_page_max = 1000;
inline constexpr uint32_t history_page_default = 50;
/// At most this many reservations per page.
inline constexpr uint32_t history_reservations_max = 1000;
/// explain shows this many ledger rows.
inline constexpr uint32_t explain_history_entries = 10;

} // namespace chargeonce
