// SPDX-License-Identifier: Apache-2.0
#include "tools/chaos/audit.hpp"

#include "protocol/errors.hpp"
#include "protocol/pockets.hpp"
#include "tools/chaos/audit_grants.hpp"
#include "tools/common/pocket_model.hpp"

#include <algorithm>
#include <limits>
#include <set>
#include <unordered_map>

namespace chargeonce::chaos {

const char* const invariant_names[invariant_count] = {
  "1_charged_exactly_once",
  "2_conservation",
  "3_one_active_and_fencing",
  "4_no_lock_left",
  "5_outage_answers",
  "6_cancel_xor_start",
  "7_active_within_limit",
  "8_holds_within_pockets",
  "9_one_job_per_request_id",
  "10_cancelled_never_charged",
  "11_uncertain_charged_by_resolve",
  "12_nothing_left_uncertain",
  "13_ledger_chain",
  "14_event_with_each_change",
  "15_acknowledged_reservation_kept",
  "16_one_worker_per_job",
  "17_paid_by_its_window",
  "18_balance_is_its_grants",
  "19_sole_grant_alone",
  "20_grant_conserved",
  "21_nothing_held_expired",
  "22_spending_order",
  "23_expiry_and_void_once",
};

namespace {

constexpr size_t violations_kept_max = 2000;
constexpr int64_t forever = std::numeric_limits<int64_t>::max();

/// Every pocket listed, by name: {daily_images:1 balance:2}.
std::string text(const pockets& x) {
  std::string out;
  for (const auto& [name, amount] : x.items())
    out += (out.empty() ? "" : " ") + name + ":" + std::to_string(amount);
  return "{" + out + "}";
}

/// The answer leaves open whether it happened (and when).
bool unknown(const op_record& r) {
  return r.result == static_cast<uint8_t>(outcome::transport)
         || r.result == static_cast<uint8_t>(outcome::pending)
         || r.result == static_cast<uint8_t>(ec::storage_unavailable);
}

/// An acknowledged cancel that deleted a queued job (not one that only
/// marked a started job cancel_requested).
bool cancelled_while_queued(const op_record& r) {
  return r.what == op::cancel && r.ok() && !r.cancel_requested;
}

bool returns_reservation(op what) {
  return what == op::reserve || what == op::start || what == op::heartbeat
         || what == op::fail || what == op::cancel || what == op::uncertain;
}

/// A resolve that reports the provider did the work: it charges, as a
/// commit does.
bool resolves_succeeded(const op_record& r) {
  return r.what == op::resolve && r.resolution == "succeeded";
}

/// What we know of one reservation from the record.
struct known_reservation {
  chat_id chat = 0;
  bool held_known = false;
  pockets held;
  int32_t units = 1;  ///< what the hold pays for
  pockets held_units; ///< per pocket
  int32_t named = 0;  ///< the units its commits named (0: all held)
  bool named_by_resolve = false;
  int64_t created_us = 0;
  int64_t window = 0;             ///< the window its hold was taken in
  int64_t first_ack_us = forever; ///< an ok reserve answer returned it
  bool commit_requested = false;
  int64_t deleter_sent_us = forever; ///< earliest commit/fail that may apply
};

class auditor {
public:
  auditor(const recorder& rec, const std::map<chat_id, pockets>& initial,
          const persistence::audit_snapshot& snap, const audit_limits& lim)
      : rec_(rec), initial_(initial), snap_(snap), lim_(lim),
        seed_(std::to_string(lim.seed)) {
    for (size_t i = 0; i < invariant_count; ++i)
      out_.invariants.push_back({invariant_names[i], 0, 0});
    out_.lock_slack_ms = lim.slack_ms;
    index();
  }

  audit_result run() {
    charges();
    conservation();
    one_active();
    fencing();
    locks();
    outages();
    cancel_xor_start();
    within_limit();
    holds_within_pockets();
    one_job_per_request_id();
    cancelled_never_charged();
    uncertain_charged_by_resolve();
    nothing_left_uncertain();
    ledger_chain();
    events_with_changes();
    reservations_kept();
    one_worker_per_job();
    paid_by_its_window();
    balance_is_its_grants();
    sole_grant_alone();
    audit_sink sink{
      [this](int n) { check(n); },
      [this](int n, chat_id chat, reservation_id id, std::string what) {
        fail(n, chat, id, std::move(what));
      }};
    audit_grants(rec_, initial_, snap_, lim_, sink, out_.grants);
    for (const auto& l : snap_.ledger)
      ++out_.ledger_entries[l.entry];
    return std::move(out_);
  }

private:
  void check(int n) { ++out_.invariants[n - 1].checked; }

  void fail(int n, chat_id chat, reservation_id id, std::string what) {
    ++out_.invariants[n - 1].violations;
    ++out_.violations_total;
    if (out_.violations.size() < violations_kept_max)
      out_.violations.push_back(
        {invariant_names[n - 1], chat, id, std::move(what)});
  }

