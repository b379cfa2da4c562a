// SPDX-License-Identifier: Apache-2.0
// The money auditor of the seeded simulation: checks the money invariants
// (charged exactly once, conservation, at most a chat's limit of active
// reservations and fencing, no lock left, outage answers, cancel xor start,
// nothing held twice, one job per request id, a job cancelled while queued
// never charged, an uncertain job charged only by resolve succeeded, none
// left past reconcile-timeout, a ledger whose rows chain to the pockets,
// an event with each change and every event delivered, no job started by
// two workers, a job's daily part paid by the window its hold was taken
// in; per credit grant: conservation, nothing new held from an expired or
// voided grant, the spending order, each expiry and void once) against the
// simulated database and what the callers were told.
#pragma once

#include "tests/simulation/world.hpp"

#include <caf/error.hpp>

#include <map>
#include <set>
#include <string>

namespace chargeonce::test {

/// What the simulated users and workers asked for and were told.
struct sim_acks {
  std::map<chat_id, pockets> initial;
  std::set<reservation_id> commit_requested;      ///< sent, answered or not
  std::map<reservation_id, int32_t> commit_units; ///< what they named
  std::map<reservation_id, receipt> receipts; ///< first acknowledged receipt
  std::set<reservation_id> started_ok;        ///< start acknowledged
  /// The workers whose start of a job was acknowledged (invariant 15).
  std::map<reservation_id, std::set<std::string>> started_by;
  /// cancel acknowledged as cancelled while queued (the job deleted)
  std::set<reservation_id> cancelled_ok;
  /// cancel acknowledged as cancel_requested (started, the `request` policy)
  std::set<reservation_id> cancel_requested_ok;
  /// uncertain acknowledged; resolve sent with "succeeded"; resolve
  /// acknowledged with "failed"
  std::set<reservation_id> uncertain_ok;
  std::set<reservation_id> resolve_succeeded_requested;
  std::set<reservation_id> resolved_failed_ok;
};

struct sim_auditor {
  caf::timespan sweep_interval;
  caf::timespan store_timeout;
  /// (step, reservation) pairs past the deadline that invariant 4 watched
  uint64_t deadline_checks = 0;
  std::string violation; ///< the first one found
  /// Invariant 13, incrementally: the ledger rows checked so far, and
  /// where each chat's last one ended.
  size_t ledger_rows_checked = 0;
  std::map<chat_id, pockets> ledger_ended;
  /// Invariant 16, incrementally: the ledger rows checked so far, and the
  /// chat's window when each job was charged (its charge row's).
  size_t window_rows_checked = 0;
  std::map<reservation_id, int64_t> charged_in_window;
  /// Charges of a hold with a daily part, written after a refill had
  /// opened a newer window than the hold's, that invariant 16 checked.
  uint64_t straddling_checks = 0;

  /// What the ledger rows read so far say of one grant (invariants 17 and
  /// 20): credits charged, expired and voided; how often it expired or was
  /// voided itself; and how often each hold's end let its credits go.
  struct grant_tally {
    int64_t charged = 0;
    int64_t expired = 0;
    int64_t voided = 0;
    int own_expiries = 0;
    int own_voids = 0;
    int expired_events = 0;
    std::map<reservation_id, int> released_by;
  };
  /// Invariants 17 and 20, incrementally: the ledger rows and events read
  /// so far, and the tally of each grant.
  size_t grant_rows_checked = 0;
  size_t grant_events_checked = 0;
  std::map<int64_t, grant_tally> grant_tallies;
  /// Invariants 18 and 19, incrementally: the last reservation whose split
  /// over grants was judged.
  reservation_id splits_checked = 0;
  /// Splits judged where the order mattered (two or more grants had
  /// unheld credits) and where an ended grant was there to be skipped.
  uint64_t order_checks = 0;
  uint64_t ended_grant_checks = 0;

