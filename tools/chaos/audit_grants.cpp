// SPDX-License-Identifier: Apache-2.0
#include "tools/chaos/audit_grants.hpp"

#include "protocol/pockets.hpp"

#include <algorithm>
#include <limits>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace chargeonce::chaos {

namespace {

constexpr int grant_conserved = 20;
constexpr int nothing_held_expired = 21;
constexpr int spending_order = 22;
constexpr int expiry_and_void_once = 23;

constexpr int64_t forever = std::numeric_limits<int64_t>::max();
constexpr int64_t unknown = -1; ///< a balance hold nobody can tell

using persistence::audit_grant;
using persistence::audit_ledger_row;

/// The reservation a hold's own expire or void row names ("grant 7 expired:
/// released by reservation 12"); 0 for the row of the expiry or the void
/// itself.
reservation_id released_by(const std::string& detail) {
  static const std::string marker = "released by reservation ";
  auto i = detail.find(marker);
  if (i == std::string::npos)
    return 0;
  return std::stoll(detail.substr(i + marker.size()));
}

/// The grant a credits_expired or credits_expiring event names ("grant 7:
/// …"); 0 when it names none.
int64_t grant_of_event(const std::string& detail) {
  static const std::string marker = "grant ";
  if (detail.rfind(marker, 0) != 0)
    return 0;
  try {
    return std::stoll(detail.substr(marker.size()));
  } catch (const std::exception&) {
    return 0;
  }
}

/// chargeonce_spending_order of persistence/functions/12_grants.sql:
/// priority, the soonest expiry (none last), the source (promo, admin,
/// purchase), creation.
auto spending_key(const audit_grant& g) {
  int rank = g.source == "promo" ? 0 : g.source == "admin" ? 1 : 2;
  return std::make_tuple(g.priority, !g.expires, g.expires ? g.expires_us : 0,
                         rank, g.created_us, g.id);
}

bool before(const audit_grant& x, const audit_grant& y) {
  return spending_key(x) < spending_key(y);
}

/// What the ledger says of one grant.
struct grant_account {
  int top_ups = 0;           ///< top-up rows that gave it
  int64_t given = 0;         ///< what they gave
  int64_t charged = 0;       ///< what charges took of it
  int64_t expired = 0;       ///< what expire rows took out of the balance
  int64_t voided = 0;        ///< what void rows took out of the balance
  int scan_expires = 0;      ///< rows of its expiry (not of a hold's end)
  int scan_voids = 0;        ///< rows of its void
  bool expired_held = false; ///< its expiry found credits still held
  /// Per reservation, the rows its hold's end wrote for this grant.
  std::map<reservation_id, int> hold_expires;
  std::map<reservation_id, int> hold_voids;
  /// Every row that took credits of it out of the grant (charges, expiries,
  /// voids), with what each took.
  std::vector<std::pair<const audit_ledger_row*, int32_t>> taken;
};

/// What the record and Postgres say of one reservation, for the order.
struct reservation_facts {
  chat_id chat = 0;
  int64_t created_us = 0; ///< its reserve transaction's start; 0: unknown
  /// The first answer that returned it: its hold had committed by then.
  int64_t acked_us = forever;
  /// The first acknowledged end of its hold (commit, fail, cancel while
  /// queued, resolve): it had ended by then.
  int64_t end_acked_us = forever;
  /// When the transaction that ended its hold began, as Postgres keeps it
  /// (forever: still holds, or unknown).
  int64_t end_us = forever;
  int64_t balance = unknown; ///< what its hold held of the balance
};

/// One hold whose grants are known: a charge's, an active or uncertain
/// reservation's.
struct known_hold {
  reservation_id id = 0;
  chat_id chat = 0;
  const std::vector<int64_t>* grants = nullptr;
  std::string where; ///< how the auditor knows it, for the message
};

class grant_auditor {
public:
  grant_auditor(const recorder& rec, const std::map<chat_id, pockets>& initial,
                const persistence::audit_snapshot& snap,
                const audit_limits& lim, const audit_sink& sink)
      : rec_(rec), initial_(initial), snap_(snap), lim_(lim), sink_(sink) {
    index();
  }