  void index() {
    for (const auto& r : rec_.ops) {
      if (r.id != 0
          && (r.ok() || r.what == op::commit || r.what == op::fail
              || r.what == op::uncertain || r.what == op::resolve)) {
        auto& k = res_[r.id];
        k.chat = r.chat;
        if (r.ok() && returns_reservation(r.what)) {
          k.held_known = true;
          k.held = r.amounts;
          k.units = std::max(r.units, 1);
          k.held_units = r.held_units;
          k.created_us = r.created_us;
          k.window = r.window;
          hold_windows_[r.id].insert(r.window);
        }
        if (r.what == op::reserve && r.ok() && !r.ended)
          k.first_ack_us = std::min(k.first_ack_us, r.acked_us);
        if (r.what == op::commit || resolves_succeeded(r)) {
          k.commit_requested = true;
          // Every commit of one job names the same units; of an uncertain
          // job, what resolve names counts (a stale commit charged nothing).
          if (resolves_succeeded(r) || !k.named_by_resolve)
            k.named = r.units;
          k.named_by_resolve = k.named_by_resolve || resolves_succeeded(r);
        }
        // A commit, fail or uncertain (which frees the slot) that
        // succeeded, or may have: R may be gone from the moment it was sent.
        if ((r.what == op::commit || r.what == op::fail
             || r.what == op::uncertain)
            && (r.ok() || unknown(r)))
          k.deleter_sent_us = std::min(k.deleter_sent_us, r.sent_us);
        if (r.what == op::uncertain && r.ok())
          uncertain_.insert(r.id);
        if (resolves_succeeded(r))
          resolve_succeeded_sent_.insert(r.id);
        if (r.ok() && (r.what == op::commit || resolves_succeeded(r)))
          paid_windows_[r.id].insert(r.window);
        if (r.what == op::resolve && r.ok() && r.resolution == "failed")
          resolved_failed_.insert(r.id);
      }
      if (cancelled_while_queued(r))
        cancelled_[r.id] = std::min(
          cancelled_.count(r.id) ? cancelled_[r.id] : forever, r.sent_us);
      else if (r.what == op::cancel && unknown(r))
        unknown_cancels_[r.chat].push_back(r.sent_us);
      if (r.what == op::top_up)
        payments_requested_.insert(r.key);
      if (r.what == op::commit && r.ok())
        commit_acked_[r.id] =
          std::min(commit_acked_.count(r.id) ? commit_acked_[r.id] : forever,
                   r.acked_us);
    }
    for (const auto& [id, k] : res_)
      if (k.first_ack_us != forever)
        acknowledged_[k.chat].emplace_back(k.created_us, id);
    for (auto& [chat, xs] : acknowledged_)
      std::sort(xs.begin(), xs.end());
    for (auto& [chat, xs] : unknown_cancels_)
      std::sort(xs.begin(), xs.end());
    for (const auto& r : rec_.ops)
      by_sent_.push_back(&r);
    std::sort(by_sent_.begin(), by_sent_.end(),
              [](auto* x, auto* y) { return x->sent_us < y->sent_us; });
    for (const auto& l : snap_.ledger)
      if (l.charge)
        ledger_[l.reservation] = &l;
    for (const auto& x : snap_.releases)
      released_[x.id] = &x;
    for (const auto& x : snap_.reservations)
      hold_windows_[x.id].insert(x.window);
    for (const auto& x : snap_.ended)
      hold_windows_[x.id].insert(x.window);
    for (const auto& x : snap_.uncertain)
      hold_windows_[x.id].insert(x.window);
  }

  // -- 1: every acknowledged commit has its one ledger row ------------------

  void charges() {
    for (const auto& r : rec_.ops) {
      if (r.what != op::commit || !r.ok())
        continue;
      check(1);
      auto i = ledger_.find(r.id);
      if (i == ledger_.end())
        fail(1, r.chat, r.id, "acknowledged commit has no ledger row");
      else if (i->second->chat != r.chat || i->second->charged != r.amounts)
        fail(1, r.chat, r.id,
             "receipt charged " + text(r.amounts) + ", ledger row says "
               + text(i->second->charged));
    }
    for (const auto& [id, row] : ledger_) {
      check(1);
      auto k = res_.find(id);
      if (k == res_.end() || !k->second.commit_requested) {
        fail(1, row->chat, id,
             "charged " + text(row->charged) + " without any commit request");
        continue;
      }
      // A commit of fewer units takes what they cost, daily pockets first;
      // a pocket that a refill lowered below the hold meanwhile pays what
      // it has and stops at zero (the clamp), and no other way is less.
      const auto& kr = k->second;
      if (!kr.held_known)
        continue;
      auto due = captured(kr.held, kr.held_units, kr.units, kr.named);
      if (!charged_as_due(*row, due))
        fail(1, row->chat, id,
             "charged " + text(row->charged) + " but the reservation held "
               + text(kr.held)
               + (kr.named > 0 && kr.named < kr.units
                    ? ", of which " + std::to_string(kr.named) + " of its "
                        + std::to_string(kr.units) + " units cost " + text(due)
                    : ""));
    }
  }

  /// Each pocket charged what `due` says of it, or less when the charge
  /// emptied it.
  static bool charged_as_due(const persistence::audit_ledger_row& row,
                             const pockets& due) {
    if (row.charged == due)
      return true;
    pockets names = due;
    names += row.charged;
    for (const auto& [name, ignored] : names.items()) {
      auto got = row.charged.get(name);
      auto owed = due.get(name);
      if (got != owed
          && !(got < owed && row.has_after && row.after.get(name) == 0))
        return false;
    }
    return true;
  }

  /// The admin row create-chat opened a chat's ledger with.
  static bool opening(const persistence::audit_ledger_row& l) {
    return l.entry == "admin" && l.detail == "create_chat";
  }