  void flag(const std::string& what) {
    if (violation.empty())
      violation = what;
  }

  /// Invariant 1 for one acknowledged receipt: it is the ledger row, it
  /// charges at most the hold, and every retry returns the same receipt.
  void on_receipt(const sim_world& w, sim_acks& acks, const receipt& x);

  /// Invariant 11 for one acknowledged resolution: succeeded is the ledger
  /// row and charges at most the hold; failed charged nothing.
  void on_resolution(const sim_world& w, sim_acks& acks, const resolution& x);

  /// Invariant 15 for one acknowledged start by `who`: no job is started
  /// by two workers (a job delivered twice runs once).
  void on_start(sim_acks& acks, reservation_id id, const std::string& who);

  /// Invariant 16 for one status answer: no job's hold is of a later
  /// window than the chat's, and `held` counts past windows' holds by their
  /// balance part only (held_by), so that the new window's daily pockets
  /// are whole while a job that straddles the refill is open.
  void on_status(const chat_status& x);

  /// Invariant 5 for one answer given while storage was unreachable.
  void on_outage_answer(const std::string& what, const caf::error& err);

  /// Invariants 1, 2, 3 and 7, 4 (the deadline), 6, 8, 9, 10, 11, 12, 13,
  /// 16 and 17 to 20, after every step.
  void audit(const sim_world& w, const sim_acks& acks, caf::timestamp now);

  /// Invariant 17, conservation per grant: each grant's credits = charged
  /// + expired + voided + left, none negative, each term what the ledger's
  /// rows gave it; a grant holds at least what open holds hold of it and,
  /// once expired or voided, nothing more (nothing returns to the balance
  /// from it); and each chat's balance is the sum of its grants' left.
  void grants_conserved(const sim_world& w);

  /// Invariants 18 and 19 for the holds made since the last call, by what
  /// their reserve saw. 18, nothing new held from an expired or voided
  /// grant: a hold's balance part is split over grants in full, each part
  /// from a grant neither expired nor voided nor past its expiry at
  /// reserve time, and at most what it had unheld. 19, the spending order:
  /// no credit of a grant is taken while a grant before it in the order
  /// (priority, then the soonest expiry, none last, then promo, admin,
  /// purchase, then creation) had any unheld credit left untaken.
  void splits_in_order(const sim_world& w);

  /// Invariant 20, each expiry and void once: a grant expires at most once
  /// and not before its expiry, is voided at most once, never both with
  /// credits; each credits_expired event goes with one expiry; and each
  /// hold's end lets a grant's credits go at most once, and only a grant
  /// that hold held.
  void ends_once(const sim_world& w);

  /// Invariant 20 at the end: every grant past its expiry (by more than
  /// the scan's interval) and not voided before it has expired: at least
  /// once, with the above exactly once.
  void audit_grants_drained(const sim_world& w, caf::timestamp now);

  /// Invariant 13 for the rows written since the last call.
  void ledger_chain(const sim_world& w);

  /// Invariant 16, paid by its window: a job's daily part is paid by the
  /// window its hold was taken in. Every receipt names the window its
  /// reservation was made in; a charge written after a later refill takes
  /// nothing from the daily pockets (the rows written since the last
  /// call); and no window's daily pockets pay more than they opened with,
  /// so a job that straddles a refill is never paid twice.
  void paid_by_window(const sim_world& w);

  /// Invariants 4 and 12 at the end: workers quiet, nothing is left, not
  /// even uncertain.
  void audit_drained(const sim_world& w);

  /// Invariant 14 at the end: each release, job of unknown outcome and
  /// cancel request wrote exactly one event, and each event has its
  /// change; and a gateway subscribed from the first event heard every
  /// event (`heard`), as the table has it, in id order (at least once; it
  /// answers at once, so it was never cut off).
  void audit_events(const sim_world& w, const std::vector<event_record>& heard,
                    const std::string& cut_off);
};

} // namespace chargeonce::test