  void run(std::map<std::string, uint64_t>& facts) {
    conserved();
    held_while_live();
    in_spending_order();
    expired_and_voided_once();
    tell(facts);
  }

private:
  // -- index ------------------------------------------------------------------

  void index() {
    for (const auto& g : snap_.grants) {
      grants_[g.id] = &g;
      by_chat_[g.chat].push_back(&g);
    }
    for (const auto& h : snap_.holds)
      for (size_t i = 0; i < h.grants.size(); ++i)
        if (h.open && i < h.credits.size())
          held_open_[h.grants[i]] += h.credits[i];
    index_ledger();
    index_reservations();
    for (const auto& r : rec_.ops) {
      if (r.what == op::create && r.ok())
        created_acked_[r.chat] = std::min(
          created_acked_.count(r.chat) ? created_acked_[r.chat] : forever,
          r.acked_us);
      if (r.what == op::top_up && r.ok()) {
        auto pay =
          "pay-" + std::to_string(lim_.seed) + "-" + std::to_string(r.key);
        auto& t = top_up_acked_[pay];
        t = t == 0 ? r.acked_us : std::min(t, r.acked_us);
      }
    }
  }

  void index_ledger() {
    for (const auto& l : snap_.ledger) {
      if (l.grant_ids.empty())
        continue;
      if (l.grant_ids.size() != l.grant_credits.size()) {
        sink_.check(grant_conserved);
        sink_.fail(grant_conserved, l.chat, l.reservation,
                   "ledger row " + std::to_string(l.id) + " names "
                     + std::to_string(l.grant_ids.size()) + " grants and "
                     + std::to_string(l.grant_credits.size()) + " amounts");
        continue;
      }
      for (size_t i = 0; i < l.grant_ids.size(); ++i) {
        auto id = l.grant_ids[i];
        auto credits = l.grant_credits[i];
        auto g = grants_.find(id);
        if (g == grants_.end() || g->second->chat != l.chat) {
          sink_.check(grant_conserved);
          sink_.fail(grant_conserved, l.chat, l.reservation,
                     "ledger row " + std::to_string(l.id) + " (" + l.entry
                       + ") names grant " + std::to_string(id)
                       + ", which is not its chat's");
          continue;
        }
        auto& a = accounts_[id];
        if (l.entry == "top_up") {
          ++a.top_ups;
          a.given += credits;
        } else if (l.entry == "charge") {
          a.charged += credits;
          a.taken.emplace_back(&l, credits);
        } else if (l.entry == "expire" || l.entry == "void") {
          bool expire = l.entry == "expire";
          (expire ? a.expired : a.voided) += credits;
          a.taken.emplace_back(&l, credits);
          if (auto by = released_by(l.detail); by != 0)
            ++(expire ? a.hold_expires : a.hold_voids)[by];
          else
            ++(expire ? a.scan_expires : a.scan_voids);
          if (expire && by_scan_held(l))
            a.expired_held = true;
        }
      }
    }
  }

  /// An expiry's row that says credits were still held: "grant 7 expired
  /// (2 credits still held)".
  static bool by_scan_held(const audit_ledger_row& l) {
    return released_by(l.detail) == 0
           && l.detail.find("still held") != std::string::npos;
  }

  reservation_facts& facts_of(reservation_id id, chat_id chat) {
    auto& f = res_[id];
    if (f.chat == 0)
      f.chat = chat;
    return f;
  }