  // -- 2: final pockets = initial + every change the ledger has, never
  //       negative; the ledger opens with the initial pockets -------------

  void conservation() {
    std::map<chat_id, pockets> expected = initial_;
    std::map<std::string, const persistence::audit_ledger_row*> top_ups;
    for (const auto& l : snap_.ledger) {
      if (opening(l)) {
        check(2);
        auto i = initial_.find(l.chat);
        if (i == initial_.end() || !l.has_after || l.after != i->second)
          fail(2, l.chat, 0,
               "the ledger opens with " + text(l.after)
                 + ", create-chat was asked for "
                 + (i == initial_.end() ? "nothing" : text(i->second)));
        continue;
      }
      expected[l.chat] += l.change();
      if (l.entry == "top_up")
        top_ups[l.payment_id] = &l;
    }
    for (const auto& c : snap_.chats) {
      check(2);
      auto e = expected.find(c.chat);
      if (e == expected.end())
        continue;
      if (c.available != e->second)
        fail(2, c.chat, 0,
             "pockets are " + text(c.available)
               + ", initial + top-ups - charges + refills = "
               + text(e->second));
      if (c.available.any_negative())
        fail(2, c.chat, 0, "negative pocket " + text(c.available));
    }
    for (const auto& r : rec_.ops) {
      if (!r.ok())
        continue;
      if (r.what == op::status || r.what == op::touch) {
        check(2);
        if (r.amounts.any_negative())
          fail(2, r.chat, 0, "status showed a negative pocket");
      } else if (r.what == op::top_up) {
        check(2);
        auto i = top_ups.find(payment(r.key));
        if (i == top_ups.end() || i->second->credited != r.credits
            || i->second->chat != r.chat)
          fail(2, r.chat, 0,
               "acknowledged top-up " + payment(r.key)
                 + " has no matching ledger row");
      }
    }
    for (const auto& [pay, row] : top_ups)
      if (!requested_payment(pay))
        fail(2, row->chat, 0, "top-up " + pay + " that nobody requested");
  }

  std::string payment(uint64_t key) const {
    return "pay-" + seed_ + "-" + std::to_string(key);
  }

  bool requested_payment(const std::string& pay) const {
    auto prefix = "pay-" + seed_ + "-";
    if (pay.rfind(prefix, 0) != 0)
      return false;
    return payments_requested_.count(std::stoull(pay.substr(prefix.size())))
           > 0;
  }

  // -- 3: never two acknowledged reservations of a chat alive at once --------

  /// When R may have been gone at the earliest: its release, or the first
  /// commit, fail or cancel that succeeded or may have succeeded.
  int64_t gone_from(reservation_id id, const known_reservation& k) const {
    auto out = k.deleter_sent_us;
    if (auto i = released_.find(id); i != released_.end())
      out = std::min(out, i->second->released_us);
    if (auto i = cancelled_.find(id); i != cancelled_.end())
      out = std::min(out, i->second);
    // A cancel without an answer may take effect late, but not later than
    // the unknown-outcome horizon after it was sent.
    if (auto i = unknown_cancels_.find(k.chat); i != unknown_cancels_.end()) {
      auto from = k.created_us - unknown_horizon_us;
      auto j = std::lower_bound(i->second.begin(), i->second.end(), from);
      if (j != i->second.end())
        out = std::min(out, std::max(*j, k.created_us));
    }
    return out;
  }

  int32_t limit_of(chat_id chat) const {
    auto i = lim_.max_active_jobs.find(chat);
    return i == lim_.max_active_jobs.end() ? 1 : i->second;
  }

  /// The chat's other reservations that were surely active when `id` was
  /// inserted: acknowledged before, not yet possibly gone, and `id` was
  /// acknowledged before they could be gone too.
  std::vector<reservation_id> surely_active_beside(chat_id chat,
                                                   reservation_id id) const {
    std::vector<reservation_id> out;
    const auto& j = res_.at(id);
    const auto& xs = acknowledged_.at(chat);
    // An earlier one was created before its acknowledgement, which came
    // before `id` was inserted: only the prefix up to `id` can qualify.
    for (auto x = xs.begin(); x != xs.end() && x->first <= j.created_us; ++x) {
      if (x->second == id)
        continue;
      const auto& a = res_.at(x->second);
      auto alive_from = a.first_ack_us;
      auto alive_to = gone_from(x->second, a);
      if (alive_from < alive_to && alive_from <= j.created_us
          && j.created_us <= alive_to && j.first_ack_us <= alive_to)
        out.push_back(x->second);
    }
    return out;
  }

  void one_active() {
    for (const auto& [chat, xs] : acknowledged_) {
      if (limit_of(chat) != 1)
        continue; // invariant 7 judges chats that allow several jobs
      for (const auto& x : xs) {
        check(3);
        auto beside = surely_active_beside(chat, x.second);
        if (!beside.empty())
          fail(3, chat, x.second,
               "reservation " + std::to_string(x.second)
                 + " was acknowledged while reservation "
                 + std::to_string(beside.front())
                 + " of the same chat was surely still active");
      }
    }
  }

