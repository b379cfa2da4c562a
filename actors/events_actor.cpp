// SPDX-License-Identifier: Apache-2.0
#include "actors/events_actor.hpp"

#include "actors/log_handlers.hpp"
#include "actors/metrics/recording.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace chargeonce {

namespace {

using self_ptr = events_actor::stateful_pointer<events_state>;

template <class Event>
void publish(self_ptr self, const Event& x) {
  for (const auto& sub : self->state.subscribers)
    caf::anon_send(sub, x); // typed actors may not send() to untyped ones
}

void drop(self_ptr self, const caf::actor_addr& who) {
  auto& subs = self->state.subscribers;
  auto i = std::remove_if(subs.begin(), subs.end(),
                          [&](const caf::actor& x) { return x == who; });
  if (i != subs.end()) {
    subs.erase(i, subs.end());
    spdlog::info("subscriber dropped subscribers={}", subs.size());
  }
}

} // namespace

events_actor::behavior_type
make_events(events_actor::stateful_pointer<events_state> self) {
  install_log_handlers(self);
  self->set_down_handler(
    [self](caf::down_msg& msg) { drop(self, msg.source); });
  return {
    [self](atom::subscribe, const caf::actor& who) {
      if (!who)
        return false;
      auto& subs = self->state.subscribers;
      if (std::find(subs.begin(), subs.end(), who) == subs.end()) {
        self->monitor(who);
        subs.push_back(who);
        spdlog::info("subscriber added subscribers={}", subs.size());
      }
      return true;
    },
    // Every event of the server passes here: counted once, when published.
    [self](const queue_notice& x) {
      metrics::count_queue_notice();
      publish(self, x);
    },
    [self](const reservation_released& x) {
      metrics::count_release(x.reason);
      publish(self, x);
    },
    [self](const cancel_requested& x) {
      metrics::count_cancel_request();
      publish(self, x);
    },
    [self](const reconcile_needed& x) {
      metrics::count_reconcile_needed();
      publish(self, x);
    },
    [self](const limits_refilled& x) {
      metrics::count_reactivations(1);
      publish(self, x);
    },
  };
}

} // namespace chargeonce