  void index_reservations() {
    for (const auto& x : snap_.reservations) {
      auto& f = facts_of(x.id, x.chat);
      f.created_us = x.created_us;
      f.balance = x.held.get(pocket::balance);
      f.end_us = forever;
    }
    for (const auto& x : snap_.ended) {
      auto& f = facts_of(x.id, x.chat);
      if (x.created_us != 0)
        f.created_us = x.created_us;
      f.balance = x.held.get(pocket::balance);
      if (x.ended_us != 0)
        f.end_us = x.ended_us;
    }
    for (const auto& x : snap_.releases) {
      auto& f = facts_of(x.id, x.chat);
      f.end_us = std::min(f.end_us, x.released_us);
    }
    // A job of unknown outcome holds until it is settled, whatever ended
    // its reservation.
    for (const auto& x : snap_.uncertain) {
      auto& f = facts_of(x.id, x.chat);
      f.created_us = x.created_us;
      f.balance = x.held.get(pocket::balance);
      f.end_us = x.outcome.empty() ? forever : x.resolved_us;
    }
    for (const auto& r : rec_.ops) {
      if (r.id == 0 || !r.ok() || r.what == op::void_grant
          || r.what == op::top_up)
        continue;
      auto& f = facts_of(r.id, r.chat);
      if (r.created_us != 0) {
        f.acked_us = std::min(f.acked_us, r.acked_us);
        if (f.created_us == 0)
          f.created_us = r.created_us;
        if (f.balance == unknown
            && (r.what == op::reserve || r.what == op::start))
          f.balance = r.amounts.get(pocket::balance);
      } else if (r.what == op::commit || r.what == op::resolve) {
        f.acked_us = std::min(f.acked_us, r.acked_us);
      }
      bool ends = r.what == op::commit || r.what == op::fail
                  || r.what == op::resolve
                  || (r.what == op::cancel && !r.cancel_requested);
      if (ends)
        f.end_acked_us = std::min(f.end_acked_us, r.acked_us);
    }
  }

  // -- 20: per grant, credits = charged + expired + voided + left, each
  //        part what the ledger's rows naming it add up to -----------------

  /// What the ledger says gave the grant its credits: its top-up row, or
  /// for create-chat's grant the opening balance the chaos tool asked for.
  int64_t given(const audit_grant& g) const {
    if (g.payment_id.empty()) {
      auto i = initial_.find(g.chat);
      return i == initial_.end() ? 0 : i->second.get(pocket::balance);
    }
    auto a = accounts_.find(g.id);
    return a == accounts_.end() ? 0 : a->second.given;
  }

  int64_t held_open(int64_t grant) const {
    auto i = held_open_.find(grant);
    return i == held_open_.end() ? 0 : i->second;
  }

  void conserved() {
    std::map<chat_id, int> openings;
    static const grant_account none;
    for (const auto& g : snap_.grants) {
      sink_.check(grant_conserved);
      auto i = accounts_.find(g.id);
      const auto& a = i == accounts_.end() ? none : i->second;
      auto name = "grant " + std::to_string(g.id);
      auto say = [&](const std::string& what) {
        sink_.fail(grant_conserved, g.chat, 0,
                   std::string{name}.append(": ").append(what));
      };
      if (g.payment_id.empty()) {
        if (++openings[g.chat] == 2)
          say("a second grant without a top-up (create-chat gives one)");
        if (a.top_ups > 0)
          say("a top-up row names it, yet it has no payment id");
      } else if (a.top_ups != 1) {
        say(std::to_string(a.top_ups) + " top-up rows gave it");
      }
      auto gave = given(g);
      if (g.credits != gave)
        say("has " + std::to_string(g.credits) + " credits, "
            + (g.payment_id.empty() ? "the chat was created with "
                                    : "its top-up gave ")
            + std::to_string(gave));
      auto part = [&](const char* what, int64_t column, int64_t rows) {
        if (column != rows)
          say(std::string{what} + " " + std::to_string(column)
              + ", the ledger's rows say " + std::to_string(rows));
      };
      part("charged", g.charged, a.charged);
      part("expired", g.expired, a.expired);
      part("voided", g.voided, a.voided);
      auto left = gave - a.charged - a.expired - a.voided;
      if (left < 0)
        say(std::to_string(gave) + " credits = charged "
            + std::to_string(a.charged) + " + expired "
            + std::to_string(a.expired) + " + voided "
            + std::to_string(a.voided) + " + left " + std::to_string(left)
            + ": less than nothing left");
      else if (left < held_open(g.id))
        say("open holds hold " + std::to_string(held_open(g.id))
            + " credits of it, it has " + std::to_string(left) + " left");
    }
  }