  void fencing() {
    std::set<reservation_id> failed;
    for (const auto& r : rec_.ops)
      if (r.ok() && r.what == op::fail)
        failed.insert(r.id);
    for (const auto& [id, row] : ledger_) {
      check(3);
      if (released_.count(id) > 0)
        fail(3, row->chat, id, "charged after the sweeper released it");
      if (failed.count(id) > 0)
        fail(3, row->chat, id, "charged after an acknowledged fail");
    }
  }

  // -- 4: nobody stays locked out -------------------------------------------

  /// How long faults that stop sweeping overlapped [from, to].
  int64_t disturbed_ms(int64_t from, int64_t to) const {
    int64_t out = 0;
    for (const auto& f : rec_.faults)
      if (f.what == fault::kill_server || f.what == fault::restart_postgres
          || f.what == fault::pause_postgres || f.what == fault::failover
          || f.what == fault::failover_node)
        out += std::max<int64_t>(0, std::min(to, f.end_us)
                                      - std::max(from, f.begin_us));
    return out / 1000;
  }

  /// The longest a reservation may live: the hard deadline, one sweep,
  /// slack, and whatever outage overlapped its life.
  int64_t allowed_lock_ms(int64_t created_us, int64_t until_us) const {
    return lim_.sweep_timeout_ms + lim_.sweep_interval_ms + lim_.slack_ms
           + disturbed_ms(created_us, until_us);
  }

  /// Notes how much of the slack a lock of `held_ms` used.
  void note_slack_used(int64_t held_ms, int64_t allowed_ms) {
    auto used = held_ms - (allowed_ms - lim_.slack_ms);
    out_.lock_slack_used_ms =
      slack_noted_ ? std::max(out_.lock_slack_used_ms, used) : used;
    slack_noted_ = true;
  }

  void locks() {
    for (const auto& x : snap_.reservations) {
      check(4);
      fail(4, x.chat, x.id,
           "still held after the run (workers quiet, "
           "sweeps waited for)");
    }
    for (const auto& x : snap_.releases) {
      auto k = res_.find(x.id);
      if (k == res_.end() || k->second.created_us == 0)
        continue;
      check(4);
      auto locked_ms = (x.released_us - k->second.created_us) / 1000;
      auto allowed_ms = allowed_lock_ms(k->second.created_us, x.released_us);
      note_slack_used(locked_ms, allowed_ms);
      if (locked_ms > allowed_ms)
        fail(4, x.chat, x.id,
             "released " + std::to_string(locked_ms) + " ms after reserve, "
               + "allowed " + std::to_string(allowed_ms) + " ms");
    }
    // An answer proves the reservation still existed when it was sent: a
    // late worker must find it released, not commit it.
    for (const auto& r : rec_.ops) {
      // A resolve comes up to reconcile-timeout after the job went
      // uncertain, when no lease or sweep deadline applies any more.
      if (!r.ok() || r.what == op::reserve || r.what == op::resolve
          || r.id == 0)
        continue;
      auto k = res_.find(r.id);
      if (k == res_.end() || k->second.created_us == 0)
        continue;
      check(4);
      auto held_ms = (r.sent_us - k->second.created_us) / 1000;
      auto allowed_ms = allowed_lock_ms(k->second.created_us, r.sent_us);
      note_slack_used(held_ms, allowed_ms);
      if (held_ms > allowed_ms)
        fail(4, r.chat, r.id,
             std::string{to_string(r.what)} + " succeeded "
               + std::to_string(held_ms) + " ms after reserve, allowed "
               + std::to_string(allowed_ms) + " ms: not swept in time");
    }
    for (auto id : rec_.killed_jobs) {
      check(4);
      if (released_.count(id) == 0) {
        auto k = res_.find(id);
        fail(4, k == res_.end() ? 0 : k->second.chat, id,
             "a killed worker's reservation was not released by the sweeper");
      }
    }
  }

  // -- 5: while Postgres is down, only storage_unavailable -------------------

  void outages() {
    for (const auto& o : rec_.outages) {
      auto j = std::lower_bound(
        by_sent_.begin(), by_sent_.end(), o.from_us,
        [](const op_record* r, int64_t t) { return r->sent_us < t; });
      for (; j != by_sent_.end() && (*j)->sent_us <= o.to_us; ++j) {
        const auto& r = **j;
        if (r.acked_us == 0 || r.acked_us > o.to_us)
          continue;
        check(5);
        if (!unknown(r))
          fail(5, r.chat, r.id,
               std::string{to_string(r.what)} + " answered "
                 + outcome_name(r.result) + " while Postgres was down");
      }
    }
  }

  // -- 6: cancel and start of one reservation never both succeed -------------

  // Under the `request` policy a cancel of a started job is acknowledged
  // too, as cancel_requested: the other of the two outcomes, not a cancel.
  void cancel_xor_start() {
    std::set<reservation_id> cancelled, started;
    for (const auto& r : rec_.ops)
      if (cancelled_while_queued(r))
        cancelled.insert(r.id);
      else if (r.ok() && r.what == op::start)
        started.insert(r.id);
    for (auto id : cancelled) {
      check(6);
      if (started.count(id) > 0)
        fail(6, res_.count(id) ? res_.at(id).chat : 0, id,
             "both cancel and start were acknowledged");
    }
  }

  // -- 7: never more active jobs than the chat's limit ---------------------

