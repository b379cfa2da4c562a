// SPDX-License-Identifier: Apache-2.0
#include "actors/facade_actor.hpp"

#include "actors/log_handlers.hpp"

#include <caf/all.hpp>

namespace chargeonce {

// Each handler delegates: the registry (and then the chat actor) answers the
// original caller directly, so a facade adds one hop and no state.

gateway_actor::behavior_type make_gateway(gateway_actor::pointer self,
                                          api_actor api) {
  install_log_handlers(self);
  return {
    [self, api](atom::touch op, chat_id chat) {
      return self->delegate(api, op, chat);
    },
    [self, api](atom::reserve op, chat_id chat, kind k,
                const std::string& request_id) {
      return self->delegate(api, op, chat, k, request_id);
    },
    [self, api](atom::cancel op, chat_id chat) {
      return self->delegate(api, op, chat);
    },
    [self, api](atom::status op, chat_id chat) {
      return self->delegate(api, op, chat);
    },
    [self, api](atom::subscribe op, caf::actor who) {
      return self->delegate(api, op, std::move(who));
    },
  };
}

worker_actor::behavior_type make_worker(worker_actor::pointer self,
                                        api_actor api) {
  install_log_handlers(self);
  return {
    [self, api](atom::start op, chat_id chat, reservation_id id) {
      return self->delegate(api, op, chat, id);
    },
    [self, api](atom::heartbeat op, chat_id chat, reservation_id id) {
      return self->delegate(api, op, chat, id);
    },
    [self, api](atom::commit op, chat_id chat, reservation_id id) {
      return self->delegate(api, op, chat, id);
    },
    [self, api](atom::fail op, chat_id chat, reservation_id id) {
      return self->delegate(api, op, chat, id);
    },
  };
}

admin_actor::behavior_type make_admin(admin_actor::pointer self,
                                      api_actor api) {
  install_log_handlers(self);
  return {
    [self, api](atom::create op, const chat_spec& spec) {
      return self->delegate(api, op, spec);
    },
    [self, api](atom::top_up op, chat_id chat, int64_t credits,
                const std::string& payment_id) {
      return self->delegate(api, op, chat, credits, payment_id);
    },
    [self, api](atom::premium op, chat_id chat, caf::timestamp until) {
      return self->delegate(api, op, chat, until);
    },
    [self, api](atom::flags op, chat_id chat, const flags_update& x) {
      return self->delegate(api, op, chat, x);
    },
  };
}

} // namespace chargeonce
