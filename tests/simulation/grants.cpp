// SPDX-License-Identifier: Apache-2.0
// The world's credit grants: persistence/functions/12_grants.sql and the
// grant steps of top-up, reserve, commit, fail, cancel, resolve and the
// releases, rule by rule. The balance pocket is the sum of the grants'
// left; a hold's balance part is split over grants in spending order and
// settles grant by grant when it ends; expiry is lazy (a writer that finds a
// grant due expires first) and swept by the supervisor's scan.
#include "protocol/errors.hpp"
#include "tests/simulation/world.hpp"

#include <algorithm>
#include <tuple>

namespace chargeonce::test {

namespace {

caf::error err(ec code, const std::string& what) {
  return caf::make_error(code, what);
}

/// chargeonce_spending_order: priority, then the soonest expiry (none
/// last), then the source (promo, admin, purchase), then creation.
auto spending_key(const sim_grant& g) {
  auto rank = g.source == "promo" ? 0 : g.source == "admin" ? 1 : 2;
  return std::make_tuple(g.priority, !g.expires_at,
                         g.expires_at ? *g.expires_at : caf::timestamp{}, rank,
                         g.created_at, g.id);
}

/// chargeonce_grant_end: how a grant's credits leave the balance when
/// nobody holds them, "void" or "expire" (whichever came first), "" while
/// it is live. `voids`: false for the void_releases_to_balance mutant.
std::string grant_end(const sim_grant& g, caf::timestamp now, bool voids) {
  if (voids && g.voided_at && (!g.expires_at || *g.voided_at < *g.expires_at))
    return "void";
  if (g.expires_at && *g.expires_at <= now)
    return "expire";
  return {};
}

std::string str(int64_t x) {
  return std::to_string(x);
}

} // namespace

// -- amounts and order --------------------------------------------------------

void sim_world::grant_balance(chat_id chat, int32_t credits,
                              caf::timestamp now) {
  if (credits <= 0)
    return;
  sim_grant g;
  g.id = static_cast<int64_t>(grants.size()) + 1;
  g.chat = chat;
  g.source = "admin";
  g.credits = credits;
  g.created_at = now;
  grants[g.id] = g;
}

std::map<int64_t, int32_t> sim_world::grants_held(chat_id chat) const {
  std::map<int64_t, int32_t> out;
  for (const auto& [id, h] : holds_on_grants)
    if (h.chat == chat)
      for (const auto& p : h.parts)
        out[p.grant] += p.credits;
  return out;
}

caf::optional<caf::timestamp> sim_world::next_expiry(chat_id chat) const {
  caf::optional<caf::timestamp> out;
  for (const auto& [id, g] : grants)
    if (g.chat == chat && g.expires_at && !g.voided_at
        && (!g.expired_at || mutant == sim_mutant::expiry_repeated)
        && (!out || *g.expires_at < *out))
      out = g.expires_at;
  return out;
}

void sim_world::grant_leaves(sim_grant& g, int32_t credits, const char* entry,
                             reservation_id released_by) {
  auto& c = chats[g.chat];
  auto before = c.available.get(pocket::balance);
  auto after = std::max(0, before - credits);
  pockets change;
  if (credits != 0)
    c.available.set(pocket::balance, after);
  if (after != before)
    change.set(pocket::balance, after - before);
  record(g.chat, entry, change, released_by, {{g.id, credits}});
}

// -- expiry -------------------------------------------------------------------

uint64_t sim_world::expire_grants(chat_id chat, caf::timestamp now) {
  auto held = grants_held(chat);
  std::vector<sim_grant*> due;
  for (auto& [id, g] : grants)
    if (g.chat == chat && g.expires_at && *g.expires_at <= now && !g.voided_at
        && (!g.expired_at || mutant == sim_mutant::expiry_repeated))
      due.push_back(&g);
  std::sort(due.begin(), due.end(), [](const auto* x, const auto* y) {
    return std::tie(*x->expires_at, x->id) < std::tie(*y->expires_at, y->id);
  });
  for (auto* g : due) {
    auto left = g->left();
    auto still_held = held[g->id];
    auto gone = std::max(0, left - still_held);
    g->expired += gone;
    g->expired_at = now;
    if (still_held > 0 && left > 0)
      ++expired_while_held;
    if (left <= 0)
      continue;
    grant_leaves(*g, gone, "expire", 0);
    announce("credits_expired", chat, 0,
             "grant " + str(g->id) + ": " + str(gone) + " credits expired"
               + (still_held > 0 ? ", " + str(still_held) + " held" : ""));
  }
  return due.size();
}

void sim_world::expire_if_due(chat_id chat, caf::timestamp now) {
  if (auto due = next_expiry(chat); due && *due <= now)
    expire_grants(chat, now);
}

bool sim_world::holds_grants(reservation_id id) const {
  return holds_on_grants.count(id) != 0;
}

uint64_t sim_world::expire_due(caf::timestamp now) {
  if (mutant == sim_mutant::expiry_scan_blind)
    return 0; // the bug: due grants wait for their chats' next writers
  std::set<chat_id> due;
  for (const auto& [id, g] : grants)
    if (g.expires_at && *g.expires_at <= now && !g.expired_at && !g.voided_at)
      due.insert(g.chat);
  uint64_t n = 0;
  for (auto chat : due)
    n += expire_grants(chat, now);
  return n;
}

// -- holds --------------------------------------------------------------------

std::vector<sim_grant_part>
sim_world::hold_grants(chat_id chat, int32_t credits, caf::timestamp now,
                       std::vector<sim_grant_seen>& seen) {
  auto held = grants_held(chat);
  std::vector<const sim_grant*> live;
  for (const auto& [id, g] : grants) {
    if (g.chat != chat)
      continue;
    seen.push_back({g, held[id]});
    auto past = g.expires_at && *g.expires_at <= now;
    if (g.voided_at || g.left() <= 0
        || (past && mutant != sim_mutant::hold_skips_expiry))
      continue;
    live.push_back(&g);
  }
  if (mutant != sim_mutant::hold_in_creation_order) // else: ids, creation
    std::sort(live.begin(), live.end(), [](const auto* x, const auto* y) {
      return spending_key(*x) < spending_key(*y);
    });
  std::vector<sim_grant_part> out;
  auto need = credits;
  for (const auto* g : live) {
    auto take = std::min(need, g->left() - held[g->id]);
    if (take > 0) {
      out.push_back({g->id, take});
      need -= take;
    }
    if (need == 0)
      break;
  }
  // Grants that cannot cover it are a bug (Postgres raises); the split
  // stays short and the auditor says so (invariant 18).
  return out;
}

std::vector<sim_grant_part> sim_world::settle_hold(chat_id chat,
                                                   reservation_id id,
                                                   int32_t charge,
                                                   caf::timestamp now) {
  std::vector<sim_grant_part> taken;
  auto h = holds_on_grants.find(id);
  if (h == holds_on_grants.end() || h->second.chat != chat)
    return taken;
  auto parts = std::move(h->second.parts);
  holds_on_grants.erase(h);
  auto need = std::max(0, charge);
  for (const auto& p : parts) {
    auto& g = grants[p.grant];
    auto take = std::max(0, std::min({need, p.credits, g.left()}));
    auto rest = std::max(0, std::min(p.credits, g.left()) - take);
    need -= take;
    auto how =
      rest > 0
        ? grant_end(g, now, mutant != sim_mutant::void_releases_to_balance)
        : std::string{};
    g.charged += take;
    if (how == "void")
      g.voided += rest;
    if (how == "expire") {
      g.expired += rest;
      if (!g.expired_at)
        g.expired_at = now;
    }
    if (!how.empty())
      grant_leaves(g, rest, how.c_str(), id);
    taken.push_back({p.grant, take});
  }
  return taken;
}

pockets sim_world::charge_grants(chat_id chat, reservation_id id,
                                 pockets nominal, caf::timestamp now,
                                 std::vector<sim_grant_part>& parts) {
  if (!holds_grants(id))
    return nominal;
  // The balance part, clamped at what the pocket has, from the hold's
  // grants; what it has over that on an ended grant leaves the balance in
  // rows before the charge's.
  auto want = std::min(nominal.get(pocket::balance),
                       chats[chat].available.get(pocket::balance));
  parts = settle_hold(chat, id, want, now);
  if (nominal.get(pocket::balance) != 0) {
    int32_t sum = 0;
    for (const auto& p : parts)
      sum += p.credits;
    nominal.set(pocket::balance, sum);
  }
  return nominal;
}

// -- top-up and void ----------------------------------------------------------

top_up_receipt sim_world::receipt_of(const sim_grant& g) const {
  top_up_receipt x{g.chat, g.payment_id, g.credits, g.created_at};
  x.grant_id = g.id;
  x.source = g.source;
  x.priority = g.priority;
  x.expires_at = g.expires_at;
  x.expires_in_ms = g.expires_in_ms;
  return x;
}

grant_info sim_world::info_of(const sim_grant& g) const {
  grant_info x;
  x.id = g.id;
  x.chat = g.chat;
  x.source = g.source;
  x.credits = g.credits;
  x.left = g.left();
  auto held = grants_held(g.chat);
  x.held = held.count(g.id) != 0 ? held[g.id] : 0;
  x.priority = g.priority;
  x.expires_at = g.expires_at;
  x.payment_id = g.payment_id;
  x.created_at = g.created_at;
  x.expired_at = g.expired_at;
  x.voided_at = g.voided_at;
  return x;
}

caf::expected<top_up_receipt> sim_world::top_up(chat_id chat, int64_t credits,
                                                const std::string& payment_id,
                                                const grant_terms& terms,
                                                caf::timestamp now) {
  auto c = chats.find(chat);
  if (c == chats.end())
    return err(ec::not_found, "unknown chat");
  // A retry with the fields as given (a relative expiry as given, not the
  // instant it resolved to) answers the first grant.
  for (const auto& [id, g] : grants) {
    if (g.payment_id != payment_id)
      continue;
    if (g.chat != chat || g.credits != credits)
      return err(ec::invalid_argument, "payment_id reused");
    if (g.priority != terms.priority || g.source != terms.source
        || g.expires_in_ms != terms.expires_in_ms
        || (terms.expires_in_ms == 0 && g.expires_at != terms.expires_at))
      return err(ec::invalid_argument, "payment_id reused with other terms");
    return receipt_of(g);
  }
  if (terms.expires_at && *terms.expires_at <= now)
    return err(ec::invalid_argument, "expires_at is not in the future");
  expire_if_due(chat, now);
  sim_grant g;
  g.id = static_cast<int64_t>(grants.size()) + 1;
  g.chat = chat;
  g.source = terms.source;
  g.credits = static_cast<int32_t>(credits);
  g.priority = terms.priority;
  g.expires_in_ms = terms.expires_in_ms;
  if (terms.expires_at)
    g.expires_at = terms.expires_at;
  else if (terms.expires_in_ms > 0)
    g.expires_at = now + std::chrono::milliseconds(terms.expires_in_ms);
  g.payment_id = payment_id;
  g.created_at = now;
  grants[g.id] = g;
  c->second.available.add(pocket::balance, g.credits);
  pockets change;
  change.set(pocket::balance, g.credits);
  record(chat, "top_up", change, 0, {{g.id, g.credits}});
  auto x = receipt_of(g);
  purchases[payment_id] = x;
  return x;
}

caf::expected<grant_info> sim_world::void_grant(chat_id chat, int64_t grant,
                                                const std::string& payment_id,
                                                caf::timestamp now) {
  if ((grant == 0) == payment_id.empty())
    return err(ec::invalid_argument, "a grant or a payment_id, one of them");
  if (chats.count(chat) == 0)
    return err(ec::not_found, "unknown chat");
  // Expired first if it was due: credits expire or are voided, not both.
  expire_if_due(chat, now);
  auto i = std::find_if(grants.begin(), grants.end(), [&](const auto& x) {
    return x.second.chat == chat
           && (grant != 0 ? x.first == grant
                          : x.second.payment_id == payment_id);
  });
  if (i == grants.end())
    return err(ec::not_found, "no such grant");
  auto& g = i->second;
  if (g.voided_at)
    return info_of(g);
  auto held = grants_held(chat)[g.id];
  auto gone = std::max(0, g.left() - held);
  g.voided += gone;
  g.voided_at = now;
  if (held > 0 && !g.expired_at)
    ++voided_while_held;
  grant_leaves(g, gone, "void", 0);
  return info_of(g);
}

} // namespace chargeonce::test