  void within_limit() {
    for (const auto& [chat, xs] : acknowledged_) {
      auto limit = limit_of(chat);
      for (const auto& x : xs) {
        check(7);
        auto beside = surely_active_beside(chat, x.second);
        if (static_cast<int64_t>(beside.size()) + 1 > limit)
          fail(7, chat, x.second,
               "reservation " + std::to_string(x.second) + " made "
                 + std::to_string(beside.size() + 1)
                 + " surely active jobs in a chat whose limit is "
                 + std::to_string(limit));
      }
    }
  }

  // -- 8: the holds of active jobs fit in the pockets they were made from ---

  /// The most a chat's pockets can have held when `id` was inserted:
  /// initial + every top-up and every refill's increase that may have
  /// committed before `id`'s answer - what every charge surely committed
  /// before it began took (of a past window's hold: its balance part).
  pockets pockets_at_most(chat_id chat, const known_reservation& j) const {
    pockets out;
    if (auto i = initial_.find(chat); i != initial_.end())
      out = i->second;
    for (const auto& l : snap_.ledger) {
      if (l.chat != chat || opening(l))
        continue;
      if (!l.charge && l.at_us <= j.first_ack_us) {
        auto change = l.change();
        for (const auto& [name, amount] : change.items())
          out.add(name, std::max(amount, 0));
      } else if (l.charge) {
        auto c = commit_acked_.find(l.reservation);
        if (c != commit_acked_.end() && c->second < j.created_us) {
          auto change = l.change();
          for (const auto& [name, amount] : change.items())
            out.add(name, std::min(amount, 0));
        }
      }
    }
    return out;
  }

  void holds_within_pockets() {
    for (const auto& [chat, xs] : acknowledged_)
      for (const auto& x : xs) {
        const auto& j = res_.at(x.second);
        if (!j.held_known)
          continue;
        check(8);
        auto held = j.held;
        // A hold of a past window counts only for its balance part: its
        // own window's daily pockets paid the rest, the new ones opened
        // without it.
        for (auto other : surely_active_beside(chat, x.second)) {
          const auto& a = res_.at(other);
          held += in_window(a.held, a.window, j.window);
        }
        auto most = pockets_at_most(chat, j);
        if (!held.within(most))
          fail(8, chat, x.second,
               "with reservation " + std::to_string(x.second)
                 + " the surely active jobs hold " + text(held)
                 + ", the pockets had at most " + text(most));
      }
  }

  // -- 9: a request id names one job, active or ended ------------------------

  void one_job_per_request_id() {
    std::map<std::pair<chat_id, uint64_t>, std::set<reservation_id>> named;
    for (const auto& r : rec_.ops)
      if (r.ok() && r.key != 0 && r.id != 0
          && (r.what == op::reserve || r.what == op::cancel))
        named[{r.chat, r.key}].insert(r.id);
    for (const auto& [key, ids] : named) {
      check(9);
      if (ids.size() > 1)
        fail(9, key.first, *ids.rbegin(),
             "request_id " + request_id(key.second) + " named "
               + std::to_string(ids.size())
               + " reservations: " + std::to_string(*ids.begin()) + " and "
               + std::to_string(*ids.rbegin()));
    }
  }

  // -- 10: a job acknowledged as cancelled while queued is never charged ---

  void cancelled_never_charged() {
    for (const auto& r : rec_.ops) {
      if (!cancelled_while_queued(r) || r.id == 0)
        continue;
      check(10);
      if (auto i = ledger_.find(r.id); i != ledger_.end())
        fail(10, r.chat, r.id,
             "acknowledged as cancelled while queued, then charged "
               + text(i->second->charged));
    }
  }

  // -- 11: an uncertain job is charged only by resolve succeeded, once ------

  void uncertain_charged_by_resolve() {
    for (auto id : uncertain_) {
      check(11);
      auto row = ledger_.find(id);
      if (row == ledger_.end())
        continue;
      if (resolve_succeeded_sent_.count(id) == 0)
        fail(11, row->second->chat, id,
             "went uncertain and was charged " + text(row->second->charged)
               + " without any resolve succeeded");
      if (resolved_failed_.count(id) != 0)
        fail(11, row->second->chat, id,
             "was resolved failed and charged " + text(row->second->charged));
    }
    // Each acknowledged resolution is what Postgres holds.
    for (const auto& r : rec_.ops) {
      if (r.what != op::resolve || !r.ok())
        continue;
      check(11);
      auto row = ledger_.find(r.id);
      if (r.resolution == "succeeded"
          && (row == ledger_.end() || row->second->charged != r.amounts))
        fail(11, r.chat, r.id,
             "resolve succeeded answered " + text(r.amounts)
               + ", the ledger has "
               + (row == ledger_.end() ? std::string{"no row"}
                                       : text(row->second->charged)));
      if (r.resolution == "failed" && row != ledger_.end())
        fail(11, r.chat, r.id, "resolve failed answered, yet charged");
    }
  }

  // -- 12: nothing is left uncertain after the run (past its timeout) -------

  void nothing_left_uncertain() {
    for (const auto& x : snap_.uncertain) {
      check(12);
      if (x.outcome.empty())
        fail(12, x.chat, x.id,
             "still uncertain after the run (reconcile-timeout and the "
             "sweeps waited for)");
    }
  }

  // -- 13: each ledger row starts where the chat's row before it ended, and
  //        the last ends at the chat's pockets ------------------------------

  // -- 18: the balance pocket is what the chat's grants have left ---------

