// SPDX-License-Identifier: Apache-2.0
#include "actors/registry_actor.hpp"

#include "actors/log_handlers.hpp"
#include "actors/metrics/recording.hpp"
#include "protocol/validation.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

namespace chargeonce {

namespace {

using self_ptr = registry_actor::stateful_pointer<registry_state>;

/// The chat's actor, spawned on first use; counts what is routed to it so a
/// passivation request can tell whether a message is still in flight.
chat_self_actor route(self_ptr self, chat_id chat) {
  auto& st = self->state;
  auto i = st.chats.find(chat);
  if (i == st.chats.end()) {
    // Monitored, not linked: an exit with reason `kill` cannot be
    // intercepted in CAF 0.17, so a link would let one killed chat actor
    // take down the registry. The registry stops its chats itself.
    auto handle = self->spawn<caf::monitored>(
      make_chat, chat, st.pool[partition_of(chat, st.pool.size())],
      caf::actor_cast<registry_actor>(self), st.events, st.notice_timer,
      st.options);
    // The gauge follows the actor's real lifetime, whatever ends it.
    metrics::chat_actor_started();
    caf::actor_cast<caf::abstract_actor*>(handle)->attach_functor(
      [] { metrics::chat_actor_stopped(); });
    i = st.chats.emplace(chat, registry_state::entry{handle, 0}).first;
    st.by_address.emplace(handle.address(), chat);
  }
  ++i->second.routed;
  return i->second.handle;
}

/// Passivates the sender if nothing was routed to it since it reported idle:
/// then no message can be lost, and a new actor for the chat never runs
/// beside the old one.
void passivate(self_ptr self, chat_id chat, uint64_t received) {
  auto i = self->state.chats.find(chat);
  const auto& sender = self->current_sender();
  if (i == self->state.chats.end() || sender == nullptr
      || i->second.handle.address() != sender->address())
    return; // stale report from an actor already replaced
  if (i->second.routed != received)
    return; // a message is on its way; the actor re-arms its timer
  self->send(i->second.handle, atom::stop_v);
  self->state.chats.erase(i);
  metrics::count_passivation();
}

/// A restarted persistence actor replaces its predecessor for new chat
/// actors and for the live ones of its partition. Not counted as routed:
/// chat actors do not count it as received either.
void replace_store(self_ptr self, uint64_t index,
                   const persistence_actor& store) {
  auto& st = self->state;
  if (index >= st.pool.size())
    return;
  st.pool[index] = store;
  for (auto& [chat, e] : st.chats)
    if (partition_of(chat, st.pool.size()) == index)
      self->send(e.handle, atom::store_v, store);
  spdlog::info("persistence replaced partition={}", index);
}

/// A chat actor ended: passivated (already forgotten), or failed or killed
/// (forgotten now; the next operation spawns a fresh one).
void on_down(self_ptr self, caf::down_msg& msg) {
  auto& st = self->state;
  auto j = st.by_address.find(msg.source);
  if (j == st.by_address.end())
    return;
  auto chat = j->second;
  st.by_address.erase(j);
  auto i = st.chats.find(chat);
  if (i == st.chats.end() || i->second.handle.address() != msg.source)
    return;
  spdlog::error("chat actor failed chat={} reason={}", chat,
                caf::to_string(msg.reason));
  st.chats.erase(i);
}

/// A shutdown from outside (the supervisor's link): the chats go first.
void on_exit(self_ptr self, caf::exit_msg& msg) {
  if (!msg.reason)
    return;
  for (auto& [chat, e] : self->state.chats)
    self->send_exit(e.handle, msg.reason);
  self->state.chats.clear();
  self->quit(msg.reason);
}

/// The persistence actor of the chat's partition: reads that need no chat
/// actor (the support view) go there directly, on the chat's connection.
const persistence_actor& store_of(self_ptr self, chat_id chat) {
  auto& pool = self->state.pool;
  return pool[partition_of(chat, pool.size())];
}

/// The chat actor answers, unless validation already did: bad input never
/// spawns an actor nor reaches Postgres.
template <class T, class... Ts>
caf::result<T> to_chat(self_ptr self, caf::error invalid, chat_id chat,
                       Ts&&... xs) {
  if (invalid)
    return invalid;
  return self->delegate(route(self, chat), std::forward<Ts>(xs)...);
}

/// A worker's operation naming the worker: its reservation and identity.
caf::error validate_step(chat_id chat, reservation_id id,
                         const std::string& worker) {
  if (auto err = validate_reservation(chat, id))
    return err;
  return validate_worker(worker);
}

/// A worker's operation, naming the worker or not.
caf::error validate_worker_step(const operation& x) {
  return x.worker.empty() ? validate_reservation(x.chat, x.reservation)
                          : validate_step(x.chat, x.reservation, x.worker);
}

/// Units given (not 0) must be 1 or more.
caf::error validate_units_if_given(const operation& x) {
  return x.units == 0 ? caf::error{} : validate_given_units(x.units);
}

/// One of the eight batchable operations, checked as its message would be.
caf::error validate_operation(const operation& x) {
  switch (x.type) {
  case operation_type::touch:
  case operation_type::status:
    return validate_chat(x.chat);
  case operation_type::reserve:
    if (auto err = validate_reserve(x.chat, x.kind, x.request_id))
      return err;
    return validate_units_if_given(x);
  case operation_type::cancel:
    // A bare cancel names no job: the chat's only active one.
    if (x.reservation == 0 && x.request_id.empty())
      return validate_chat(x.chat);
    return validate_cancel(x.chat, x.reservation, x.request_id);
  case operation_type::commit:
    if (auto err = validate_worker_step(x))
      return err;
    return validate_units_if_given(x);
  case operation_type::start:
  case operation_type::heartbeat:
  case operation_type::fail:
    return validate_worker_step(x);
  default:
    return caf::make_error(ec::invalid_argument,
                           std::string{"not an operation of a batch: "}
                             + to_string(x.type));
  }
}

} // namespace

registry_state::~registry_state() {
  // Killed (no exit handler ran): chat actors must not outlive us.
  for (auto& [chat, e] : chats)
    caf::anon_send_exit(e.handle, caf::exit_reason::kill);
}

size_t partition_of(chat_id chat, size_t pool_size) {
  return static_cast<size_t>(static_cast<uint64_t>(chat) % pool_size);
}

registry_actor::behavior_type
make_registry(registry_actor::stateful_pointer<registry_state> self,
              std::vector<persistence_actor> pool, events_actor events,
              chat_options options) {
  install_log_handlers(self);
  self->state.pool = std::move(pool);
  self->state.events = std::move(events);
  self->state.options = options;
  // Linked: it holds no state worth keeping without this registry's chats.
  self->state.notice_timer =
    self->spawn<caf::linked>(make_notice_timer, options.queue_notice_delay);
  self->set_exit_handler([self](caf::exit_msg& msg) { on_exit(self, msg); });
  self->set_down_handler([self](caf::down_msg& msg) { on_down(self, msg); });
  // Every operation: refuse bad input here, else hand it to the chat actor.
  return {
    [self](atom::apply op, operation& x) -> caf::result<outcome> {
      if (auto err = validate_operation(x))
        return err;
      auto chat = x.chat;
      return self->delegate(route(self, chat), op, std::move(x));
    },
    [self](atom::create op, const chat_spec& spec) -> caf::result<chat_status> {
      return to_chat<chat_status>(self, validate_spec(spec), spec.chat, op,
                                  spec);
    },
    [self](atom::uncertain op, chat_id chat, reservation_id id,
           const std::string& provider_ref, const std::string& worker) {
      auto err = validate_uncertain(chat, id, provider_ref);
      if (!err)
        err = validate_worker(worker);
      return to_chat<reservation>(self, err, chat, op, chat, id, provider_ref,
                                  worker);
    },
    [self](atom::release op, chat_id chat, reservation_id id) {
      return to_chat<reservation_released>(self, validate_reservation(chat, id),
                                           chat, op, chat, id);
    },
    [self](atom::top_up op, chat_id chat, int64_t credits,
           const std::string& payment_id, const grant_terms& terms) {
      return to_chat<top_up_receipt>(
        self, validate_top_up(chat, credits, payment_id, terms), chat, op, chat,
        credits, payment_id, terms);
    },
    [self](atom::void_grant op, chat_id chat, int64_t grant,
           const std::string& payment_id) {
      return to_chat<grant_info>(self,
                                 validate_void_grant(chat, grant, payment_id),
                                 chat, op, chat, grant, payment_id);
    },
    [self](atom::premium op, chat_id chat, caf::timestamp until) {
      return to_chat<chat_status>(self, validate_chat(chat), chat, op, chat,
                                  until);
    },
    [self](atom::flags op, chat_id chat, const flags_update& x) {
      return to_chat<chat_status>(self, validate_chat(chat), chat, op, chat, x);
    },
    [self](atom::limits op, chat_id chat, const limits_update& x) {
      auto err = validate_chat(chat);
      if (!err)
        err = validate_limits(x);
      return to_chat<chat_status>(self, err, chat, op, chat, x);
    },
    [self](atom::uncertain op, chat_id chat, reservation_id id,
           const std::string& provider_ref) {
      return to_chat<reservation>(self,
                                  validate_uncertain(chat, id, provider_ref),
                                  chat, op, chat, id, provider_ref);
    },
    [self](atom::resolve op, chat_id chat, reservation_id id,
           const std::string& outcome) {
      return to_chat<resolution>(self, validate_resolve(chat, id, outcome, 0),
                                 chat, op, chat, id, outcome, int32_t{0});
    },
    [self](atom::resolve op, chat_id chat, reservation_id id,
           const std::string& outcome, int32_t units) {
      auto err = validate_resolve(chat, id, outcome, units);
      if (!err && outcome == "succeeded")
        err = validate_given_units(units);
      return to_chat<resolution>(self, err, chat, op, chat, id, outcome, units);
    },
    [self](atom::unresolved op, reservation_id after,
           uint32_t limit) -> caf::result<unresolved_page> {
      if (auto err = validate_unresolved(after, limit))
        return err;
      // Not of one chat: any partition's connection reads the index.
      return self->delegate(self->state.pool.front(), op, after, limit);
    },
    [self](atom::history op, chat_id chat, int64_t before,
           uint32_t limit) -> caf::result<history_page> {
      if (auto err = validate_history(chat, before, limit))
        return err;
      return self->delegate(store_of(self, chat), op, chat, before, limit);
    },
    [self](atom::explain op, chat_id chat) -> caf::result<chat_explanation> {
      if (auto err = validate_chat(chat))
        return err;
      return self->delegate(store_of(self, chat), op, chat);
    },
    [self](atom::subscribe op, caf::actor who) {
      return self->delegate(self->state.events, op, std::move(who));
    },
    [self](atom::subscribe op, caf::actor who, event_id after) {
      return self->delegate(self->state.events, op, std::move(who), after);
    },
    [self](atom::idle, chat_id chat, uint64_t received) {
      passivate(self, chat, received);
    },
    [self](atom::store, uint64_t index, const persistence_actor& store) {
      replace_store(self, index, store);
    },
    [](atom::ping) { return caf::ok_atom_v; },
  };
}

} // namespace chargeonce
