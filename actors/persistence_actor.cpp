// SPDX-License-Identifier: Apache-2.0
#include "actors/persistence_actor.hpp"

#include "actors/log_handlers.hpp"

#include <caf/all.hpp>

namespace chargeonce {

persistence_actor::behavior_type
make_persistence(persistence_actor::stateful_pointer<persistence_state> self,
                 persistence::store_options opts) {
  install_log_handlers(self);
  self->state.db = std::make_unique<persistence::store>(std::move(opts));
  auto& db = *self->state.db;
  return {
    [&db](atom::create, const chat_spec& spec) -> caf::result<chat_status> {
      return db.create_chat(spec);
    },
    [&db](atom::reserve, chat_id chat, kind k, const std::string& request_id)
      -> caf::result<reservation> { return db.reserve(chat, k, request_id); },
    [&db](atom::start, chat_id chat, reservation_id id)
      -> caf::result<reservation> { return db.start(chat, id); },
    [&db](atom::heartbeat, chat_id chat, reservation_id id)
      -> caf::result<reservation> { return db.heartbeat(chat, id); },
    [&db](atom::commit, chat_id chat, reservation_id id)
      -> caf::result<receipt> { return db.commit(chat, id); },
    [&db](atom::fail, chat_id chat, reservation_id id)
      -> caf::result<reservation> { return db.fail(chat, id); },
    [&db](atom::cancel, chat_id chat) -> caf::result<reservation> {
      return db.cancel(chat);
    },
    [&db](atom::status, chat_id chat) -> caf::result<chat_status> {
      return db.status(chat);
    },
    [&db](atom::release, chat_id chat, reservation_id id)
      -> caf::result<reservation_released> { return db.release(chat, id); },
    [&db](atom::sweep, const sweep_cursor& after,
          uint32_t limit) -> caf::result<std::vector<sweep_candidate>> {
      return db.sweep_chunk(after, limit);
    },
    [&db](atom::prune) -> caf::result<uint64_t> { return db.prune(); },
    [&db](atom::touch, chat_id chat) -> caf::result<chat_status> {
      return db.touch(chat);
    },
    [&db](atom::top_up, chat_id chat, int64_t credits,
          const std::string& payment_id) -> caf::result<top_up_receipt> {
      return db.top_up(chat, credits, payment_id);
    },
    [&db](atom::premium, chat_id chat, caf::timestamp until)
      -> caf::result<chat_status> { return db.set_premium(chat, until); },
    [&db](atom::flags, chat_id chat, const flags_update& x)
      -> caf::result<chat_status> { return db.set_flags(chat, x); },
    [&db](atom::reactivate, const reactivation_cursor& after,
          uint32_t limit) -> caf::result<reactivation_page> {
      return db.reactivation_chunk(after, limit);
    },
  };
}

persistence_factory make_persistence_factory(caf::actor_system& sys,
                                             persistence::store_options opts) {
  return [&sys, opts] {
    return sys.spawn<caf::detached>(make_persistence, opts);
  };
}

} // namespace chargeonce