  void balance_is_its_grants() {
    for (const auto& c : snap_.chats) {
      check(18);
      auto balance = c.available.get(pocket::balance);
      if (balance != c.grants_left)
        fail(18, c.chat, 0,
             "balance is " + std::to_string(balance) + ", its grants have "
               + std::to_string(c.grants_left) + " left");
    }
  }

  // -- 19: a chat's sole grant is its one live grant with credits nobody
  //        holds (a hold on balance takes it without looking at the others)

  void sole_grant_alone() {
    for (const auto& c : snap_.chats) {
      check(19);
      if (c.sole_grant_rivals > 0)
        fail(19, c.chat, 0,
             std::to_string(c.sole_grant_rivals)
               + " grant(s) contradict its sole grant: another live grant "
                 "with credits nobody holds, or a grant not its own");
    }
  }

  void ledger_chain() {
    std::map<chat_id, const persistence::audit_ledger_row*> last;
    for (const auto& l : snap_.ledger) {
      check(13);
      if (!l.has_after) {
        fail(13, l.chat, l.reservation,
             "ledger row " + std::to_string(l.id) + " (" + l.entry
               + ") records no pockets after it");
        continue;
      }
      auto before = l.after;
      before -= l.change();
      auto prev = last.find(l.chat);
      pockets ended = prev == last.end() ? pockets{} : prev->second->after;
      if (before != ended)
        fail(13, l.chat, l.reservation,
             "ledger row " + std::to_string(l.id) + " (" + l.entry + ") "
               + "starts at " + text(before) + ", the row before it ended at "
               + text(ended));
      last[l.chat] = &l;
    }
    for (const auto& c : snap_.chats) {
      check(13);
      auto l = last.find(c.chat);
      if (l == last.end())
        fail(13, c.chat, 0, "the chat has no ledger row");
      else if (l->second->after != c.available)
        fail(13, c.chat, 0,
             "pockets are " + text(c.available) + ", the last ledger row ("
               + std::to_string(l->second->id) + ") says "
               + text(l->second->after));
    }
  }

  // -- 14: each release, job of unknown outcome, unresolved release and
  //        acknowledged cancel request has exactly one event, and each
  //        event the change it announces (written in one transaction) ----

  /// "reservation_released 13 lease_expired": what an event says.
  static std::string event_key(const std::string& event, reservation_id id,
                               const std::string& detail) {
    return event + " " + std::to_string(id) + " " + detail;
  }

  void events_with_changes() {
    std::map<std::string, int> written; // event_key -> events in Postgres
    std::map<std::string, chat_id> chat_of;
    for (const auto& e : snap_.events) {
      if (e.event == "limits_refilled")
        continue; // a refill's own ledger row is checked by 2 and 13
      if (e.event == "credits_expired" || e.event == "credits_expiring")
        continue; // a grant's: invariant 23 counts them per grant
      auto detail = e.event == "reconcile_needed" ? "" : e.detail;
      auto key = event_key(e.event, e.reservation, detail);
      ++written[key];
      chat_of[key] = e.chat;
    }
    std::map<std::string, chat_id> due; // event_key -> chat, one event each
    for (const auto& x : snap_.releases)
      due[event_key("reservation_released", x.id, x.reason)] = x.chat;
    for (const auto& x : snap_.uncertain) {
      due[event_key("reconcile_needed", x.id, "")] = x.chat;
      if (x.outcome == "released")
        due[event_key("reservation_released", x.id, "unresolved")] = x.chat;
    }
    std::set<chat_id> cancels_sent;
    for (const auto& r : rec_.ops)
      if (r.what == op::cancel) {
        cancels_sent.insert(r.chat);
        if (r.ok() && r.cancel_requested)
          due[event_key("cancel_requested", r.id, "")] = r.chat;
      }
    for (const auto& [key, chat] : due) {
      check(14);
      auto n = written.count(key) != 0 ? written[key] : 0;
      if (n != 1)
        fail(14, chat, 0,
             std::to_string(n) + " events '" + key
               + "' where the change was written once");
    }
    for (const auto& [key, n] : written) {
      check(14);
      if (due.count(key) != 0)
        continue;
      auto chat = chat_of[key];
      // A cancel whose answer was lost may have marked the job.
      if (key.rfind("cancel_requested ", 0) == 0 && cancels_sent.count(chat))
        continue;
      fail(14, chat, 0,
           "event '" + key + "' (" + std::to_string(n)
             + "x) announces a change Postgres does not have");
    }
  }

  // -- 15: a reservation acknowledged with a request id is in Postgres
  //        after the run: active, ended, released, uncertain or charged
  //        (one a failover lost is in none) ----------------------------------

  void reservations_kept() {
    std::set<reservation_id> kept;
    for (const auto& x : snap_.ended)
      kept.insert(x.id);
    for (const auto& x : snap_.reservations)
      kept.insert(x.id);
    for (const auto& x : snap_.releases)
      kept.insert(x.id);
    for (const auto& x : snap_.uncertain)
      kept.insert(x.id);
    for (const auto& l : snap_.ledger)
      if (l.charge)
        kept.insert(l.reservation);
    std::set<reservation_id> seen;
    for (const auto& r : rec_.ops) {
      if (r.what != op::reserve || !r.ok() || r.key == 0 || r.id == 0
          || !seen.insert(r.id).second)
        continue;
      check(15);
      if (kept.count(r.id) == 0)
        fail(15, r.chat, r.id,
             "reserve acknowledged it (request id " + request_id(r.key)
               + "), yet Postgres has no trace of it: not active, ended, "
                 "released, uncertain or charged");
    }
  }