  // -- 21: nothing new is held from an expired grant: each hold's grants
  //        expire after its reservation was created (Postgres' clock) ------

  /// Every hold whose grants are known, with the rows that tell them.
  std::vector<known_hold> known_holds() const {
    std::vector<known_hold> out;
    for (const auto& l : snap_.ledger)
      if (l.charge && !l.grant_ids.empty())
        out.push_back({l.reservation, l.chat, &l.grant_ids,
                       "charge row " + std::to_string(l.id)});
    for (const auto& h : snap_.holds)
      if (!h.grants.empty())
        out.push_back({h.id, h.chat, &h.grants,
                       h.open ? "its open hold" : "its settled hold"});
    return out;
  }

  int64_t created(reservation_id id) const {
    auto i = res_.find(id);
    return i == res_.end() ? 0 : i->second.created_us;
  }

  void held_while_live() {
    std::set<std::pair<reservation_id, int64_t>> judged;
    auto judge = [&](reservation_id id, chat_id chat, int64_t grant,
                     const std::string& where) {
      if (!judged.insert({id, grant}).second)
        return;
      sink_.check(nothing_held_expired);
      auto g = grants_.find(grant);
      if (g == grants_.end() || g->second->chat != chat) {
        sink_.fail(nothing_held_expired, chat, id,
                   where + " holds grant " + std::to_string(grant)
                     + ", not a grant of its chat");
        return;
      }
      auto at = created(id);
      if (at != 0 && g->second->expires && g->second->expires_us <= at)
        sink_.fail(nothing_held_expired, chat, id,
                   where + " holds grant " + std::to_string(grant)
                     + ", which expired "
                     + std::to_string((at - g->second->expires_us) / 1000)
                     + " ms before the reservation was created");
    };
    for (const auto& h : known_holds())
      for (auto grant : *h.grants)
        judge(h.id, h.chat, grant, h.where);
    // The rows a hold's end wrote name the hold's grant too.
    for (const auto& l : snap_.ledger)
      if ((l.entry == "expire" || l.entry == "void") && l.grant_ids.size() == 1)
        if (auto by = released_by(l.detail); by != 0)
          judge(by, l.chat, l.grant_ids[0],
                "the " + l.entry + " row " + std::to_string(l.id)
                  + " of its end");
  }

  // -- 22: a hold takes its grants in spending order: (a) it lists them in
  //        that order, (b) no grant before its last one was passed over
  //        while it surely had credits nobody held ----------------------------

  /// How long faults that stop Postgres or a server overlapped [from, to].
  int64_t disturbed_us(int64_t from, int64_t to) const {
    int64_t out = 0;
    for (const auto& f : rec_.faults)
      if (f.what == fault::kill_server || f.what == fault::restart_postgres
          || f.what == fault::pause_postgres || f.what == fault::failover
          || f.what == fault::failover_node)
        out += std::max<int64_t>(0, std::min(to, f.end_us)
                                      - std::max(from, f.begin_us));
    return out;
  }

  /// Whether S's hold had surely ended when R's was taken (R's reserve
  /// transaction began at `r_at`): an answer said so before, or the
  /// transaction that ended it began long before (a statement without an
  /// answer takes effect within unknown_horizon_us and the outages).
  bool ended_before(const reservation_facts& s, int64_t r_at) const {
    if (s.end_acked_us < r_at)
      return true;
    return s.end_us != forever
           && s.end_us + unknown_horizon_us + disturbed_us(s.end_us, r_at)
                < r_at;
  }

