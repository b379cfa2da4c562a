// SPDX-License-Identifier: Apache-2.0
#include "actors/events_actor.hpp"

#include "actors/log_handlers.hpp"
#include "actors/metrics/recording.hpp"
#include "protocol/errors.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace chargeonce {

namespace {

using self_ptr = events_actor::stateful_pointer<events_state>;

subscriber_state* find(self_ptr self, const caf::actor_addr& who,
                       uint64_t generation) {
  for (auto& s : self->state.subscribers)
    if (s.who == who && s.generation == generation)
      return &s;
  return nullptr;
}

subscriber_state* find(self_ptr self, const caf::actor& who) {
  for (auto& s : self->state.subscribers)
    if (s.who == who)
      return &s;
  return nullptr;
}

void forget(self_ptr self, const caf::actor_addr& who, const char* why) {
  auto& subs = self->state.subscribers;
  auto i = std::remove_if(subs.begin(), subs.end(),
                          [&](const auto& x) { return x.who == who; });
  if (i == subs.end())
    return;
  subs.erase(i, subs.end());
  spdlog::info("subscriber dropped subscribers={} reason={}", subs.size(), why);
}

/// Sent off with the last id it was sent: it resubscribes after that id.
void cut_off(self_ptr self, subscriber_state& s, const char* reason) {
  spdlog::warn("subscriber cut off reason={} last_event_id={} in_flight={}",
               reason, s.cursor, s.in_flight);
  metrics::count_subscriber_cut_off();
  caf::anon_send(s.who, subscription_ended{reason, s.cursor});
  self->demonitor(s.who);
  forget(self, s.who.address(), reason);
}

void pump(self_ptr self, subscriber_state& s);

/// An answer to one event: a handler that returned void, or one that
/// returned something else or did not handle that event (it has seen it).
bool answered(const caf::error& err) {
  return err == caf::sec::unexpected_message
         || err == caf::sec::unexpected_response;
}

void on_answer(self_ptr self, const caf::actor_addr& who, uint64_t generation) {
  if (auto s = find(self, who, generation)) {
    --s->in_flight;
    pump(self, *s);
  }
}

template <class Event>
void send_event(self_ptr self, subscriber_state& s, Event x) {
  ++s.in_flight;
  s.cursor = x.id;
  auto who = s.who.address();
  auto generation = s.generation;
  self->request(s.who, self->state.options.subscriber_timeout, std::move(x))
    .then([self, who, generation] { on_answer(self, who, generation); },
          [self, who, generation](caf::error& err) {
            if (answered(err)) {
              on_answer(self, who, generation);
              return;
            }
            auto s = find(self, who, generation);
            if (s == nullptr)
              return; // already gone or cut off
            if (err == caf::sec::request_timeout)
              cut_off(self, *s, "too_slow");
            else
              forget(self, who, "gone"); // the down message may follow
          });
}

/// The typed event of one row of the events table.
void deliver(self_ptr self, subscriber_state& s, const event_record& e) {
  if (e.event == "reservation_released")
    send_event(self, s,
               reservation_released{e.chat, e.reservation, e.detail, e.id});
  else if (e.event == "cancel_requested")
    send_event(self, s, cancel_requested{e.chat, e.reservation, e.id});
  else if (e.event == "reconcile_needed")
    send_event(self, s,
               reconcile_needed{e.chat, e.reservation, e.detail, e.id});
  else if (e.event == "limits_refilled")
    send_event(self, s, limits_refilled{e.chat, e.id});
  else if (e.event == "credits_expired")
    send_event(self, s, credits_expired{e.chat, e.grant, e.credits, e.id});
  else if (e.event == "credits_expiring" && e.expires_at)
    send_event(
      self, s,
      credits_expiring{e.chat, e.grant, e.credits, *e.expires_at, e.id});
  else if (e.event == "balance_low")
    send_event(self, s,
               balance_low{e.chat, e.credits, e.threshold, e.detail,
                           e.reservation, e.id});
  else // a newer schema's event: skipped, not a reason to stop
    s.cursor = e.id;
}

/// Sends what `events` holds after the subscriber's cursor, as long as it
/// has room; the rest it catches up with later.
void deliver_page(self_ptr self, subscriber_state& s,
                  const std::vector<event_record>& events) {
  for (const auto& e : events) {
    if (s.in_flight >= self->state.options.in_flight_max)
      return;
    if (e.id > s.cursor)
      deliver(self, s, e);
  }
}

/// A subscriber behind the live feed reads its own next page, one read at
/// a time, once half its window is free.
void pump(self_ptr self, subscriber_state& s) {
  auto& st = self->state;
  if (s.reading || s.cursor >= st.polled
      || s.in_flight > st.options.in_flight_max / 2)
    return;
  s.reading = true;
  auto who = s.who.address();
  auto generation = s.generation;
  auto limit = std::min(st.options.page_rows, st.options.in_flight_max);
  self
    ->request(st.store, st.options.store_timeout, atom::events_v, s.cursor,
              limit)
    .then(
      [self, who, generation](const event_page& page) {
        if (auto s = find(self, who, generation)) {
          s->reading = false;
          deliver_page(self, *s, page.events);
          if (!page.events.empty())
            pump(self, *s);
        }
      },
      [self, who, generation](caf::error& err) {
        // Postgres is away: the next poll's tick tries again.
        spdlog::warn("events catch-up failed error={}", error_name(err));
        if (auto s = find(self, who, generation))
          s->reading = false;
      });
}

void arm_timer(self_ptr self) {
  auto& st = self->state;
  if (st.timer_armed || st.subscribers.empty())
    return;
  st.timer_armed = true;
  self->delayed_send(self, st.options.poll_interval, caf::tick_atom_v);
}

/// Reads the live feed's next page and hands it to every subscriber that
/// is not behind; the others catch up on their own.
void poll(self_ptr self) {
  auto& st = self->state;
  if (st.subscribers.empty())
    return;
  if (st.polling) {
    st.poll_again = true;
    return;
  }
  st.polling = true;
  st.poll_again = false;
  auto after = st.polled;
  self
    ->request(st.store, st.options.store_timeout, atom::events_v, after,
              st.options.page_rows)
    .then(
      [self, after](const event_page& page) {
        auto& st = self->state;
        st.polling = false;
        if (!page.events.empty())
          st.polled = std::max(st.polled, page.events.back().id);
        for (auto& s : st.subscribers) {
          if (!s.reading && s.cursor >= after)
            deliver_page(self, s, page.events);
          pump(self, s);
        }
        if (st.poll_again || page.events.size() == st.options.page_rows)
          poll(self);
      },
      [self](caf::error& err) {
        self->state.polling = false;
        spdlog::warn("events poll failed error={}", error_name(err));
      });
}

/// Adds `who` (or moves a known one to `after`) once the newest id is known.
void add_subscriber(self_ptr self, const caf::actor& who,
                    caf::optional<event_id> after, event_id newest) {
  auto& st = self->state;
  if (st.subscribers.empty())
    st.polled = newest; // the live feed starts now
  auto cursor = after ? *after : newest;
  auto s = find(self, who);
  if (s == nullptr) {
    self->monitor(who);
    st.subscribers.push_back(
      subscriber_state{who, ++st.generations, cursor, 0, false});
    s = &st.subscribers.back();
    spdlog::info("subscriber added after={} subscribers={}", cursor,
                 st.subscribers.size());
  } else if (after) {
    s->cursor = *after; // resubscribed: replay from there
  }
  pump(self, *s);
  arm_timer(self);
}

/// Asks Postgres for the newest id, then adds `who`. A read on a connection
/// that broke while idle fails at once and reconnects: it is tried again
/// (`retries` times), nothing having been written.
void subscribe_when_read(self_ptr self, caf::response_promise rp,
                         const caf::actor& who, caf::optional<event_id> after,
                         int retries) {
  self
    ->request(self->state.store, self->state.options.store_timeout,
              atom::events_v, event_id{0}, uint32_t{0})
    .then(
      [self, rp, who, after](const event_page& page) mutable {
        if (after && *after > page.last_id) {
          rp.deliver(caf::make_error(
            ec::invalid_argument,
            "last-seen event id " + std::to_string(*after)
              + " is beyond the newest event, " + std::to_string(page.last_id)
              + " (another database, or one restored from a backup?)"));
          return;
        }
        add_subscriber(self, who, after, page.last_id);
        rp.deliver(true);
      },
      [self, rp, who, after, retries](caf::error& err) mutable {
        if (retries > 0 && err == ec::storage_unavailable)
          subscribe_when_read(self, rp, who, after, retries - 1);
        else
          rp.deliver(std::move(err));
      });
}

/// Starts `who` after `after` (or, without one, after the newest event),
/// once Postgres said which id is the newest.
caf::result<bool> subscribe(self_ptr self, const caf::actor& who,
                            caf::optional<event_id> after) {
  if (!who)
    return false;
  if (after && *after < 0)
    return caf::make_error(ec::invalid_argument,
                           "the last-seen event id must not be negative");
  auto rp = self->make_response_promise<bool>();
  subscribe_when_read(self, rp, who, after, 1);
  return rp;
}

} // namespace

