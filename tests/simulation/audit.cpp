// SPDX-License-Identifier: Apache-2.0
#include "tests/simulation/audit.hpp"

#include "protocol/errors.hpp"
#include "protocol/pockets.hpp"
#include "tools/common/pocket_model.hpp"

#include <algorithm>

namespace chargeonce::test {

namespace {

std::string str(int64_t x) {
  return std::to_string(x);
}

/// "name=amount ..." of the pockets that hold something.
std::string str(const pockets& x) {
  std::string out;
  for (const auto& [name, amount] : x.items())
    if (amount != 0)
      out += (out.empty() ? "" : " ") + name + "=" + std::to_string(amount);
  return "{" + out + "}";
}

/// Every pocket of `x` between 0 and what `bound` has of it.
bool at_most(const pockets& x, const pockets& bound) {
  return !x.any_negative() && x.within(bound);
}

/// Invariant 16 (a) for what a caller was told: the window `told` names is
/// the one job `id`'s reservation was made in.
std::string wrong_window(const sim_world& w, reservation_id id, int64_t told) {
  auto made = w.made_with.find(id);
  if (made == w.made_with.end() || made->second.window == told)
    return {};
  return "says window " + str(told) + " paid for " + str(id)
         + ", whose hold was taken in window " + str(made->second.window);
}

} // namespace

void sim_auditor::on_receipt(const sim_world& w, sim_acks& acks,
                             const receipt& x) {
  auto id = x.reservation;
  auto l = w.ledger.find(id);
  if (l == w.ledger.end())
    flag("acknowledged commit " + str(id) + " has no ledger row");
  else if (l->second.charged != x.charged)
    flag("receipt differs from the ledger for " + str(id));
  auto held = w.held_of.find(id);
  if (held == w.held_of.end() || !at_most(x.charged, held->second))
    flag("commit " + str(id) + " charged more than its hold");
  // A commit of fewer units charges at most what those units of the hold
  // cost, pocket by pocket, the pockets that expire first first.
  auto units = w.units_of.find(id);
  auto named = acks.commit_units.find(id);
  if (held != w.held_of.end() && units != w.units_of.end()
      && named != acks.commit_units.end()) {
    auto bound = captured(held->second, units->second.second,
                          units->second.first, named->second);
    if (!at_most(x.charged, bound))
      flag("commit " + str(id) + " of " + str(named->second)
           + " units charged more than those units of its hold");
  }
  if (auto wrong = wrong_window(w, id, x.window); !wrong.empty())
    flag("the receipt of commit " + str(id) + " " + wrong);
  auto first = acks.receipts.emplace(id, x).first;
  if (first->second.charged != x.charged
      || first->second.committed_at != x.committed_at)
    flag("a retried commit of " + str(id) + " returned another receipt");
}

void sim_auditor::on_resolution(const sim_world& w, sim_acks& acks,
                                const resolution& x) {
  auto id = x.reservation;
  auto l = w.ledger.find(id);
  if (x.outcome == "failed") {
    acks.resolved_failed_ok.insert(id);
    if (l != w.ledger.end())
      flag("uncertain job " + str(id) + " resolved failed was charged");
    return;
  }
  if (l == w.ledger.end())
    flag("resolve succeeded of " + str(id) + " has no ledger row");
  else if (l->second.charged != x.charged)
    flag("resolution differs from the ledger for " + str(id));
  auto held = w.held_of.find(id);
  if (held == w.held_of.end() || !at_most(x.charged, held->second))
    flag("resolve of " + str(id) + " charged more than its hold");
  if (auto wrong = wrong_window(w, id, x.window); !wrong.empty())
    flag("resolve succeeded of " + str(id) + " " + wrong);
}

void sim_auditor::on_start(sim_acks& acks, reservation_id id,
                           const std::string& who) {
  if (who.empty())
    return;
  auto& workers = acks.started_by[id];
  workers.insert(who);
  if (workers.size() > 1)
    flag("reservation " + std::to_string(id) + " was started by "
         + std::to_string(workers.size())
         + " workers: a job delivered twice ran twice");
}

void sim_auditor::on_status(const chat_status& x) {
  for (const auto& r : x.reservations)
    if (r.window > x.window)
      flag("status of chat " + str(x.chat) + " lists " + str(r.id)
           + " as held in window " + str(r.window) + ", after the chat's "
           + str(x.window));
  auto expected = held_by(x.reservations, x.window);
  if (x.held != expected)
    flag("status of chat " + str(x.chat) + " in window " + str(x.window)
         + " says " + str(x.held) + " held where its jobs hold " + str(expected)
         + " on this window's pockets: past windows' daily holds count "
           "against the new window");
}

void sim_auditor::on_outage_answer(const std::string& what,
                                   const caf::error& err) {
  // Our codes other than storage_unavailable (busy, insufficient_*, ...) or
  // a success would mean someone decided without Postgres. CAF's own errors
  // (request_receiver_down of a killed chat actor) are connection errors.
  if (!err)
    flag("during an outage, " + what + " succeeded");
  else if (err.category() == caf::atom(error_category_name)
           && err != ec::storage_unavailable)
    flag("during an outage, " + what + " answered " + error_name(err));
}

/// Invariant 13: each ledger row starts (its pockets after, less its
/// change) where the chat's row before it ended, and each chat's pockets
/// are where its last row ended.
void sim_auditor::ledger_chain(const sim_world& w) {
  for (; ledger_rows_checked < w.history.size(); ++ledger_rows_checked) {
    const auto& l = w.history[ledger_rows_checked];
    auto before = l.after;
    before -= l.change;
    auto& ended = ledger_ended[l.chat];
    if (before != ended)
      flag("ledger row " + str(static_cast<int64_t>(ledger_rows_checked)) + " ("
           + l.entry + ") of chat " + str(l.chat)
           + " does not start where the row before it ended");
    ended = l.after;
  }
  for (const auto& [c, chat] : w.chats)
    if (chat.available != ledger_ended[c])
      flag("the pockets of chat " + str(c)
           + " are not where its last ledger row ended");
}

void sim_auditor::paid_by_window(const sim_world& w) {
  // (b): a charge row written in a later window than its hold's changes no
  // daily pocket.
  for (; window_rows_checked < w.history.size(); ++window_rows_checked) {
    const auto& l = w.history[window_rows_checked];
    if (l.entry != "charge")
      continue;
    charged_in_window[l.reservation] = l.window;
    auto made = w.made_with.find(l.reservation);
    if (made == w.made_with.end() || l.window <= made->second.window)
      continue;
    auto held = w.held_of.find(l.reservation);
    if (held != w.held_of.end() && daily_part(held->second) != pockets{})
      ++straddling_checks;
    if (auto daily = daily_part(l.change); daily != pockets{})
      flag("the charge of " + str(l.reservation) + " of chat " + str(l.chat)
           + ", whose hold was taken in window " + str(made->second.window)
           + ", changed " + str(daily) + " in window " + str(l.window)
           + ": a job that straddled a refill was paid by both windows");
  }
  // (a) and (c): each receipt names its hold's window, and the daily units
  // charged to a window fit in what its pockets opened with.
  std::map<std::pair<chat_id, int64_t>, pockets> paid;
  for (const auto& [id, x] : w.ledger) {
    if (auto wrong = wrong_window(w, id, x.window); !wrong.empty())
      flag("the ledger " + wrong);
    paid[{x.chat, x.window}] += daily_part(x.charged);
  }
  for (const auto& [key, sum] : paid) {
    auto opened = w.opened_with.find(key);
    auto most = opened == w.opened_with.end() ? pockets{} : opened->second;
    if (!sum.within(most))
      flag("window " + str(key.second) + " of chat " + str(key.first) + " paid "
           + str(sum) + " from daily pockets that opened with " + str(most));
  }
}

void sim_auditor::audit(const sim_world& w, const sim_acks& acks,
                        caf::timestamp now) {
  // Invariant 16 first: a job paid by two windows also breaks
  // conservation, which would name the pocket and not the cause.
  paid_by_window(w);
  // Invariant 2: conservation per chat and per pocket of the catalog, no
  // negative pocket.
  std::map<chat_id, pockets> expected = acks.initial;
  for (const auto& [chat, d] : w.refilled) {
    auto& e = expected[chat];
    e += d;
  }
  for (const auto& [pid, p] : w.purchases)
    expected[p.chat].add(pocket::balance, p.credits);
  // Expired and voided credits left the balance, each with its row
  // (invariants 17 and 20 check those rows against the grants).
  for (const auto& l : w.history)
    if (l.entry == "expire" || l.entry == "void")
      expected[l.chat] += l.change;
  for (const auto& [id, r] : w.ledger) {
    auto& e = expected[r.chat];
    // A charge after a later refill takes its balance part only: the daily
    // part was paid by its hold's window, whose pockets the refill reset.
    auto made = w.made_with.find(id);
    auto at = charged_in_window.find(id);
    if (made != w.made_with.end() && at != charged_in_window.end())
      e -= in_window(r.charged, made->second.window, at->second);
    else
      e -= r.charged;
    // Invariant 10: what the user was told was cancelled while queued is
    // never charged (a cancel_requested job may be: its worker decides).
    if (acks.cancelled_ok.count(id) != 0)
      flag("reservation " + str(id)
           + " was acknowledged as cancelled while queued, and charged");
    // Invariant 1: nothing charged without a commit request.
    if (acks.commit_requested.count(id) == 0)
      flag("reservation " + str(id) + " charged without a commit request");
    // Invariant 3 (fencing): what ended otherwise is never charged.
    if (w.released.count(id) != 0)
      flag("released reservation " + str(id) + " was charged");
    if (w.failed_applied.count(id) != 0)
      flag("failed reservation " + str(id) + " was charged");
    if (w.cancelled_applied.count(id) != 0)
      flag("cancelled reservation " + str(id) + " was charged");
    // Invariant 11: a job that went uncertain is charged only by resolve
    // succeeded (at most once: the ledger keeps one row per job, and
    // conservation sees a second take), never by a commit.
    if (w.uncertain_applied.count(id) != 0) {
      auto by = w.charged_by.find(id);
      if (by == w.charged_by.end() || by->second != "resolve")
        flag("uncertain job " + str(id) + " was charged by "
             + (by == w.charged_by.end() ? std::string{"?"} : by->second)
             + ", not by resolve succeeded");
      if (acks.resolve_succeeded_requested.count(id) == 0)
        flag("uncertain job " + str(id)
             + " was charged without a resolve succeeded");
      if (acks.resolved_failed_ok.count(id) != 0)
        flag("uncertain job " + str(id) + " was resolved failed and charged");
    }
  }
  for (const auto& [c, chat] : w.chats) {
    const auto& p = chat.available;
    if (p.any_negative())
      flag("negative pocket in chat " + str(c));
    for (const auto& spec : w.products.pockets)
      if (p.get(spec.name) != expected[c].get(spec.name))
        flag("conservation broken in chat " + str(c) + ", pocket " + spec.name
             + ": " + str(p.get(spec.name)) + " where "
             + str(expected[c].get(spec.name)) + " is expected");
    if (p != expected[c])
      flag("conservation broken in chat " + str(c));
  }
  ledger_chain(w);
  // Invariant 3 (and 7): a chat's active reservations never exceed its
  // limit of jobs (1 unless the chat has its own), each in its own slot.
  std::map<chat_id, std::set<int32_t>> slots;
  for (const auto& [id, r] : w.reservations) {
    auto c = w.chats.find(r.chat);
    auto limit = c == w.chats.end() ? 1 : w.job_limit(c->second, now);
    auto& taken = slots[r.chat];
    if (!taken.insert(r.slot).second)
      flag("two active reservations in slot " + str(r.slot) + " of chat "
           + str(r.chat));
    if (static_cast<int32_t>(taken.size()) > limit)
      flag("chat " + str(r.chat) + " has "
           + str(static_cast<int64_t>(taken.size()))
           + " active reservations, more than its limit of " + str(limit));
  }
  // Invariant 8: nothing over-committed. When a job was reserved, the holds
  // on the chat's pockets of its active jobs, its own included, fitted in
  // each pocket it took from, as the pockets stood (held_by: a past
  // window's hold weighs on balance only, balance having no windows).
  for (const auto& [id, m] : w.made_with) {
    auto own = w.held_of.find(id);
    for (const auto& [name, amount] : m.held.items())
      if (own != w.held_of.end() && own->second.get(name) > 0
          && amount > m.amounts.get(name))
        flag("reservation " + str(id) + " of chat " + str(m.chat)
             + " was held with more than the pockets had beside the other "
               "active holds: "
             + str(m.held) + " held of " + str(m.amounts));
  }
  // Invariant 9: one request id never names two reservations.
  for (const auto& [key, ids] : w.named)
    if (ids.size() > 1)
      flag("request_id " + key.second + " of chat " + str(key.first) + " named "
           + str(static_cast<int64_t>(ids.size())) + " reservations");
  // Invariant 4: no chat locked past its deadline plus one sweep interval.
  // Faults excuse a late release (the sweep's own transactions fail), so
  // it applies to reservations whose deadline came at least two store
  // timeouts (a pending release or scan ends by then) after the last fault.
  for (const auto& [id, r] : w.reservations) {
    auto d = w.deadline(r);
    if (now <= d || w.impaired_until >= d - 2 * store_timeout)
      continue;
    ++deadline_checks;
    if (now > d + sweep_interval)
      flag("chat " + str(r.chat) + " still locked by " + str(id)
           + " one sweep interval past its deadline");
  }
  // Invariant 12: nothing stays uncertain past reconcile-timeout plus one
  // sweep interval (faults excuse it, as for invariant 4).
  for (const auto& [id, r] : w.uncertain) {
    auto d = *r.uncertain_at + w.reconcile_timeout;
    if (now <= d || w.impaired_until >= d - 2 * store_timeout)
      continue;
    ++deadline_checks;
    if (now > d + sweep_interval)
      flag("uncertain job " + str(id) + " of chat " + str(r.chat)
           + " still holds one sweep interval past reconcile-timeout");
  }
  // Invariant 6: cancel and start of one reservation never both succeed.
  for (auto id : acks.started_ok)
    if (acks.cancelled_ok.count(id) != 0)
      flag("reservation " + str(id) + " was started and cancelled");
  for (auto id : w.started_applied)
    if (w.cancelled_applied.count(id) != 0)
      flag("reservation " + str(id) + " was started and cancelled (db)");
  // Under the `request` policy the other outcome: started, then cancel
  // requested; never for a job no start reached.
  for (auto id : acks.cancel_requested_ok)
    if (w.started_applied.count(id) == 0)
      flag("reservation " + str(id)
           + " was answered cancel_requested but "
             "never started");
  // Invariants 17 to 20: the grants.
  grants_conserved(w);
  splits_in_order(w);
  ends_once(w);
}

void sim_auditor::audit_drained(const sim_world& w) {
  if (!w.reservations.empty())
    flag(str(static_cast<int64_t>(w.reservations.size()))
         + " reservation(s) left after the run, workers quiet");
  if (!w.uncertain.empty())
    flag(str(static_cast<int64_t>(w.uncertain.size()))
         + " job(s) left uncertain after the run, past reconcile-timeout");
}

void sim_auditor::audit_events(const sim_world& w,
                               const std::vector<event_record>& heard,
                               const std::string& cut_off) {
  if (!cut_off.empty())
    flag("the event bus cut off a gateway that answers at once: " + cut_off);
  // Each change wrote one event...
  std::map<std::pair<std::string, reservation_id>, int> written;
  size_t of_jobs = 0;
  for (const auto& e : w.events)
    if (e.reservation != 0) {
      ++written[{e.event, e.reservation}];
      ++of_jobs;
    }
  size_t changes = 0;
  auto expect = [&](const std::string& event, reservation_id id) {
    ++changes;
    auto n = written[{event, id}];
    if (n != 1)
      flag(event + " of " + str(id) + " written " + str(n)
           + " times with its change, expected once");
  };
  for (const auto& [id, chat] : w.released)
    expect("reservation_released", id);
  for (const auto& [id, x] : w.resolved)
    if (x.outcome == "released")
      expect("reservation_released", id);
  for (auto id : w.uncertain_applied)
    expect("reconcile_needed", id);
  for (auto id : w.cancel_requested_applied)
    expect("cancel_requested", id);
  // ...and each event of a job has its change.
  if (of_jobs != changes)
    flag(str(static_cast<int64_t>(of_jobs)) + " events of jobs for "
         + str(static_cast<int64_t>(changes)) + " changes");
  // Every event heard, as written, the first hearing of each in id order.
  std::set<event_id> seen;
  event_id newest = 0;
  const auto count = static_cast<event_id>(w.events.size());
  for (const auto& e : heard) {
    if (e.id < 1 || e.id > count) {
      flag("heard event " + str(e.id) + ", which was never written");
      continue;
    }
    const auto& t = w.events[static_cast<size_t>(e.id - 1)];
    if (t.event != e.event || t.chat != e.chat
        || t.reservation != e.reservation)
      flag("event " + str(e.id) + " heard as " + e.event + " of "
           + str(e.reservation) + ", written as " + t.event + " of "
           + str(t.reservation));
    if (seen.insert(e.id).second) {
      if (e.id < newest)
        flag("event " + str(e.id) + " heard after " + str(newest));
      newest = std::max(newest, e.id);
    }
  }
  // The bus delivers the events of jobs and windows and skips the others
  // (credits_expired): written, never heard.
  for (const auto& t : w.events)
    if (seen.count(t.id) == 0 && t.event != "credits_expired") {
      flag("event " + str(t.id) + " (" + t.event + " of chat " + str(t.chat)
           + ") never reached the gateway");
      break;
    }
}

} // namespace chargeonce::test
