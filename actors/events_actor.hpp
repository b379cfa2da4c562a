// SPDX-License-Identifier: Apache-2.0
// The event bus: gateways subscribe; it reads the events Postgres kept and
// sends them on. Chat actors and the supervisor tell it when they wrote one.
#pragma once

#include "actors/persistence_actor.hpp"
#include "protocol/events.hpp"
#include "protocol/type_ids.hpp"

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <chrono>
#include <cstdint>
#include <vector>

namespace chargeonce {

/// Fans events out to subscribers; never blocks a publisher. Internal to the
/// server: clients subscribe through the API, which delegates here.
///
/// The durable events (reservation_released, cancel_requested,
/// reconcile_needed, limits_refilled, credits_expired, credits_expiring,
/// balance_low) are what subscribers get, read back from the events table,
/// with their id, so that every server sends the same events in the same
/// order and a subscriber can resume after the last id it saw. The first
/// four also reach it from a publisher, as a hint that Postgres has a new
/// one (and to be counted); the others, written by SQL (an expiry, a
/// top-up, a reserve), are found by the next poll. queue_notice is this
/// server's timer and is sent on at once, at most once.
using events_actor = caf::typed_actor<
  caf::replies_to<atom::subscribe, caf::actor>::with<bool>,
  caf::replies_to<atom::subscribe, caf::actor, event_id>::with<bool>,
  caf::reacts_to<queue_notice>, caf::reacts_to<reservation_released>,
  caf::reacts_to<cancel_requested>, caf::reacts_to<reconcile_needed>,
  caf::reacts_to<limits_refilled>,
  /// The persistence actor to read events from (after a restart).
  caf::reacts_to<atom::store, persistence_actor>,
  /// The poll timer.
  caf::reacts_to<caf::tick_atom>>;

struct events_options {
  /// How often the events table is read while anyone subscribes; a local
  /// publisher's hint reads it at once. Events other servers wrote arrive
  /// within this.
  caf::timespan poll_interval = std::chrono::milliseconds(200);
  /// Events read per query, for the live feed and for each catch-up.
  uint32_t page_rows = 1000;
  /// Events sent to one subscriber and not yet answered, at most: the
  /// bound on what a slow subscriber costs (the rest waits in Postgres).
  uint32_t in_flight_max = 1000;
  /// A subscriber that leaves an event unanswered this long is cut off.
  caf::timespan subscriber_timeout = std::chrono::seconds(30);
  /// How long a read of the events table may wait for Postgres.
  caf::timespan store_timeout = std::chrono::seconds(10);
};

/// One subscriber and where it is in the stream.
struct subscriber_state {
  caf::actor who;
  uint64_t generation = 0; ///< tells a resubscribed actor's answers apart
  event_id cursor = 0;     ///< the last event sent to it
  uint32_t in_flight = 0;  ///< sent, not yet answered
  bool reading = false;    ///< a catch-up read for it is outstanding
};

struct events_state {
  static inline const char* name = "events";
  persistence_actor store;
  events_options options;
  std::vector<subscriber_state> subscribers; ///< monitored; dropped when down
  uint64_t generations = 0;
  /// The live feed: every event up to here was read by a poll. Subscribers
  /// at or past it get the next poll's page; those behind it catch up with
  /// their own reads.
  event_id polled = 0;
  bool polling = false;     ///< a poll is outstanding
  bool poll_again = false;  ///< a hint came while it was
  bool timer_armed = false; ///< a tick is on its way
};

/// Delivers each durable event to each subscriber at least once, in id
/// order, as a request (a handler returning void answers it): no more than
/// in_flight_max unanswered per subscriber, so a slow or dead subscriber
/// never slows a publisher nor grows memory; one silent for
/// subscriber_timeout is sent subscription_ended{"too_slow", last id}.
events_actor::behavior_type
make_events(events_actor::stateful_pointer<events_state> self,
            persistence_actor store, events_options options);

} // namespace chargeonce