events_actor::behavior_type
make_events(events_actor::stateful_pointer<events_state> self,
            persistence_actor store, events_options options) {
  install_log_handlers(self);
  self->state.store = std::move(store);
  self->state.options = options;
  self->set_down_handler(
    [self](caf::down_msg& msg) { forget(self, msg.source, "down"); });
  return {
    [self](atom::subscribe, const caf::actor& who) {
      return subscribe(self, who, caf::none);
    },
    [self](atom::subscribe, const caf::actor& who, event_id after) {
      return subscribe(self, who, after);
    },
    // A notice is a courtesy of this server: sent on at once, unanswered.
    [self](const queue_notice& x) {
      metrics::count_queue_notice();
      for (const auto& s : self->state.subscribers)
        caf::anon_send(s.who, x); // typed actors may not send() to untyped
    },
    // The durable events: committed in Postgres by now. Counted here, once,
    // by the server that wrote them; sent on as the table has them.
    [self](const reservation_released& x) {
      metrics::count_release(x.reason);
      poll(self);
    },
    [self](const cancel_requested&) {
      metrics::count_cancel_request();
      poll(self);
    },
    [self](const reconcile_needed&) {
      metrics::count_reconcile_needed();
      poll(self);
    },
    [self](const limits_refilled&) {
      metrics::count_reactivations(1);
      poll(self);
    },
    [self](atom::store, persistence_actor store) {
      self->state.store = std::move(store);
    },
    [self](caf::tick_atom) {
      self->state.timer_armed = false;
      poll(self);
      arm_timer(self);
    },
  };
}

} // namespace chargeonce
