// SPDX-License-Identifier: Apache-2.0
#include "actors/notice_timer_actor.hpp"

#include "actors/chat_actor.hpp"
#include "actors/log_handlers.hpp"

#include <caf/all.hpp>

#include <algorithm>

namespace chargeonce {

namespace {

using self_ptr = notice_timer_self_actor::stateful_pointer<notice_timer_state>;

void arm_tick(self_ptr self, caf::timespan after) {
  self->delayed_send(self, after, caf::tick_atom_v);
}

/// Hands back every notice that is due, then sleeps until the next one, but
/// at least `notice_timer_granularity`: notices armed close together are
/// handed back together.
void on_tick(self_ptr self) {
  auto& st = self->state;
  auto now = self->clock().now();
  while (!st.queue.empty() && st.queue.front().due <= now) {
    auto& x = st.queue.front();
    self->send(caf::actor_cast<chat_self_actor>(x.chat), atom::notice_v, x.id);
    st.queue.pop_front();
  }
  if (!st.queue.empty())
    arm_tick(self, std::max<caf::timespan>(st.queue.front().due - now,
                                           notice_timer_granularity));
}

} // namespace

notice_timer_self_actor::behavior_type make_notice_timer(self_ptr self,
                                                         caf::timespan delay) {
  install_log_handlers(self);
  self->state.delay = delay;
  return {
    [self](atom::notice, reservation_id id) {
      auto& st = self->state;
      // A lone notice comes exactly on time; see on_tick for a busy queue.
      if (st.queue.empty())
        arm_tick(self, st.delay);
      st.queue.push_back(
        {self->clock().now() + st.delay, self->current_sender(), id});
    },
    [self](caf::tick_atom) { on_tick(self); },
  };
}

} // namespace chargeonce