  // -- 16: a job delivered twice runs once: no job's start acknowledged to
  //        two workers -----------------------------------------------------

  void one_worker_per_job() {
    std::map<reservation_id, std::set<std::string>> workers;
    for (const auto& r : rec_.ops) {
      if (r.what != op::start || !r.ok() || r.worker.empty())
        continue;
      check(16);
      auto& named = workers[r.id];
      named.insert(r.worker);
      if (named.size() == 2)
        fail(16, r.chat, r.id,
             "its start was acknowledged to two workers (" + *named.begin()
               + ", " + *named.rbegin() + "): a job delivered twice ran twice");
    }
  }

  // -- 17: a job's daily part is paid by the window its hold was taken in:
  //        (a) each charge names its hold's window; (b) it took from the
  //        pockets what that says: all it charged in its own window, only
  //        its balance part once a later window opened; (c) no window paid
  //        more daily units than it opened with and admin rows added; (d)
  //        windows only move forward ------------------------------------------

  /// Every pocket but balance: the ones a window refills.
  static pockets daily_part(const pockets& x) {
    pockets out;
    for (const auto& [name, amount] : x.items())
      if (name != pocket::balance)
        out.set(name, amount);
    return out;
  }

  /// A charge row took from the pockets what its window says: all it
  /// charged (`past` false) or, for a past window's hold, only its balance
  /// part. A pocket may give less only where the charge emptied it (the
  /// clamp).
  static bool took_as_its_window_says(const persistence::audit_ledger_row& l,
                                      bool past) {
    std::set<std::string> names;
    for (const auto& item : l.charged.items())
      names.insert(item.first);
    for (const auto& item : l.changed.items())
      names.insert(item.first);
    for (const auto& name : names) {
      auto taken = -l.changed.get(name);
      auto due = past && name != pocket::balance ? 0 : l.charged.get(name);
      if (taken != due
          && !(0 <= taken && taken < due && l.has_after
               && l.after.get(name) == 0))
        return false;
    }
    return true;
  }

  /// What a chat's ledger says of one of its windows.
  struct window_account {
    bool opened_by_row = false; ///< a row opened it: `opened` is known
    pockets opened;             ///< its daily pockets when it opened
    pockets added;   ///< what admin rows added to them while it was the latest
    pockets charged; ///< the daily units of the charges it paid
  };

  void paid_by_its_window() {
    std::map<chat_id, int64_t> now; // each chat's window after the run
    for (const auto& c : snap_.chats)
      now[c.chat] = c.window;
    std::map<chat_id, std::vector<const persistence::audit_ledger_row*>> rows;
    for (const auto& l : snap_.ledger)
      rows[l.chat].push_back(&l);
    for (const auto& [chat, xs] : rows) {
      auto i = now.find(chat);
      windows_of(chat, xs, i == now.end() ? forever : i->second);
    }
  }

  /// Walks one chat's rows in ledger order. A refill that changes no pocket
  /// writes no row, yet its window turns: between two refill rows the chat
  /// may have been in any window from the first one's up to the one before
  /// the second's (up to `now` after the last), and a charge there counts
  /// as written in its own window or a later one, whichever it took as.
  void windows_of(chat_id chat,
                  const std::vector<const persistence::audit_ledger_row*>& xs,
                  int64_t now) {
    // Per row, the window the next refill row opened (or one past `now`).
    std::vector<int64_t> next_opened(xs.size());
    auto next = now == forever ? forever : now + 1;
    for (size_t i = xs.size(); i-- > 0;) {
      next_opened[i] = next;
      if (xs[i]->entry == "refill" && xs[i]->has_window)
        next = xs[i]->window;
    }
    std::map<int64_t, window_account> accounts;
    int64_t latest = 0; // the window the latest refill row opened
    for (size_t i = 0; i < xs.size(); ++i) {
      const auto& l = *xs[i];
      if (i == 0) {
        // The chat's first row opens its first window: create-chat's row,
        // or the refill of a chat a touch created.
        if (l.entry == "refill" && l.has_window)
          latest = l.window;
        auto opened = l.after;
        if (l.charge)
          opened -= l.change();
        accounts[latest] = {true, daily_part(opened), {}, {}};
        if (!l.charge)
          continue;
      } else if (l.entry == "refill") {
        if (!l.has_window)
          fail(17, chat, 0,
               "refill row " + std::to_string(l.id)
                 + " names no window it opened");
        else if (l.window <= latest)
          fail(17, chat, 0,
               "refill row " + std::to_string(l.id) + " opened window "
                 + std::to_string(l.window) + ", not later than window "
                 + std::to_string(latest) + " a row before it opened");
        else {
          latest = l.window;
          accounts[latest] = {true, daily_part(l.after), {}, {}};
        }
        continue;
      } else if (l.entry == "admin") {
        auto change = daily_part(l.change());
        for (const auto& [name, amount] : change.items())
          if (amount > 0)
            accounts[latest].added.add(name, amount);
        continue;
      }
      if (!l.charge)
        continue;
      check(17);
      charged_by_its_window(chat, l, latest,
                            std::max(latest, next_opened[i] - 1));
      if (l.has_window)
        accounts[l.window].charged += daily_part(l.charged);
    }
    for (const auto& [window, a] : accounts) {
      if (!a.opened_by_row)
        continue; // no row says what it opened with
      for (const auto& [name, units] : a.charged.items()) {
        auto most = a.opened.get(name) + a.added.get(name);
        if (units > most)
          fail(17, chat, 0,
               "window " + std::to_string(window) + " paid "
                 + std::to_string(units) + " " + name + ", it opened with "
                 + std::to_string(a.opened.get(name))
                 + (a.added.get(name) > 0
                      ? " and admin changes added "
                          + std::to_string(a.added.get(name))
                      : std::string{}));
      }
    }
    if (now != forever && now < latest)
      fail(17, chat, 0,
           "the chat is in window " + std::to_string(now)
             + ", its ledger had opened window " + std::to_string(latest));
  }

