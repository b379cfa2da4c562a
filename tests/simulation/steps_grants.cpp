// SPDX-License-Identifier: Apache-2.0
// The simulation's grant steps: top-ups with terms, whose grants expire
// inside the run (often while jobs hold them), and voids.
#include "tests/simulation/driver.hpp"

#include <set>

namespace chargeonce::test {

namespace {

std::string str(int64_t x) {
  return std::to_string(x);
}

/// The spread of grants' expiries: from a few seconds (a job reserved
/// now still holds it then) to most of a run.
constexpr int expiry_soon_ms = 2000;
constexpr int expiry_soon_spread_ms = 8000;
constexpr int expiry_late_spread_ms = 60000;

} // namespace

void simulation::admin_tops_up(chat_id c) {
  // Half the time a retry of the latest payment, possibly for another chat
  // or amount (refused): what a webhook retried or reused looks like.
  auto pid =
    "pay-"
    + str(pick(2) == 0 && payments_ > 0 ? static_cast<int64_t>(payments_)
                                        : static_cast<int64_t>(++payments_));
  auto credits = int64_t{1 + pick(2)};
  auto known = terms_of_.find(pid);
  if (known == terms_of_.end()) {
    grant_terms terms;
    switch (pick(4)) {
    case 0: // the top-up of before grants: never expires, priority 100
      break;
    case 1: // expires soon: often while a job holds it
      terms.expires_in_ms = expiry_soon_ms + pick(expiry_soon_spread_ms);
      break;
    case 2:
      terms.expires_in_ms = expiry_soon_ms + pick(expiry_late_spread_ms);
      break;
    default: // an instant, which a stalled top-up may find passed
      terms.expires_at = now()
                         + std::chrono::milliseconds(
                           expiry_soon_ms + pick(expiry_late_spread_ms));
      break;
    }
    if (terms.expires_in_ms != 0 || terms.expires_at || pick(2) == 0) {
      static constexpr int32_t priorities[] = {50, 100, 100, 200};
      static const char* const sources[] = {"purchase", "promo", "admin"};
      terms.priority = priorities[pick(4)];
      terms.source = sources[pick(3)];
    }
    known = terms_of_.emplace(pid, terms).first;
    ++stats[terms.expires_in_ms != 0 || terms.expires_at
              ? "top_ups_expiring"
              : "top_ups_never_expiring"];
  }
  ask<top_up_receipt>("top_up(" + str(c) + ")", c, atom::top_up_v, c, credits,
                      pid, known->second);
}

void simulation::admin_voids(chat_id c) {
  // Half the time one that an open hold holds: its holds finish normally
  // and what they release afterwards is voided too.
  std::vector<const sim_grant*> mine;
  std::vector<const sim_grant*> held;
  std::set<int64_t> holding;
  for (const auto& [id, h] : world->holds_on_grants)
    for (const auto& p : h.parts)
      holding.insert(p.grant);
  for (const auto& [id, g] : world->grants)
    if (g.chat == c) {
      mine.push_back(&g);
      if (holding.count(id) != 0)
        held.push_back(&g);
    }
  const auto& from = !held.empty() && pick(2) == 0 ? held : mine;
  if (from.empty())
    return;
  const auto& g =
    *from[static_cast<size_t>(pick(static_cast<int>(from.size())))];
  auto by_payment = !g.payment_id.empty() && pick(2) == 0;
  call<grant_info>(
    "void(" + str(c) + "," + str(g.id) + ")", c,
    [this](caf::expected<grant_info>& x) {
      if (x)
        ++stats["voids_answered"];
    },
    atom::void_grant_v, c, by_payment ? int64_t{0} : g.id,
    by_payment ? g.payment_id : std::string{});
}

// -- the planted grants -------------------------------------------------------

void simulation::create_grant_chat() {
  for (const auto& k : world->products.kinds)
    for (const auto& source : k.pay_from)
      if (source.pocket == pocket::balance) {
        grant_kind_ = k.name;
        grant_price_ = source.price;
      }
  if (grant_kind_.empty())
    return;
  // No daily pockets: every unit of its jobs is paid from balance.
  pockets p;
  for (const auto& spec : world->products.pockets)
    p.set(spec.name, 0);
  acks_.initial[grant_chat] = p;
  call<chat_status>(
    "create(" + str(grant_chat) + ")", grant_chat,
    [this](caf::expected<chat_status>& x) {
      if (!x && x.error() != caf::sec::request_timeout)
        auditor.flag("setup failed: " + error_name(x.error()));
    },
    atom::create_v,
    chat_spec{grant_chat, p, caf::none, caf::optional<int32_t>{2}});
}

/// Each grant invariant is about a case a run may not meet by chance (a
/// job holding a grant when it expires, a void of a held grant, several
/// grants in a hold): they are planted in every run, on a chat of their
/// own and with faults off, as the straddling job is.
void simulation::plant_grants() {
  auto c = grant_chat;
  if (grant_kind_.empty()) {
    ++stats["grant_plants_without_a_kind_paid_from_balance"];
    return;
  }
  if (world->chats.count(c) == 0) {
    ++stats["grant_plants_missed"];
    return;
  }
  trail << " grants";
  auto fault_percent = world->fault_percent;
  world->fault_percent = 0;
  auto p = grant_price_;
  // Created A, B, C, D; spent C (priority 50), B (the soonest expiry, a
  // promo), D, A (never expires).
  grant_terms a;
  grant_terms b;
  b.source = "promo";
  b.expires_in_ms = 4000;
  grant_terms cc;
  cc.source = "admin";
  cc.priority = 50;
  cc.expires_in_ms = 30000;
  grant_terms d;
  d.expires_in_ms = 20000;
  struct planted {
    std::string pid;
    int32_t credits;
    grant_terms terms;
  };
  std::vector<planted> tops = {{"plant-a", 2 * p, a},
                               {"plant-b", 2 * p, b},
                               {"plant-c", p, cc},
                               {"plant-d", p, d}};
  bool ok = true;
  for (const auto& t : tops)
    ok = ok
         && static_cast<bool>(until_known<top_up_receipt>(
           "top_up(" + str(c) + "," + t.pid + ")", c, nullptr, atom::top_up_v,
           c, int64_t{t.credits}, t.pid, t.terms));
  auto start = [this, c](reservation_id id, const std::string& who) {
    return static_cast<bool>(until_known<reservation>(
      "start(" + str(id) + ")", c,
      [this, id, who](caf::expected<reservation>& x) {
        if (x) {
          acks_.started_ok.insert(id);
          auditor.on_start(acks_, id, who);
        }
      },
      atom::start_v, c, id, who));
  };
  // Job 1 holds two units: all of C, half of B.
  caf::expected<reservation> r1 = caf::make_error(caf::sec::request_timeout);
  if (ok)
    r1 = until_known<reservation>(
      "reserve(" + str(c) + ",planted-1)", c, nullptr, atom::reserve_v, c,
      kind{grant_kind_}, std::string{"plant-1"}, int32_t{2});
  ok = ok && r1 && start(r1->id, "plant-worker-1");
  // C is voided while job 1 holds it; B expires while it holds half of it,
  // the other half unheld (what a reserve must not take).
  ok = ok
       && static_cast<bool>(until_known<grant_info>(
         "void(" + str(c) + ",plant-c)", c, nullptr, atom::void_grant_v, c,
         int64_t{0}, std::string{"plant-c"}));
  if (ok)
    pass_time(std::chrono::milliseconds(b.expires_in_ms + 500));
  // Job 2, one unit, after B's expiry: from D, nothing of B.
  caf::expected<reservation> r2 = caf::make_error(caf::sec::request_timeout);
  if (ok)
    r2 = until_known<reservation>(
      "reserve(" + str(c) + ",planted-2)", c, nullptr, atom::reserve_v, c,
      kind{grant_kind_}, std::string{"plant-2"}, int32_t{1});
  // Job 1 fails: its part of C is voided, its part of B expires. (A retry
  // after a lost answer finds it gone: the table says whether it failed.)
  if (ok && r2)
    until_known<reservation>("fail(" + str(r1->id) + ")", c, nullptr,
                             atom::fail_v, c, r1->id);
  ok = ok && r2 && world->failed_applied.count(r1->id) != 0;
  ok = ok && start(r2->id, "plant-worker-2");
  if (ok) {
    auto id = r2->id;
    acks_.commit_requested.insert(id);
    acks_.commit_units.emplace(id, 0);
    ok = static_cast<bool>(until_known<receipt>(
      "commit(" + str(id) + ")", c,
      [this](caf::expected<receipt>& x) {
        if (x)
          auditor.on_receipt(*world, acks_, *x);
      },
      atom::commit_v, c, id));
  }
  ++stats[ok ? "grant_plants" : "grant_plants_missed"];
  world->fault_percent = fault_percent;
}

} // namespace chargeonce::test