  /// The most the chat's other holds can have held of its balance when R's
  /// hold was taken: every other reservation not surely inserted after R's
  /// hold committed nor surely ended before R's transaction began. Unknown
  /// when one of them held an amount nobody can tell.
  int64_t others_held(reservation_id id, const reservation_facts& r) const {
    int64_t out = 0;
    for (auto other : chat_reservations_.at(r.chat)) {
      if (other == id)
        continue;
      const auto& s = res_.at(other);
      if (s.created_us > r.acked_us || ended_before(s, r.created_us))
        continue;
      if (s.balance == unknown)
        return unknown;
      out += s.balance;
    }
    return out;
  }

  /// Whether grant `e` surely could give credits when R's hold was taken:
  /// it was committed before R's transaction began, had not expired by its
  /// time, and was not voided before R's hold committed.
  bool live_for(const audit_grant& e, const reservation_facts& r) const {
    if (e.payment_id.empty()) {
      auto c = created_acked_.find(e.chat);
      if (c == created_acked_.end() || c->second >= r.created_us)
        return false;
    } else {
      auto t = top_up_acked_.find(e.payment_id);
      if (t == top_up_acked_.end() || t->second >= r.created_us)
        return false;
    }
    if (e.expires && e.expires_us <= r.created_us)
      return false;
    return e.voided_us == 0
           || (r.acked_us != forever && e.voided_us > r.acked_us);
  }

  /// What left grant `e` in transactions not surely begun after R's hold
  /// committed: charges, expiries and voids up to R's first answer.
  int64_t taken_before(const audit_grant& e, const reservation_facts& r) const {
    auto a = accounts_.find(e.id);
    if (a == accounts_.end())
      return 0;
    int64_t out = 0;
    for (const auto& [row, credits] : a->second.taken)
      if (row->at_us <= r.acked_us)
        out += credits;
    return out;
  }

  void in_spending_order() {
    for (const auto& [id, f] : res_)
      chat_reservations_[f.chat].push_back(id);
    std::set<std::pair<reservation_id, std::string>> judged;
    for (const auto& h : known_holds()) {
      if (!judged.insert({h.id, h.where}).second)
        continue;
      sink_.check(spending_order);
      const auto& ids = *h.grants;
      std::vector<const audit_grant*> hold;
      for (auto grant : ids)
        if (auto g = grants_.find(grant); g != grants_.end())
          hold.push_back(g->second);
      if (hold.size() != ids.size())
        continue; // 21 reports a grant that is not the chat's
      for (size_t i = 1; i < hold.size(); ++i)
        if (!before(*hold[i - 1], *hold[i]))
          sink_.fail(spending_order, h.chat, h.id,
                     h.where + " takes grant " + std::to_string(hold[i]->id)
                       + " after grant " + std::to_string(hold[i - 1]->id)
                       + ", which comes later in spending order");
      passed_over(h, hold);
    }
  }

  /// (b) for one hold.
  void passed_over(const known_hold& h,
                   const std::vector<const audit_grant*>& hold) {
    auto rf = res_.find(h.id);
    if (rf == res_.end() || rf->second.created_us == 0)
      return;
    const auto& r = rf->second;
    const auto* last = *std::max_element(
      hold.begin(), hold.end(), [](const audit_grant* x, const audit_grant* y) {
        return before(*x, *y);
      });
    int64_t others = -2; // computed when a grant needs it
    for (const auto* e : by_chat_[h.chat]) {
      if (!before(*e, *last)
          || std::find(hold.begin(), hold.end(), e) != hold.end()
          || !live_for(*e, r))
        continue;
      if (others == -2)
        others = others_held(h.id, r);
      if (others == unknown)
        return;
      ++passed_over_judged_;
      auto free = given(*e) - taken_before(*e, r) - others;
      if (free > 0)
        sink_.fail(spending_order, h.chat, h.id,
                   h.where + " takes grant " + std::to_string(last->id)
                     + " while grant " + std::to_string(e->id)
                     + ", earlier in spending order, had at least "
                     + std::to_string(free)
                     + " credits nobody held when the reservation was "
                       "created");
    }
  }