  /// (a) and (b) for one charge row, written while the chat was in a window
  /// from `lo` to `hi`.
  void charged_by_its_window(chat_id chat,
                             const persistence::audit_ledger_row& l, int64_t lo,
                             int64_t hi) {
    auto id = l.reservation;
    auto row = "ledger row " + std::to_string(l.id);
    if (!l.has_window) {
      fail(17, chat, id,
           row + " charged " + text(l.charged) + " naming no window that paid");
      return;
    }
    auto w = std::to_string(l.window);
    if (auto h = hold_windows_.find(id); h != hold_windows_.end()) {
      if (h->second.size() > 1)
        fail(17, chat, id,
             "its hold is said to be of window "
               + std::to_string(*h->second.begin()) + " and of window "
               + std::to_string(*h->second.rbegin()));
      else if (*h->second.begin() != l.window)
        fail(17, chat, id,
             row + " says window " + w + " paid, its hold was taken in window "
               + std::to_string(*h->second.begin()));
    }
    if (auto p = paid_windows_.find(id); p != paid_windows_.end())
      for (auto said : p->second)
        if (said != l.window) {
          std::string what = "an acknowledged answer said window ";
          what.append(std::to_string(said)).append(" paid, ").append(row);
          fail(17, chat, id, what.append(" says window ").append(w));
        }
    pockets taken;
    taken -= l.changed;
    if (l.window > hi) {
      fail(17, chat, id,
           row + " says window " + w + " paid, a window the chat had not "
             + "reached (at most " + std::to_string(hi) + ")");
    } else if (l.window < lo) {
      if (!took_as_its_window_says(l, true))
        fail(17, chat, id,
             row + " charged " + text(l.charged) + " for a hold of window " + w
               + " after window " + std::to_string(lo) + " opened, and took "
               + text(taken) + ": two windows paid for its daily part");
    } else if (l.window == hi) {
      if (!took_as_its_window_says(l, false))
        fail(17, chat, id,
             row + " charged " + text(l.charged) + " in its own window " + w
               + " but took " + text(taken));
    } else if (!took_as_its_window_says(l, false)
               && !took_as_its_window_says(l, true)) {
      fail(17, chat, id,
           row + " charged " + text(l.charged) + " for a hold of window " + w
             + " and took " + text(taken)
             + ": neither all of it (its own window) nor only its balance "
               "part (a later one)");
    }
  }

  std::string request_id(uint64_t key) const {
    return "chaos-" + seed_ + "-" + std::to_string(key);
  }

  const recorder& rec_;
  const std::map<chat_id, pockets>& initial_;
  const persistence::audit_snapshot& snap_;
  audit_limits lim_;
  audit_result out_;
  bool slack_noted_ = false;
  std::string seed_;
  std::unordered_map<reservation_id, known_reservation> res_;
  std::map<reservation_id, int64_t> cancelled_;     ///< ok cancel: first sent
  std::set<reservation_id> uncertain_;              ///< ok uncertain answers
  std::set<reservation_id> resolve_succeeded_sent_; ///< answered or not
  std::set<reservation_id> resolved_failed_;        ///< ok resolve failed
  std::map<chat_id, std::vector<int64_t>> unknown_cancels_; ///< sent, sorted
  std::vector<const op_record*> by_sent_;
  std::set<uint64_t> payments_requested_;
  std::map<reservation_id, const persistence::audit_ledger_row*> ledger_;
  std::map<reservation_id, const persistence::audit_release*> released_;
  std::map<reservation_id, int64_t> commit_acked_; ///< first ok commit answer
  /// Per reservation, every window its hold was said to be taken in: by the
  /// answers that returned it and by the rows Postgres keeps of it.
  std::unordered_map<reservation_id, std::set<int64_t>> hold_windows_;
  /// Per reservation, the windows its acknowledged commits and resolves
  /// (succeeded) said paid.
  std::unordered_map<reservation_id, std::set<int64_t>> paid_windows_;
  /// Per chat, the reservations an ok reserve answer returned while they
  /// were active, as (created_at, id), oldest first.
  std::map<chat_id, std::vector<std::pair<int64_t, reservation_id>>>
    acknowledged_;
};

} // namespace

audit_result audit(const recorder& rec,
                   const std::map<chat_id, pockets>& initial,
                   const persistence::audit_snapshot& snapshot,
                   const audit_limits& limits) {
  return auditor{rec, initial, snapshot, limits}.run();
}

} // namespace chargeonce::chaos
