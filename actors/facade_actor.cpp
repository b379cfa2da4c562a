// SPDX-License-Identifier: Apache-2.0
#include "actors/facade_actor.hpp"

#include "actors/log_handlers.hpp"

#include <caf/all.hpp>

#include <chrono>

namespace chargeonce {

namespace {

/// Long enough for any operation (the chat actor's own store timeout
/// answers first); finite, so a relay always ends.
constexpr auto relay_timeout = std::chrono::seconds(60);

/// Asks the registry and answers the client itself. Never `delegate`: a
/// delegated answer carries the internal actor's handle to the client, which
/// could then call that actor directly, past this facade's role.
template <class T, class Self, class... Ts>
caf::result<T> relay(Self* self, const api_actor& api, Ts... xs) {
  auto rp = self->template make_response_promise<T>();
  self->request(api, relay_timeout, xs...)
    .then([rp](T& x) mutable { rp.deliver(std::move(x)); },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

} // namespace

gateway_actor::behavior_type make_gateway(gateway_actor::pointer self,
                                          api_actor api) {
  install_log_handlers(self);
  return {
    [self, api](atom::touch op, chat_id chat) {
      return relay<chat_status>(self, api, op, chat);
    },
    [self, api](atom::reserve op, chat_id chat, kind k,
                const std::string& request_id) {
      return relay<reservation>(self, api, op, chat, k, request_id);
    },
    [self, api](atom::cancel op, chat_id chat) {
      return relay<reservation>(self, api, op, chat);
    },
    [self, api](atom::status op, chat_id chat) {
      return relay<chat_status>(self, api, op, chat);
    },
    [self, api](atom::subscribe op, caf::actor who) {
      return relay<bool>(self, api, op, std::move(who));
    },
  };
}

worker_actor::behavior_type make_worker(worker_actor::pointer self,
                                        api_actor api) {
  install_log_handlers(self);
  return {
    [self, api](atom::start op, chat_id chat, reservation_id id) {
      return relay<reservation>(self, api, op, chat, id);
    },
    [self, api](atom::heartbeat op, chat_id chat, reservation_id id) {
      return relay<reservation>(self, api, op, chat, id);
    },
    [self, api](atom::commit op, chat_id chat, reservation_id id) {
      return relay<receipt>(self, api, op, chat, id);
    },
    [self, api](atom::fail op, chat_id chat, reservation_id id) {
      return relay<reservation>(self, api, op, chat, id);
    },
  };
}

admin_actor::behavior_type make_admin(admin_actor::pointer self,
                                      api_actor api) {
  install_log_handlers(self);
  return {
    [self, api](atom::create op, const chat_spec& spec) {
      return relay<chat_status>(self, api, op, spec);
    },
    [self, api](atom::top_up op, chat_id chat, int64_t credits,
                const std::string& payment_id) {
      return relay<top_up_receipt>(self, api, op, chat, credits, payment_id);
    },
    [self, api](atom::premium op, chat_id chat, caf::timestamp until) {
      return relay<chat_status>(self, api, op, chat, until);
    },
    [self, api](atom::flags op, chat_id chat, const flags_update& x) {
      return relay<chat_status>(self, api, op, chat, x);
    },
  };
}

} // namespace chargeonce