  // -- 23: each grant expires at most once and not before its time, is
  //        voided at most once, never both with credits, keeps after either
  //        only what holds hold, and its expiry has its one event -----------

  void expired_and_voided_once() {
    std::map<int64_t, int> expired_events;
    std::map<int64_t, int> expiring_events;
    for (const auto& e : snap_.events) {
      if (e.event != "credits_expired" && e.event != "credits_expiring")
        continue;
      sink_.check(expiry_and_void_once);
      auto grant = grant_of_event(e.detail);
      auto g = grants_.find(grant);
      if (g == grants_.end() || g->second->chat != e.chat) {
        sink_.fail(expiry_and_void_once, e.chat, 0,
                   "event " + e.event + " '" + e.detail
                     + "' names no grant of its chat");
        continue;
      }
      ++(e.event == "credits_expired" ? expired_events
                                      : expiring_events)[grant];
    }
    static const grant_account none;
    for (const auto& g : snap_.grants) {
      sink_.check(expiry_and_void_once);
      auto i = accounts_.find(g.id);
      const auto& a = i == accounts_.end() ? none : i->second;
      auto say = [&](reservation_id id, const std::string& what) {
        sink_.fail(expiry_and_void_once, g.chat, id,
                   "grant " + std::to_string(g.id) + " " + what);
      };
      if (a.scan_expires > 1)
        say(0, "expired " + std::to_string(a.scan_expires) + " times");
      if (a.scan_voids > 1)
        say(0, "voided " + std::to_string(a.scan_voids) + " times");
      if ((a.scan_voids == 1) != (g.voided_us != 0))
        say(0, std::to_string(a.scan_voids) + " void rows, voided_at "
                 + (g.voided_us != 0 ? "set" : "not set"));
      if ((a.scan_expires == 1 || !a.hold_expires.empty() || g.expired > 0)
          && g.expired_us == 0)
        say(0, "has expired credits, yet no expired_at");
      for (const auto& [id, n] : a.hold_expires)
        if (n > 1)
          say(id,
              "expired " + std::to_string(n) + " times at the end of one hold");
      for (const auto& [id, n] : a.hold_voids)
        if (n > 1 || g.voided_us == 0)
          say(id, "voided " + std::to_string(n)
                    + " times at the end of one hold"
                    + (g.voided_us == 0 ? ", never voided itself" : ""));
      if (g.expired > 0 && g.voided > 0)
        say(0, "has both expired (" + std::to_string(g.expired)
                 + ") and voided (" + std::to_string(g.voided) + ") credits");
      expired_in_time(g, a);
      if ((g.expired_us != 0 || g.voided_us != 0) && g.left() > held_open(g.id))
        say(0, "has ended (expired or voided) with " + std::to_string(g.left())
                 + " credits left, of which holds hold "
                 + std::to_string(held_open(g.id)));
      auto n = expired_events.count(g.id) ? expired_events[g.id] : 0;
      if (n != a.scan_expires)
        say(0, "has " + std::to_string(n) + " credits_expired events for its "
                 + std::to_string(a.scan_expires) + " expiry rows");
      auto m = expiring_events.count(g.id) ? expiring_events[g.id] : 0;
      if (m > 1 || (m == 1 && g.noticed_us == 0)
          || (m == 0 && g.noticed_us != 0 && g.left() > 0))
        say(0, "has " + std::to_string(m) + " credits_expiring events, noticed "
                 + (g.noticed_us != 0 ? "once" : "never") + ", "
                 + std::to_string(g.left()) + " credits left");
    }
  }

