// SPDX-License-Identifier: Apache-2.0
#include "tests/simulation/world.hpp"

#include "protocol/errors.hpp"
#include "protocol/pockets.hpp"
#include "protocol/validation.hpp"
#include "protocol/window.hpp"
#include "tests/simulation/pricing.hpp"
#include "tools/common/pocket_model.hpp"

#include <algorithm>
#include <tuple>

namespace chargeonce::test {

namespace {

caf::error err(ec code, const std::string& what) {
  return caf::make_error(code, what);
}

int64_t micros(caf::timestamp t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(
           t.time_since_epoch())
    .count();
}

} // namespace

const char* to_string(sim_mutant x) {
  switch (x) {
  case sim_mutant::none:
    return "none";
  case sim_mutant::commit_not_idempotent:
    return "commit_not_idempotent";
  case sim_mutant::charge_released:
    return "charge_released";
  case sim_mutant::no_unique_index:
    return "no_unique_index";
  case sim_mutant::cancel_in_progress:
    return "cancel_in_progress";
  case sim_mutant::sweep_blind:
    return "sweep_blind";
  case sim_mutant::outage_says_busy:
    return "outage_says_busy";
  case sim_mutant::killed_commit_charges_twice:
    return "killed_commit_charges_twice";
  case sim_mutant::reserve_ignores_holds:
    return "reserve_ignores_holds";
  case sim_mutant::limit_ignored:
    return "limit_ignored";
  case sim_mutant::request_id_forgotten:
    return "request_id_forgotten";
  case sim_mutant::charged_from_balance:
    return "charged_from_balance";
  case sim_mutant::commit_units_unchecked:
    return "commit_units_unchecked";
  case sim_mutant::partial_commit_balance_first:
    return "partial_commit_balance_first";
  case sim_mutant::cancel_request_acks_cancelled:
    return "cancel_request_acks_cancelled";
  case sim_mutant::cancelled_job_committable:
    return "cancelled_job_committable";
  case sim_mutant::commit_of_uncertain:
    return "commit_of_uncertain";
  case sim_mutant::unresolved_never_released:
    return "unresolved_never_released";
  case sim_mutant::refill_unrecorded:
    return "refill_unrecorded";
  case sim_mutant::event_lost:
    return "event_lost";
  case sim_mutant::event_skipped_by_reader:
    return "event_skipped_by_reader";
  case sim_mutant::second_worker_starts:
    return "second_worker_starts";
  case sim_mutant::paid_by_new_window:
    return "paid_by_new_window";
  case sim_mutant::void_releases_to_balance:
    return "void_releases_to_balance";
  case sim_mutant::hold_skips_expiry:
    return "hold_skips_expiry";
  case sim_mutant::hold_in_creation_order:
    return "hold_in_creation_order";
  case sim_mutant::expiry_repeated:
    return "expiry_repeated";
  case sim_mutant::expiry_scan_blind:
    return "expiry_scan_blind";
  }
  return "?";
}

pockets daily_part(const pockets& x) {
  pockets out;
  for (const auto& [name, amount] : x.items())
    if (name != pocket::balance)
      out.set(name, amount);
  return out;
}

void sim_world::impair(const char* type, caf::timestamp until) {
  ++faults[type];
  impaired_until = std::max(impaired_until, until);
}

caf::optional<reservation> sim_world::active_of(chat_id chat) const {
  for (const auto& [id, r] : reservations)
    if (r.chat == chat)
      return r;
  return caf::none;
}

std::vector<reservation> sim_world::active_in(chat_id chat) const {
  std::vector<reservation> out;
  for (const auto& [id, r] : reservations) // ids grow with created_at
    if (r.chat == chat)
      out.push_back(r);
  return out;
}

std::vector<reservation> sim_world::uncertain_in(chat_id chat) const {
  std::vector<reservation> out;
  for (const auto& [id, r] : uncertain)
    if (r.chat == chat)
      out.push_back(r);
  return out;
}

int32_t sim_world::job_limit(const sim_chat& c, caf::timestamp now) const {
  if (c.max_active_jobs)
    return *c.max_active_jobs;
  bool premium = c.premium_until && *c.premium_until > now;
  return premium ? premium_max_jobs : free_max_jobs;
}

caf::optional<reservation>
sim_world::find_request(chat_id chat, const std::string& request_id) const {
  if (request_id.empty())
    return caf::none;
  for (const auto& [id, r] : reservations)
    if (r.chat == chat && r.request_id == request_id)
      return r;
  for (const auto& [id, r] : uncertain)
    if (r.chat == chat && r.request_id == request_id)
      return r;
  if (mutant == sim_mutant::request_id_forgotten)
    return caf::none; // the bug: remembered while active only
  for (const auto& [id, r] : ended)
    if (r.chat == chat && r.request_id == request_id)
      return r;
  return caf::none;
}

void sim_world::remember_end(reservation r, reservation_status how) {
  if (r.request_id.empty())
    return;
  r.status = how;
  r.ended_at = r.created_at;
  ended[r.id] = std::move(r);
}

caf::error sim_world::explain_missing(chat_id chat, reservation_id id) const {
  if (auto i = reservations.find(id); i != reservations.end())
    return err(ec::invalid_argument, "another chat's reservation");
  if (auto i = ledger.find(id); i != ledger.end())
    return i->second.chat == chat
             ? err(ec::invalid_state, "already committed")
             : err(ec::invalid_argument, "another chat's reservation");
  if (auto i = released.find(id); i != released.end())
    return i->second == chat ? err(ec::expired, "released")
                             : err(ec::invalid_argument, "another chat's");
  if (auto i = uncertain.find(id); i != uncertain.end())
    return i->second.chat == chat ? err(ec::invalid_state, "resolve it")
                                  : err(ec::invalid_argument, "another chat's");
  if (auto i = resolved.find(id); i != resolved.end()) {
    if (i->second.chat != chat)
      return err(ec::invalid_argument, "another chat's");
    return i->second.outcome == "released"
             ? err(ec::expired, "released unresolved")
             : err(ec::not_found, "resolved failed");
  }
  if (auto i = ended.find(id); i != ended.end())
    return i->second.chat == chat ? err(ec::not_found, "ended")
                                  : err(ec::invalid_argument, "another chat's");
  if (chats.count(chat) == 0)
    return err(ec::not_found, "unknown chat");
  return err(ec::not_found, "gone");
}

bool sim_world::due(const reservation& r, caf::timestamp now) const {
  return r.created_at < now - sweep_timeout
         || (r.lease_expires_at && *r.lease_expires_at < now);
}

caf::timestamp sim_world::deadline(const reservation& r) const {
  auto age_limit = r.created_at + sweep_timeout;
  return r.lease_expires_at ? std::min(age_limit, *r.lease_expires_at)
                            : age_limit;
}

caf::expected<chat_status> sim_world::create(const chat_spec& spec,
                                             caf::timestamp now) {
  if (chats.count(spec.chat) != 0)
    return err(ec::already_exists, "exists");
  sim_chat c;
  c.available = spec.initial;
  c.premium_until = spec.premium_until;
  c.max_active_jobs = spec.max_active_jobs;
  chats[spec.chat] = c;
  opened_with[{spec.chat, 0}] = daily_part(spec.initial);
  record(spec.chat, "admin", spec.initial);
  // The opening balance is an admin grant that never expires
  // (chargeonce_grant_balance).
  grant_balance(spec.chat, spec.initial.get(pocket::balance), now);
  return status(spec.chat, now);
}

void sim_world::record(chat_id chat, const char* entry, pockets change,
                       reservation_id id, std::vector<sim_grant_part> parts) {
  const auto& c = chats[chat];
  history.push_back({chat, entry, std::move(change), c.available, id,
                     std::move(parts), c.window});
}

void sim_world::record_charge(chat_id chat, reservation_id id,
                              const pockets& taken,
                              std::vector<sim_grant_part> parts) {
  pockets change;
  change -= taken;
  record(chat, "charge", change, id, std::move(parts));
}

pockets sim_world::pay(chat_id chat, int64_t taken_in, const pockets& nominal,
                       pockets& taken) {
  auto& c = chats[chat];
  // == GREATEST(0, p - held) per pocket
  if (taken_in == c.window || mutant == sim_mutant::paid_by_new_window) {
    taken = take_clamped(c.available, nominal);
    return taken;
  }
  // The refill threw away the old window's units that held it: they paid,
  // and the new window's pockets give nothing for it.
  taken = take_clamped(c.available, in_window(nominal, taken_in, c.window));
  auto charged = nominal;
  if (nominal.get(pocket::balance) != 0)
    charged.set(pocket::balance, taken.get(pocket::balance));
  return charged;
}

pockets sim_world::holds_on(const std::vector<reservation>& holding,
                            int64_t window) const {
  if (mutant != sim_mutant::paid_by_new_window)
    return held_by(holding, window);
  pockets out; // the bug: every hold counts whole, whichever window
  for (const auto& r : holding)
    out += r.held;
  return out;
}

caf::expected<reservation> sim_world::reserve(chat_id chat, kind k,
                                              const std::string& request_id,
                                              caf::timestamp now,
                                              int32_t units) {
  auto c = chats.find(chat);
  if (c == chats.end())
    return err(ec::not_found, "unknown chat");
  // An expired grant pays nothing new: its credits leave the balance
  // before the decision reads it.
  if (mutant != sim_mutant::hold_skips_expiry)
    expire_if_due(chat, now);
  if (auto replay = find_request(chat, request_id)) {
    if (replay->kind != k)
      return err(ec::invalid_argument, "request_id of another kind");
    return *replay;
  }
  if (c->second.banned)
    return err(ec::chat_banned, "banned");
  if (c->second.blocked)
    return err(ec::chat_blocked, "blocked");
  bool premium = c->second.premium_until && *c->second.premium_until > now;
  auto limit = job_limit(c->second, now);
  if (limit > 1 && (request_id.empty() || is_auto_request_id(request_id)))
    return err(ec::invalid_argument, "needs a request_id");
  const auto* spec = products.find_kind(k.name());
  if (spec == nullptr)
    return err(ec::invalid_argument, "unknown kind " + k.name());
  pocket_choice choice;
  // What the pockets cannot pay even with nothing held is refused before
  // busy, as in 0.1.0.
  if (auto code = choose_pockets(*spec, premium, c->second.available,
                                 std::max(units, 1), choice);
      code != ec::none)
    return err(code, "cannot pay");
  auto active = active_in(chat);
  // The slot index: the lowest free slot below the limit, while fewer are
  // active than the limit.
  auto allowed = mutant == sim_mutant::limit_ignored ? limit + 1 : limit;
  int32_t slot = -1;
  if (static_cast<int32_t>(active.size()) < allowed)
    for (int32_t s = 0; s < allowed && slot < 0; ++s)
      if (std::none_of(active.begin(), active.end(),
                       [&](const reservation& r) { return r.slot == s; }))
        slot = s;
  if (slot < 0 && mutant != sim_mutant::no_unique_index)
    return err(ec::busy, "every slot taken");
  auto holding = active;
  auto open = uncertain_in(chat);
  holding.insert(holding.end(), open.begin(), open.end());
  // Past windows' holds weigh on the balance only: their daily part was
  // paid by pockets a refill has since thrown away.
  const auto window = c->second.window;
  auto held = holds_on(holding, window);
  auto left = mutant == sim_mutant::reserve_ignores_holds
                ? c->second.available // the bug: other holds not counted
                : left_after(c->second.available, held);
  if (auto code =
        choose_pockets(*spec, premium, left, std::max(units, 1), choice);
      code != ec::none)
    return err(code, "cannot pay");
  reservation r;
  r.id = ++next_id;
  r.chat = chat;
  r.kind = k;
  r.queue = choice.queue;
  r.held = choice.held;
  r.units = std::max(units, 1);
  r.held_units = choice.held_units;
  r.request_id = request_id;
  r.created_at = now;
  r.slot = std::max(slot, 0);
  r.window = window;
  // Balance is the one pocket that spans grants: the hold records which.
  std::vector<sim_grant_seen> seen;
  std::vector<sim_grant_part> parts;
  if (auto n = r.held.get(pocket::balance); n > 0)
    parts = hold_grants(chat, n, now, seen);
  if (!parts.empty())
    holds_on_grants[r.id] = {chat, parts};
  reservations[r.id] = r;
  held_of[r.id] = r.held;
  units_of[r.id] = {r.units, r.held_units};
  holding.push_back(r);
  made_with[r.id] = {
    chat, c->second.available, held_by(holding, window), limit, window,
    now,  std::move(seen),     std::move(parts)};
  if (!request_id.empty())
    named[{chat, request_id}].insert(r.id);
  return r;
}

caf::error sim_world::claim(const char* op, chat_id chat, reservation_id id,
                            const std::string& who) {
  if (who.empty())
    return caf::none;
  auto i = reservations.find(id);
  if (i == reservations.end() || i->second.chat != chat)
    return caf::none; // the operation says what became of it
  if (i->second.status == reservation_status::queued) {
    if (std::string{op} == "start")
      worker_of[id] = who;
    return caf::none;
  }
  if (worker_of[id] == who || mutant == sim_mutant::second_worker_starts)
    return caf::none;
  return err(ec::already_started, "started by another worker");
}

caf::expected<reservation> sim_world::start(chat_id chat, reservation_id id,
                                            const std::string& who) {
  if (auto refused = claim("start", chat, id, who))
    return refused;
  auto i = reservations.find(id);
  if (i == reservations.end() || i->second.chat != chat)
    return explain_missing(chat, id);
  if (i->second.status == reservation_status::queued)
    started_applied.insert(id);
  i->second.status = reservation_status::in_progress;
  return i->second;
}

caf::expected<reservation> sim_world::heartbeat(chat_id chat, reservation_id id,
                                                caf::timestamp now,
                                                const std::string& who) {
  if (auto refused = claim("heartbeat", chat, id, who))
    return refused;
  auto i = reservations.find(id);
  if (i == reservations.end() || i->second.chat != chat)
    return explain_missing(chat, id);
  if (i->second.status != reservation_status::in_progress)
    return err(ec::invalid_state, "never started");
  i->second.lease_expires_at = now + lease_duration;
  return i->second;
}

caf::expected<receipt> sim_world::commit(chat_id chat, reservation_id id,
                                         caf::timestamp now, int32_t units,
                                         const std::string& who) {
  auto c = chats.find(chat);
  if (c == chats.end())
    return err(ec::not_found, "unknown chat");
  if (auto refused = claim("commit", chat, id, who))
    return refused;
  expire_if_due(chat, now);
  auto& p = c->second.available;
  if (auto l = ledger.find(id); l != ledger.end() && l->second.chat == chat) {
    if (mutant == sim_mutant::commit_not_idempotent)
      take_clamped(p, held_of[id]); // the bug: the retry pays again
    return l->second;
  }
  pockets taken;
  if (mutant == sim_mutant::charge_released && released.count(id) != 0
      && released[id] == chat) { // the bug: no fencing by the release
    auto window = made_with[id].window;
    receipt x{id, chat, kind::image, pay(chat, window, held_of[id], taken),
              now};
    x.window = window;
    ledger[id] = x;
    record_charge(chat, id, taken);
    return x;
  }
  if (auto e = ended.find(id);
      e != ended.end() && e->second.chat == chat
      && e->second.status == reservation_status::cancelled
      && mutant == sim_mutant::cancelled_job_committable) {
    // the bug: what a cancel deleted can still be committed
    const auto& r = e->second;
    receipt x{id, chat, r.kind, pay(chat, r.window, r.held, taken), now};
    x.window = r.window;
    ledger[id] = x;
    record_charge(chat, id, taken);
    charged_by[id] = "commit";
    return x;
  }
  if (auto u = uncertain.find(id);
      u != uncertain.end() && u->second.chat == chat
      && mutant == sim_mutant::commit_of_uncertain) {
    // the bug: the stale commit is not fenced off by `uncertain`
    const auto& r = u->second;
    std::vector<sim_grant_part> parts;
    auto charge = charge_grants(chat, id, r.held, now, parts);
    receipt x{id, chat, r.kind, pay(chat, r.window, charge, taken), now};
    x.units = r.units;
    x.window = r.window;
    ledger[id] = x;
    record_charge(chat, id, taken, std::move(parts));
    charged_by[id] = "commit";
    remember_end(u->second, reservation_status::committed);
    uncertain.erase(u);
    return x;
  }
  auto i = reservations.find(id);
  if (i == reservations.end() || i->second.chat != chat)
    return explain_missing(chat, id);
  if (i->second.status != reservation_status::in_progress)
    return err(ec::invalid_state, "never started");
  const auto& r = i->second;
  auto nominal = captured(r.held, r.held_units, r.units, units);
  if (units > r.units && mutant == sim_mutant::commit_units_unchecked) {
    // the bug: the extra units at the kind's last pocket's price
    const auto& last = products.find_kind(r.kind.name())->pay_from.back();
    nominal.add(last.pocket, (units - r.units) * last.price);
  } else if (units > r.units) {
    return err(ec::invalid_argument, "more units than held");
  }
  if (mutant == sim_mutant::partial_commit_balance_first && units > 0
      && units < r.units) { // the bug: balance first, then the rest
    nominal = {};
    int32_t left = units;
    auto take = [&](const std::string& name, int32_t n) {
      auto t = std::min(left, n);
      if (t > 0)
        nominal.set(name, r.held.get(name) / n * t);
      left -= t;
    };
    take(pocket::balance, r.held_units.get(pocket::balance));
    for (const auto& [name, n] : r.held_units.items())
      if (name != pocket::balance)
        take(name, n);
  }
  std::vector<sim_grant_part> parts;
  auto charge = charge_grants(chat, id, nominal, now, parts);
  receipt x{id, chat, r.kind, pay(chat, r.window, charge, taken), now};
  x.units = units == 0 ? r.units : units;
  x.window = r.window;
  auto released = r.held;
  released -= nominal;
  x.released = without_zeros(released);
  if (mutant == sim_mutant::charged_from_balance) { // the bug: undo, misbook
    p += taken;
    pockets from_balance;
    for (const auto& [name, amount] : taken.items())
      from_balance.add(pocket::balance, amount);
    take_clamped(p, from_balance);
  }
  ledger[id] = x;
  record_charge(chat, id, taken, std::move(parts));
  charged_by[id] = "commit";
  remember_end(i->second, reservation_status::committed);
  reservations.erase(i);
  return x;
}

caf::expected<reservation>
sim_world::uncertain_of(chat_id chat, reservation_id id,
                        const std::string& provider_ref, caf::timestamp now,
                        const std::string& who) {
  if (auto refused = claim("uncertain", chat, id, who))
    return refused;
  if (auto u = uncertain.find(id);
      u != uncertain.end() && u->second.chat == chat) {
    if (u->second.provider_ref != provider_ref)
      return err(ec::invalid_argument, "another provider_ref");
    return u->second;
  }
  auto i = reservations.find(id);
  if (i == reservations.end() || i->second.chat != chat)
    return explain_missing(chat, id);
  if (i->second.status != reservation_status::in_progress)
    return err(ec::invalid_state, "never started");
  auto r = i->second;
  reservations.erase(i);
  r.status = reservation_status::outcome_unknown;
  r.slot = -1;
  r.lease_expires_at = caf::none;
  r.provider_ref = provider_ref;
  r.uncertain_at = now;
  uncertain[id] = r;
  uncertain_applied.insert(id);
  announce("reconcile_needed", chat, id, provider_ref);
  return r;
}

caf::expected<resolution> sim_world::resolve(chat_id chat, reservation_id id,
                                             const std::string& outcome,
                                             int32_t units,
                                             caf::timestamp now) {
  auto c = chats.find(chat);
  if (c == chats.end())
    return err(ec::not_found, "unknown chat");
  // Expired first, while the hold still counts as held (as commit).
  expire_if_due(chat, now);
  if (auto d = resolved.find(id); d != resolved.end()) {
    if (d->second.chat != chat)
      return err(ec::invalid_argument, "another chat's");
    if (d->second.outcome == "released")
      return err(ec::expired, "released unresolved");
    if (d->second.outcome != outcome)
      return err(ec::invalid_state, "resolved otherwise");
    return d->second;
  }
  auto u = uncertain.find(id);
  if (u == uncertain.end() || u->second.chat != chat) {
    if (auto i = reservations.find(id);
        i != reservations.end() && i->second.chat == chat)
      return err(ec::invalid_state, "not uncertain");
    return explain_missing(chat, id);
  }
  const auto& r = u->second;
  resolution x{id, chat, r.kind, outcome, {}, r.held, 0, now, r.provider_ref};
  x.window = r.window;
  if (outcome == "succeeded") {
    if (units > r.units)
      return err(ec::invalid_argument, "more units than held");
    auto nominal = captured(r.held, r.held_units, r.units, units);
    pockets taken;
    std::vector<sim_grant_part> parts;
    auto charge = charge_grants(chat, id, nominal, now, parts);
    x.charged = pay(chat, r.window, charge, taken);
    auto rest = r.held;
    rest -= nominal;
    x.released = without_zeros(rest);
    x.units = units == 0 ? r.units : units;
    receipt l{id, chat, r.kind, x.charged, now};
    l.units = x.units;
    l.released = x.released;
    l.window = r.window;
    ledger[id] = l;
    record_charge(chat, id, taken, std::move(parts));
    charged_by[id] = "resolve";
  } else {
    settle_hold(chat, id, 0, now);
  }
  remember_end(r, outcome == "succeeded" ? reservation_status::committed
                                         : reservation_status::failed);
  resolved[id] = x;
  uncertain.erase(u);
  return x;
}

active_count sim_world::count_active(caf::timestamp now) const {
  active_count out;
  for (const auto& [id, r] : reservations) {
    auto c = chats.find(r.chat);
    auto premium = c != chats.end() && c->second.premium_until
                   && *c->second.premium_until > now;
    ++(premium ? out.premium : out.free);
  }
  return out;
}

unresolved_page sim_world::unresolved(reservation_id after,
                                      uint32_t limit) const {
  unresolved_page out;
  for (auto i = uncertain.upper_bound(after);
       i != uncertain.end() && out.jobs.size() < limit; ++i)
    out.jobs.push_back(i->second);
  return out;
}

void sim_world::charge_again(chat_id chat, reservation_id id) {
  auto& p = chats[chat].available;
  const auto& h = held_of[id];
  take_clamped(p, h);
}

caf::expected<reservation> sim_world::fail(chat_id chat, reservation_id id,
                                           const std::string& who,
                                           caf::timestamp now) {
  if (auto refused = claim("fail", chat, id, who))
    return refused;
  auto i = reservations.find(id);
  if (i == reservations.end() || i->second.chat != chat)
    return explain_missing(chat, id);
  if (holds_grants(id))
    expire_if_due(chat, now);
  auto r = i->second;
  reservations.erase(i);
  settle_hold(chat, id, 0, now);
  failed_applied.insert(id);
  remember_end(r, reservation_status::failed);
  return r;
}

caf::expected<reservation> sim_world::cancel(chat_id chat, caf::timestamp now) {
  return cancel(chat, 0, {}, now);
}

caf::expected<reservation> sim_world::cancel(chat_id chat, reservation_id id,
                                             const std::string& request_id,
                                             caf::timestamp now) {
  if (id == 0 && !request_id.empty()) {
    auto job = find_request(chat, request_id);
    if (!job)
      return err(ec::not_found,
                 chats.count(chat) ? "no such request" : "unknown chat");
    id = job->id;
  } else if (id == 0) {
    auto active = active_in(chat);
    if (active.size() > 1)
      return err(ec::invalid_argument, "several active: name one");
    if (active.empty())
      return err(ec::not_found,
                 chats.count(chat) ? "no reservation" : "unknown chat");
    id = active.front().id;
  }
  auto i = reservations.find(id);
  if (i == reservations.end() || i->second.chat != chat)
    return explain_missing(chat, id);
  if (i->second.status != reservation_status::queued
      && mutant != sim_mutant::cancel_in_progress) {
    const auto* spec = products.find_kind(to_string(i->second.kind));
    if (spec == nullptr || spec->cancel_after_start != cancel_policy::request)
      return err(ec::too_late, "in progress");
    // Announced once, when the mark is set (a repeated cancel changes
    // nothing).
    if (!i->second.cancel_requested)
      announce("cancel_requested", chat, id, "");
    i->second.cancel_requested = true;
    cancel_requested_applied.insert(id);
    auto answer = i->second;
    if (mutant == sim_mutant::cancel_request_acks_cancelled) {
      answer.status = reservation_status::queued; // the lie
      answer.cancel_requested = false;
    }
    return answer;
  }
  if (i->second.status == reservation_status::queued && holds_grants(id))
    expire_if_due(chat, now);
  auto r = i->second;
  reservations.erase(i);
  settle_hold(chat, r.id, 0, now);
  cancelled_applied.insert(r.id);
  remember_end(r, reservation_status::cancelled);
  return r;
}

caf::expected<chat_status> sim_world::status(chat_id chat, caf::timestamp now) {
  auto c = chats.find(chat);
  if (c == chats.end())
    return err(ec::not_found, "unknown chat");
  chat_status st;
  st.chat = chat;
  st.amounts = c->second.available;
  st.premium_until = c->second.premium_until;
  st.premium = st.premium_until && *st.premium_until > now;
  st.started = c->second.started;
  st.blocked = c->second.blocked;
  st.banned = c->second.banned;
  st.reservations = active_in(chat);
  if (!st.reservations.empty())
    st.active = st.reservations.front();
  auto open = uncertain_in(chat);
  st.reservations.insert(st.reservations.end(), open.begin(), open.end());
  st.window = c->second.window;
  st.held = holds_on(st.reservations, st.window);
  st.own_max_active_jobs = c->second.max_active_jobs;
  st.max_active_jobs = job_limit(c->second, now);
  st.window_started_at = c->second.window_started_at;
  st.last_activity_at = c->second.last_activity_at;
  return st;
}

void sim_world::refill(chat_id chat, sim_chat& c, caf::timestamp now) {
  bool premium = c.premium_until && *c.premium_until > now;
  ++refills;
  // A new window: its daily pockets open at quota, and the holds of the
  // windows before it no longer weigh on them.
  ++c.window;
  auto& delta = refilled[chat];
  auto quotas = products.daily_quotas(premium);
  pockets change;
  for (const auto& [name, quota] : quotas.items()) {
    if (quota != c.available.get(name))
      change.set(name, quota - c.available.get(name));
    c.available.set(name, quota);
  }
  opened_with[{chat, c.window}] = daily_part(c.available);
  delta += change;
  // A refill that changed nothing writes no row, as in the store.
  if (!change.items().empty() && mutant != sim_mutant::refill_unrecorded)
    record(chat, "refill", change);
}

caf::expected<chat_status> sim_world::touch(chat_id chat, caf::timestamp now) {
  auto i = chats.find(chat);
  if (i == chats.end()) { // a new chat: the free plan, its window open
    sim_chat c;
    c.available = products.daily_quotas(false);
    c.window_started_at = now;
    c.last_activity_at = now;
    chats[chat] = c;
    opened_with[{chat, 0}] = daily_part(c.available);
    record(chat, "refill", c.available);
    return status(chat, now);
  }
  auto& c = i->second;
  c.last_activity_at = now;
  switch (on_activity(c.window_started_at, now, refill_interval)) {
  case window_action::none:
    break;
  case window_action::open:
    c.window_started_at = now;
    break;
  case window_action::refill:
    c.window_started_at = now;
    refill(chat, c, now);
    break;
  }
  return status(chat, now);
}

caf::expected<reservation_released>
sim_world::release(chat_id chat, reservation_id id, caf::timestamp now) {
  if (auto u = uncertain.find(id); u != uncertain.end()) {
    // Its hold may leave the balance: what was due expires first, while
    // the hold still counts.
    if (u->second.chat == chat && holds_grants(id))
      expire_if_due(chat, now);
    if (u->second.chat != chat
        || !(*u->second.uncertain_at < now - reconcile_timeout))
      return err(ec::not_found, "not past its deadline");
    resolution x{id,         chat, u->second.kind,
                 "released", {},   u->second.held,
                 0,          now,  u->second.provider_ref};
    x.window = u->second.window;
    resolved[id] = x;
    remember_end(u->second, reservation_status::released);
    uncertain.erase(u);
    settle_hold(chat, id, 0, now);
    announce("reservation_released", chat, id, "unresolved");
    return reservation_released{chat, id, "unresolved"};
  }
  auto i = reservations.find(id);
  if (i != reservations.end() && i->second.chat == chat && holds_grants(id))
    expire_if_due(chat, now);
  if (i == reservations.end() || i->second.chat != chat || !due(i->second, now))
    return err(ec::not_found, "not past its deadline");
  auto lease_lapsed =
    i->second.lease_expires_at && *i->second.lease_expires_at < now;
  remember_end(i->second, reservation_status::released);
  reservations.erase(i);
  settle_hold(chat, id, 0, now);
  released[id] = chat;
  std::string reason = lease_lapsed ? "lease_expired" : "sweep_timeout";
  if (!(lease_lapsed && mutant == sim_mutant::event_lost))
    announce("reservation_released", chat, id, reason);
  return reservation_released{chat, id, reason};
}

std::vector<sweep_candidate> sim_world::sweep(const sweep_cursor& after,
                                              uint32_t limit,
                                              caf::timestamp now) {
  std::vector<sweep_candidate> out;
  if (after.phase == sweep_phase::unresolved) {
    if (mutant == sim_mutant::unresolved_never_released)
      return out; // the bug: nobody looks for them
    for (const auto& [id, r] : uncertain) {
      auto at_us = micros(*r.uncertain_at);
      if (*r.uncertain_at < now - reconcile_timeout
          && std::tie(at_us, id) > std::tie(after.at_us, after.reservation))
        out.push_back({r.chat, sweep_cursor{after.phase, at_us, id}});
    }
    std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) {
      return std::tie(x.cursor.at_us, x.cursor.reservation)
             < std::tie(y.cursor.at_us, y.cursor.reservation);
    });
    if (out.size() > limit)
      out.resize(limit);
    return out;
  }
  bool lease = after.phase == sweep_phase::lease;
  if (lease && mutant == sim_mutant::sweep_blind)
    return out; // the bug: lapsed leases wait for the age limit
  for (const auto& [id, r] : reservations) {
    if (lease ? !(r.lease_expires_at && *r.lease_expires_at < now)
              : !(r.created_at < now - sweep_timeout))
      continue;
    auto at_us = micros(lease ? *r.lease_expires_at : r.created_at);
    if (std::tie(at_us, id) > std::tie(after.at_us, after.reservation))
      out.push_back({r.chat, sweep_cursor{after.phase, at_us, id}});
  }
  std::sort(out.begin(), out.end(), [](const auto& x, const auto& y) {
    return std::tie(x.cursor.at_us, x.cursor.reservation)
           < std::tie(y.cursor.at_us, y.cursor.reservation);
  });
  if (out.size() > limit)
    out.resize(limit);
  return out;
}

