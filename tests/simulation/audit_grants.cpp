// SPDX-License-Identifier: Apache-2.0
// The auditor's grant invariants (17 to 20): conservation per grant,
// nothing new held from an expired or voided grant, the spending order,
// and each expiry and void once. The spending order and what counts as
// live are written here again, from the rule's words, rather than taken
// from the model: a model that drifts from the rule must not drag its
// auditor along.
#include "tests/simulation/audit.hpp"

#include <algorithm>
#include <cstdlib>
#include <tuple>

namespace chargeonce::test {

namespace {

std::string str(int64_t x) {
  return std::to_string(x);
}

std::string ms(caf::timestamp t) {
  return str(std::chrono::duration_cast<std::chrono::milliseconds>(
               t.time_since_epoch())
               .count())
         + "ms";
}

/// Priority (lower first), then the soonest expiry (none last), then the
/// source (promo, admin, purchase), then creation.
bool spends_before(const sim_grant& x, const sim_grant& y) {
  auto rank = [](const std::string& source) {
    return source == "promo" ? 0 : source == "admin" ? 1 : 2;
  };
  auto key = [&](const sim_grant& g) {
    return std::make_tuple(g.priority, !g.expires_at,
                           g.expires_at.value_or(caf::timestamp{}),
                           rank(g.source), g.created_at, g.id);
  };
  return key(x) < key(y);
}

/// What open holds (active and uncertain jobs) hold of each grant, from
/// the splits their reserves recorded.
std::map<int64_t, int64_t> held_now(const sim_world& w) {
  std::map<int64_t, int64_t> out;
  auto add = [&](reservation_id id) {
    if (auto m = w.made_with.find(id); m != w.made_with.end())
      for (const auto& p : m->second.grants)
        out[p.grant] += p.credits;
  };
  for (const auto& [id, r] : w.reservations)
    add(id);
  for (const auto& [id, r] : w.uncertain)
    add(id);
  return out;
}

/// The grant a credits_expired event names ("grant 12: ..."), 0 if none.
int64_t grant_of_event(const event_record& e) {
  if (e.event != "credits_expired" || e.detail.compare(0, 6, "grant ") != 0)
    return 0;
  return std::strtoll(e.detail.c_str() + 6, nullptr, 10);
}

} // namespace

void sim_auditor::grants_conserved(const sim_world& w) {
  for (; grant_rows_checked < w.history.size(); ++grant_rows_checked) {
    const auto& l = w.history[grant_rows_checked];
    if (l.entry == "charge") {
      int64_t sum = 0;
      for (const auto& p : l.grants) {
        grant_tallies[p.grant].charged += p.credits;
        sum += p.credits;
      }
      if (sum != -l.change.get(pocket::balance))
        flag("the charge of " + str(l.reservation) + " of chat " + str(l.chat)
             + " took " + str(-l.change.get(pocket::balance))
             + " from the balance but " + str(sum) + " from its grants");
    } else if (l.entry == "expire" || l.entry == "void") {
      bool expire = l.entry == "expire";
      for (const auto& p : l.grants) {
        auto& t = grant_tallies[p.grant];
        (expire ? t.expired : t.voided) += p.credits;
        if (l.reservation != 0)
          ++t.released_by[l.reservation];
        else
          ++(expire ? t.own_expiries : t.own_voids);
      }
    }
  }
  auto held = held_now(w);
  std::map<chat_id, int64_t> left_of;
  for (const auto& [id, g] : w.grants) {
    auto name = "grant " + str(id) + " of chat " + str(g.chat);
    left_of[g.chat] += g.left();
    if (g.charged < 0 || g.expired < 0 || g.voided < 0 || g.left() < 0)
      flag(name + ": its " + str(g.credits) + " credits are charged "
           + str(g.charged) + " + expired " + str(g.expired) + " + voided "
           + str(g.voided) + " + left " + str(g.left())
           + ", a term below zero");
    const auto& t = grant_tallies[id];
    if (t.charged != g.charged || t.expired != g.expired
        || t.voided != g.voided)
      flag(name + " says charged " + str(g.charged) + ", expired "
           + str(g.expired) + ", voided " + str(g.voided)
           + " where its ledger rows say " + str(t.charged) + ", "
           + str(t.expired) + ", " + str(t.voided));
    auto h = held.count(id) != 0 ? held[id] : 0;
    if (g.left() < h)
      flag(name + " has " + str(g.left()) + " credits left, less than the "
           + str(h) + " its open holds hold");
    else if ((g.expired_at || g.voided_at) && g.left() != h)
      flag(name + ", " + (g.voided_at ? "voided" : "expired") + ", keeps "
           + str(g.left()) + " credits where its open holds hold " + str(h)
           + ": the rest went back to the balance");
  }
  for (const auto& [c, chat] : w.chats) {
    auto balance = chat.available.get(pocket::balance);
    if (balance != left_of[c])
      flag("the balance of chat " + str(c) + " is " + str(balance)
           + " where its grants have " + str(left_of[c]) + " left");
  }
}

void sim_auditor::splits_in_order(const sim_world& w) {
  for (auto m = w.made_with.upper_bound(splits_checked); m != w.made_with.end();
       ++m) {
    auto id = m->first;
    const auto& made = m->second;
    splits_checked = id;
    auto name = "reservation " + str(id) + " of chat " + str(made.chat);
    // 18: the balance part in full on grants, each part from a grant live
    // at reserve time, within what it had unheld.
    auto held = w.held_of.find(id);
    int64_t on_balance =
      held == w.held_of.end() ? 0 : held->second.get(pocket::balance);
    int64_t split = 0;
    std::map<int64_t, int32_t> took;
    for (const auto& p : made.grants) {
      split += p.credits;
      took[p.grant] += p.credits;
    }
    if (split != on_balance)
      flag(name + " holds " + str(on_balance) + " of balance but " + str(split)
           + " of grants");
    auto live = [&](const sim_grant& g) {
      return !g.expired_at && !g.voided_at
             && (!g.expires_at || *g.expires_at > made.at);
    };
    std::vector<const sim_grant_seen*> open;
    bool ended_seen = false;
    for (const auto& s : made.grants_seen) {
      auto free = s.grant.left() - s.held;
      auto n = took.count(s.grant.id) != 0 ? took[s.grant.id] : 0;
      if (n > 0 && !live(s.grant))
        flag(name + " took " + str(n) + " credits of grant " + str(s.grant.id)
             + ", which "
             + (s.grant.voided_at ? "was voided"
                                  : "expired at " + ms(*s.grant.expires_at))
             + ", at " + ms(made.at));
      if (n > free)
        flag(name + " took " + str(n) + " credits of grant " + str(s.grant.id)
             + ", which had " + str(free) + " unheld");
      if (live(s.grant) && free > 0)
        open.push_back(&s);
      else if (!live(s.grant) && s.grant.left() > 0)
        ended_seen = true;
      took.erase(s.grant.id);
    }
    for (const auto& [g, n] : took)
      flag(name + " took " + str(n) + " credits of grant " + str(g)
           + ", which its chat did not have");
    if (made.grants.empty())
      continue;
    if (ended_seen)
      ++ended_grant_checks;
    // 19: in the order, every grant before the last one taken from was
    // taken whole.
    std::sort(open.begin(), open.end(), [](const auto* x, const auto* y) {
      return spends_before(x->grant, y->grant);
    });
    if (open.size() > 1)
      ++order_checks;
    auto part = [&](int64_t g) {
      int32_t n = 0;
      for (const auto& p : made.grants)
        if (p.grant == g)
          n += p.credits;
      return n;
    };
    size_t last = 0;
    for (size_t i = 0; i < open.size(); ++i)
      if (part(open[i]->grant.id) > 0)
        last = i;
    for (size_t i = 0; i < last; ++i) {
      const auto& e = *open[i];
      auto free = e.grant.left() - e.held;
      if (part(e.grant.id) < free)
        flag(name + " took credits of grant " + str(open[last]->grant.id)
             + " while grant " + str(e.grant.id)
             + ", before it in the spending order, had "
             + str(free - part(e.grant.id)) + " unheld credits left");
    }
  }
}

void sim_auditor::ends_once(const sim_world& w) {
  for (; grant_events_checked < w.events.size(); ++grant_events_checked)
    if (auto g = grant_of_event(w.events[grant_events_checked]); g != 0)
      ++grant_tallies[g].expired_events;
  for (const auto& [id, g] : w.grants) {
    auto name = "grant " + str(id) + " of chat " + str(g.chat);
    const auto& t = grant_tallies[id];
    if (t.own_expiries > 1)
      flag(name + " expired " + str(t.own_expiries) + " times");
    if (t.own_voids > 1)
      flag(name + " was voided " + str(t.own_voids) + " times");
    if (t.expired_events != t.own_expiries)
      flag(name + " has " + str(t.expired_events)
           + " credits_expired events for " + str(t.own_expiries)
           + " expiries");
    if (g.expired > 0 && g.voided > 0)
      flag(name + " both expired (" + str(g.expired) + " credits) and was "
           + "voided (" + str(g.voided) + ")");
    if (g.expired_at && (!g.expires_at || *g.expired_at < *g.expires_at))
      flag(name + " expired at " + ms(*g.expired_at) + ", before its expiry");
    if ((g.expired > 0 || t.own_expiries > 0) && !g.expired_at)
      flag(name + " lost credits to expiry but was never marked expired");
    if ((g.voided > 0 || t.own_voids > 0) && !g.voided_at)
      flag(name + " lost credits to a void but was never marked voided");
    for (const auto& [r, n] : t.released_by) {
      if (n > 1)
        flag("the end of reservation " + str(r) + " let credits of " + name
             + " go " + str(n) + " times");
      auto m = w.made_with.find(r);
      bool held = false;
      if (m != w.made_with.end())
        for (const auto& p : m->second.grants)
          held = held || p.grant == id;
      if (!held)
        flag("the end of reservation " + str(r) + " let credits of " + name
             + " go, which it did not hold");
    }
  }
}

void sim_auditor::audit_grants_drained(const sim_world& w, caf::timestamp now) {
  // The supervisor's scan runs after every sweep: a quiet chat's grant is
  // expired by it within a sweep interval (and a store timeout).
  auto slack = 2 * (sweep_interval + store_timeout);
  for (const auto& [id, g] : w.grants) {
    if (!g.expires_at || *g.expires_at + slack >= now || g.expired_at)
      continue;
    if (g.voided_at && *g.voided_at < *g.expires_at)
      continue; // voided first: its credits are void, not expired
    flag("grant " + str(id) + " of chat " + str(g.chat) + ", due at "
         + ms(*g.expires_at) + ", never expired");
  }
}

} // namespace chargeonce::test