  /// Not before its time (expires_at, in Postgres' clock), and within a
  /// sweep, the slack and the outages after it.
  void expired_in_time(const audit_grant& g, const grant_account& a) {
    auto say = [&](const std::string& what) {
      sink_.fail(expiry_and_void_once, g.chat, 0,
                 "grant " + std::to_string(g.id) + " " + what);
    };
    if (g.expired_us != 0 && (!g.expires || g.expired_us < g.expires_us))
      say(g.expires
            ? "expired " + std::to_string((g.expires_us - g.expired_us) / 1000)
                + " ms before its expires_at"
            : "expired, yet it never expires");
    for (const auto& [row, credits] : a.taken)
      if (row->entry == "expire" && (!g.expires || row->at_us < g.expires_us))
        say("expired by ledger row " + std::to_string(row->id)
            + " before its expires_at");
    if (!g.expires || g.expired_us != 0 || g.voided_us != 0)
      return;
    auto allowed_us = (lim_.sweep_interval_ms + lim_.slack_ms) * 1000
                      + disturbed_us(g.expires_us, snap_.read_us);
    if (g.expires_us + allowed_us < snap_.read_us)
      say("was due " + std::to_string((snap_.read_us - g.expires_us) / 1000)
          + " ms before the audit and has not expired (allowed "
          + std::to_string(allowed_us / 1000) + " ms)");
  }

  // -- what the run did -------------------------------------------------------

  void tell(std::map<std::string, uint64_t>& facts) const {
    facts["grants"] = snap_.grants.size();
    // How often 22 (b) could bound what a passed-over grant had unheld:
    // how much that check judged in this run.
    facts["passed_over_judged"] = passed_over_judged_;
    for (const auto& g : snap_.grants) {
      facts["with_expiry"] += g.expires ? 1 : 0;
      facts["expired"] += g.expired_us != 0 ? 1 : 0;
      facts["voided"] += g.voided_us != 0 ? 1 : 0;
      facts["promo"] += g.source == "promo" ? 1 : 0;
    }
    for (const auto& [id, a] : accounts_) {
      facts["expired_while_held"] += a.expired_held ? 1 : 0;
      facts["hold_ends_expired"] += a.hold_expires.size();
      facts["hold_ends_voided"] += a.hold_voids.size();
    }
    for (const auto& l : snap_.ledger)
      if (l.charge && l.grant_ids.size() > 1)
        ++facts["charges_over_grants"];
  }

  const recorder& rec_;
  const std::map<chat_id, pockets>& initial_;
  const persistence::audit_snapshot& snap_;
  const audit_limits& lim_;
  const audit_sink& sink_;
  std::unordered_map<int64_t, const audit_grant*> grants_;
  std::map<chat_id, std::vector<const audit_grant*>> by_chat_;
  std::unordered_map<int64_t, grant_account> accounts_;
  std::unordered_map<int64_t, int64_t> held_open_; ///< per grant
  std::unordered_map<reservation_id, reservation_facts> res_;
  std::map<chat_id, std::vector<reservation_id>> chat_reservations_;
  std::map<chat_id, int64_t> created_acked_;    ///< create-chat's first answer
  std::map<std::string, int64_t> top_up_acked_; ///< per payment id
  uint64_t passed_over_judged_ = 0;             ///< grants 22 (b) bounded
};

} // namespace

void audit_grants(const recorder& rec,
                  const std::map<chat_id, pockets>& initial,
                  const persistence::audit_snapshot& snap,
                  const audit_limits& lim, const audit_sink& sink,
                  std::map<std::string, uint64_t>& facts) {
  grant_auditor{rec, initial, snap, lim, sink}.run(facts);
}

} // namespace chargeonce::chaos