caf::expected<chat_status>
sim_world::set_premium(chat_id chat, caf::timestamp until, caf::timestamp now) {
  auto c = chats.find(chat);
  if (c == chats.end())
    return err(ec::not_found, "unknown chat");
  c->second.premium_until = until;
  record(chat, "admin", {}); // the plan changed, no amount did
  return status(chat, now);
}

caf::expected<chat_status>
sim_world::set_flags(chat_id chat, const flags_update& x, caf::timestamp now) {
  auto c = chats.find(chat);
  if (c == chats.end())
    return err(ec::not_found, "unknown chat");
  if (x.started)
    c->second.started = *x.started;
  if (x.blocked)
    c->second.blocked = *x.blocked;
  if (x.banned)
    c->second.banned = *x.banned;
  return status(chat, now);
}

reactivation_page sim_world::reactivate(const reactivation_cursor& after,
                                        uint32_t limit, caf::timestamp now) {
  std::vector<std::pair<reactivation_cursor, chat_id>> due_chats;
  for (const auto& [id, c] : chats) {
    if (!c.started || c.blocked || c.banned || !c.last_activity_at
        || (c.reactivated_at && *c.reactivated_at >= *c.last_activity_at)
        || !(*c.last_activity_at < now - reactivation_after))
      continue;
    reactivation_cursor at{micros(*c.last_activity_at), id};
    if (std::tie(at.at_us, at.chat) > std::tie(after.at_us, after.chat))
      due_chats.emplace_back(at, id);
  }
  std::sort(due_chats.begin(), due_chats.end(),
            [](const auto& x, const auto& y) {
              return std::tie(x.first.at_us, x.first.chat)
                     < std::tie(y.first.at_us, y.first.chat);
            });
  if (due_chats.size() > limit)
    due_chats.resize(limit);
  reactivation_page page;
  page.next = after;
  page.more = due_chats.size() == limit;
  for (const auto& [at, id] : due_chats) {
    auto& c = chats[id];
    c.reactivated_at = now;
    c.window_started_at = caf::none;
    refill(id, c, now);
    announce("limits_refilled", id, 0, "");
    page.chats.push_back(id);
    page.next = at;
  }
  return page;
}

event_page sim_world::events_after(event_id after, uint32_t limit) const {
  event_page page;
  page.last_id = static_cast<event_id>(events.size());
  if (mutant == sim_mutant::event_skipped_by_reader && limit > 0)
    ++after;
  for (auto i = std::max<event_id>(after, 0);
       i < page.last_id && page.events.size() < limit; ++i)
    page.events.push_back(events[static_cast<size_t>(i)]);
  return page;
}

void sim_world::announce(const char* event, chat_id chat, reservation_id id,
                         std::string detail) {
  events.push_back({static_cast<event_id>(events.size()) + 1, event, chat, id,
                    std::move(detail)});
}

} // namespace chargeonce::test
