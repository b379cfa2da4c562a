// SPDX-License-Identifier: Apache-2.0
#include "tests/actors/sim_world.hpp"

#include "protocol/errors.hpp"
#include "protocol/pockets.hpp"

#include <algorithm>
#include <tuple>

namespace chargeonce::test {

namespace {

caf::error err(ec code, const std::string& what) {
  return caf::make_error(code, what);
}

} // namespace

caf::optional<reservation> sim_world::active_of(chat_id chat) const {
  for (const auto& [id, r] : reservations)
    if (r.chat == chat)
      return r;
  return caf::none;
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
  if (chats.count(chat) == 0)
    return err(ec::not_found, "unknown chat");
  return err(ec::not_found, "gone");
}

bool sim_world::due(const reservation& r, caf::timestamp now) const {
  return r.created_at < now - sweep_timeout
         || (r.lease_expires_at && *r.lease_expires_at < now);
}

caf::expected<chat_status> sim_world::create(const chat_spec& spec,
                                             caf::timestamp now) {
  if (chats.count(spec.chat) != 0)
    return err(ec::already_exists, "exists");
  chats[spec.chat] = sim_chat{spec.initial, spec.premium_until, false, false};
  return status(spec.chat, now);
}

caf::expected<reservation> sim_world::reserve(chat_id chat, kind k,
                                              const std::string& request_id,
                                              caf::timestamp now) {
  auto c = chats.find(chat);
  if (c == chats.end())
    return err(ec::not_found, "unknown chat");
  auto active = active_of(chat);
  if (active && !request_id.empty() && active->request_id == request_id
      && active->kind == k)
    return *active;
  if (c->second.banned)
    return err(ec::chat_banned, "banned");
  if (c->second.blocked)
    return err(ec::chat_blocked, "blocked");
  bool premium = c->second.premium_until && *c->second.premium_until > now;
  pocket_choice choice;
  if (auto code = choose_pockets(k, premium, c->second.available, choice);
      code != ec::none)
    return err(code, "cannot pay");
  if (active) // the unique index
    return err(ec::busy, "active reservation");
  reservation r;
  r.id = ++next_id;
  r.chat = chat;
  r.kind = k;
  r.queue = choice.queue;
  r.held = choice.held;
  r.request_id = request_id;
  r.created_at = now;
  reservations[r.id] = r;
  return r;
}

caf::expected<reservation> sim_world::start(chat_id chat, reservation_id id) {
  auto i = reservations.find(id);
  if (i == reservations.end() || i->second.chat != chat)
    return explain_missing(chat, id);
  i->second.status = reservation_status::in_progress;
  return i->second;
}

caf::expected<reservation> sim_world::heartbeat(chat_id chat, reservation_id id,
                                                caf::timestamp now) {
  auto i = reservations.find(id);
  if (i == reservations.end() || i->second.chat != chat)
    return explain_missing(chat, id);
  if (i->second.status != reservation_status::in_progress)
    return err(ec::invalid_state, "never started");
  i->second.lease_expires_at = now + lease_duration;
  return i->second;
}

caf::expected<receipt> sim_world::commit(chat_id chat, reservation_id id,
                                         caf::timestamp now) {
  auto c = chats.find(chat);
  if (c == chats.end())
    return err(ec::not_found, "unknown chat");
  if (auto l = ledger.find(id); l != ledger.end() && l->second.chat == chat)
    return l->second;
  auto i = reservations.find(id);
  if (i == reservations.end() || i->second.chat != chat)
    return explain_missing(chat, id);
  if (i->second.status != reservation_status::in_progress)
    return err(ec::invalid_state, "never started");
  auto& p = c->second.available;
  const auto& h = i->second.held;
  pockets charged{std::min(h.daily_messages, p.daily_messages),
                  std::min(h.daily_images, p.daily_images),
                  std::min(h.balance, p.balance)};
  p.daily_messages -= charged.daily_messages; // == GREATEST(0, p - held)
  p.daily_images -= charged.daily_images;
  p.balance -= charged.balance;
  receipt x{id, chat, i->second.kind, charged, now};
  ledger[id] = x;
  reservations.erase(i);
  return x;
}

caf::expected<reservation> sim_world::fail(chat_id chat, reservation_id id) {
  auto i = reservations.find(id);
  if (i == reservations.end() || i->second.chat != chat)
    return explain_missing(chat, id);
  auto r = i->second;
  reservations.erase(i);
  return r;
}

caf::expected<reservation> sim_world::cancel(chat_id chat) {
  auto active = active_of(chat);
  if (active && active->status == reservation_status::queued) {
    reservations.erase(active->id);
    return *active;
  }
  if (active)
    return err(ec::too_late, "in progress");
  return err(ec::not_found,
             chats.count(chat) ? "no reservation" : "unknown chat");
}

caf::expected<chat_status> sim_world::status(chat_id chat, caf::timestamp now) {
  auto c = chats.find(chat);
  if (c == chats.end())
    return err(ec::not_found, "unknown chat");
  chat_status st;
  st.chat = chat;
  st.available = c->second.available;
  st.premium_until = c->second.premium_until;
  st.premium = st.premium_until && *st.premium_until > now;
  st.blocked = c->second.blocked;
  st.banned = c->second.banned;
  st.active = active_of(chat);
  return st;
}

caf::expected<reservation_released>
sim_world::release(chat_id chat, reservation_id id, caf::timestamp now) {
  auto i = reservations.find(id);
  if (i == reservations.end() || i->second.chat != chat || !due(i->second, now))
    return err(ec::not_found, "not past its deadline");
  auto lease_lapsed =
    i->second.lease_expires_at && *i->second.lease_expires_at < now;
  reservations.erase(i);
  released[id] = chat;
  return reservation_released{chat, id,
                              lease_lapsed ? "lease_expired" : "sweep_timeout"};
}

std::vector<sweep_candidate> sim_world::sweep(const sweep_cursor& after,
                                              uint32_t limit,
                                              caf::timestamp now) {
  std::vector<sweep_candidate> out;
  for (const auto& [id, r] : reservations) {
    bool lease = after.phase == sweep_phase::lease;
    if (lease ? !(r.lease_expires_at && *r.lease_expires_at < now)
              : !(r.created_at < now - sweep_timeout))
      continue;
    auto at = lease ? *r.lease_expires_at : r.created_at;
    auto at_us = std::chrono::duration_cast<std::chrono::microseconds>(
                   at.time_since_epoch())
                   .count();
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

caf::expected<top_up_receipt> sim_world::top_up(chat_id chat, int64_t credits,
                                                const std::string& payment_id,
                                                caf::timestamp now) {
  auto c = chats.find(chat);
  if (c == chats.end())
    return err(ec::not_found, "unknown chat");
  if (auto p = purchases.find(payment_id); p != purchases.end()) {
    if (p->second.chat != chat || p->second.credits != credits)
      return err(ec::invalid_argument, "payment_id reused");
    return p->second;
  }
  c->second.available.balance += static_cast<int32_t>(credits);
  top_up_receipt x{chat, payment_id, static_cast<int32_t>(credits), now};
  purchases[payment_id] = x;
  return x;
}

} // namespace chargeonce::test
