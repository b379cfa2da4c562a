// SPDX-License-Identifier: Apache-2.0
// Events published to gateways, and the sweeper's work items.
#pragma once

#include "protocol/types.hpp"

#include <caf/meta/type_name.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace chargeonce {

/// "Your job is in the queue": sent queue-notice-delay after a reserve if
/// the reservation is still active, at most once per reservation.
struct queue_notice {
  chat_id chat = 0;
  reservation_id reservation = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, queue_notice& x) {
  return f(caf::meta::type_name("queue_notice"), x.chat, x.reservation);
}

/// The sweeper deleted a reservation past its deadline; the chat is free.
struct reservation_released {
  chat_id chat = 0;
  reservation_id reservation = 0;
  /// "lease_expired", "sweep_timeout", or "unresolved" (an uncertain job
  /// released at reconcile-timeout, nothing charged)
  std::string reason;
  /// The event's id in Postgres: increasing in commit order, the same on
  /// every server; what a subscriber resumes after and deduplicates by.
  event_id id = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reservation_released& x) {
  return f(caf::meta::type_name("reservation_released"), x.chat, x.reservation,
           x.reason, x.id);
}

/// A user cancelled a started job whose kind's policy is `request`: its
/// worker should stop and fail it, or commit what was already done. Written
/// once per reservation, when the mark is set.
struct cancel_requested {
  chat_id chat = 0;
  reservation_id reservation = 0;
  event_id id = 0; ///< as in reservation_released
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cancel_requested& x) {
  return f(caf::meta::type_name("cancel_requested"), x.chat, x.reservation,
           x.id);
}

/// A worker could not tell whether its provider did the job
/// (`uncertain`): a reconciler should ask the provider by `provider_ref`
/// and `resolve` it before reconcile-timeout releases it.
struct reconcile_needed {
  chat_id chat = 0;
  reservation_id reservation = 0;
  std::string provider_ref;
  event_id id = 0; ///< as in reservation_released
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reconcile_needed& x) {
  return f(caf::meta::type_name("reconcile_needed"), x.chat, x.reservation,
           x.provider_ref, x.id);
}

/// A quiet chat's daily limits were refilled (reactivation).
struct limits_refilled {
  chat_id chat = 0;
  event_id id = 0; ///< as in reservation_released
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, limits_refilled& x) {
  return f(caf::meta::type_name("limits_refilled"), x.chat, x.id);
}

/// A grant's credits expired: `credits` of grant `grant` left the chat's
/// balance (what holds still held of it expires when they end, unless
/// charged; 0 when they held all it had left). Once per grant.
struct credits_expired {
  chat_id chat = 0;
  int64_t grant = 0;
  int32_t credits = 0;
  event_id id = 0; ///< as in reservation_released
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, credits_expired& x) {
  return f(caf::meta::type_name("credits_expired"), x.chat, x.grant, x.credits,
           x.id);
}

/// Grant `grant` expires at `expires_at` with `credits` left: written once
/// per grant, expiry-notice before (at once, by its top-up, for a grant
/// that expires sooner).
struct credits_expiring {
  chat_id chat = 0;
  int64_t grant = 0;
  int32_t credits = 0;
  caf::timestamp expires_at;
  event_id id = 0; ///< as in reservation_released
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, credits_expiring& x) {
  return f(caf::meta::type_name("credits_expiring"), x.chat, x.grant, x.credits,
           x.expires_at, x.id);
}

/// The chat's available balance (balance less what holds hold of it) fell
/// below `threshold` (its own balance-low threshold, else the server's) to
/// `available`: once per crossing, not again until it was back at or above
/// it. `cause`: "reserve" (then `reservation` is the hold that crossed it),
/// "expire" or "void".
struct balance_low {
  chat_id chat = 0;
  int32_t available = 0;
  int32_t threshold = 0;
  std::string cause;
  reservation_id reservation = 0; ///< 0 unless cause is "reserve"
  event_id id = 0;                ///< as in reservation_released
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, balance_low& x) {
  return f(caf::meta::type_name("balance_low"), x.chat, x.available,
           x.threshold, x.cause, x.reservation, x.id);
}

/// The server stopped sending events to this subscriber: `reason` is
/// "too_slow" (it left `subscriber-timeout` without answering events) or
/// "stopping". Subscribe again with `last_id`, the last event sent to it
/// (those unanswered included: deduplicate by id).
struct subscription_ended {
  std::string reason;
  event_id last_id = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, subscription_ended& x) {
  return f(caf::meta::type_name("subscription_ended"), x.reason, x.last_id);
}

/// One row of the events table, as read back in id order.
struct event_record {
  event_id id = 0;
  std::string event; ///< reservation_released, limits_refilled, ...
  chat_id chat = 0;
  reservation_id reservation = 0; ///< 0 for limits_refilled
  /// A release's reason, a provider_ref, balance_low's cause.
  std::string detail;
  int64_t grant = 0;   ///< credits_expired, credits_expiring; else 0
  int32_t credits = 0; ///< their credits; balance_low's available balance
  /// credits_expiring: when the grant expires.
  caf::optional<caf::timestamp> expires_at = caf::none;
  int32_t threshold = 0; ///< balance_low
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, event_record& x) {
  return f(caf::meta::type_name("event_record"), x.id, x.event, x.chat,
           x.reservation, x.detail, x.grant, x.credits, x.expires_at,
           x.threshold);
}

/// Events after an id, and the newest id written so far.
struct event_page {
  std::vector<event_record> events;
  event_id last_id = 0; ///< 0 when no event was ever written
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, event_page& x) {
  return f(caf::meta::type_name("event_page"), x.events, x.last_id);
}

/// Which deadline a sweep pass looks for; each has its own index.
enum class sweep_phase : uint8_t {
  lease = 0,      ///< a started job's heartbeat lease lapsed
  age = 1,        ///< older than sweep-timeout, heartbeat or not
  unresolved = 2, ///< an uncertain job past reconcile-timeout
};

/// Where a keyset-paginated sweep pass continues: after (at, reservation).
struct sweep_cursor {
  sweep_phase phase = sweep_phase::lease;
  int64_t at_us = 0; ///< the deadline column's value, microseconds
  reservation_id reservation = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sweep_cursor& x) {
  return f(caf::meta::type_name("sweep_cursor"), x.phase, x.at_us,
           x.reservation);
}

/// One reservation past its deadline, and the cursor just after it.
struct sweep_candidate {
  chat_id chat = 0;
  sweep_cursor cursor;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sweep_candidate& x) {
  return f(caf::meta::type_name("sweep_candidate"), x.chat, x.cursor);
}

/// Where the reactivation scan continues: after (last_activity_at, chat).
struct reactivation_cursor {
  int64_t at_us = 0;
  chat_id chat = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reactivation_cursor& x) {
  return f(caf::meta::type_name("reactivation_cursor"), x.at_us, x.chat);
}

/// One keyset page of the reactivation scan: the chats just refilled (a
/// chat of the page touched meanwhile is not), where the next page starts,
/// and whether the page was full, so that more chats may be due.
struct reactivation_page {
  std::vector<chat_id> chats;
  reactivation_cursor next; ///< the page's last chat; `after` if it was empty
  bool more = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reactivation_page& x) {
  return f(caf::meta::type_name("reactivation_page"), x.chats, x.next, x.more);
}

} // namespace chargeonce
