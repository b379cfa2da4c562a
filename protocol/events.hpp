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
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reservation_released& x) {
  return f(caf::meta::type_name("reservation_released"), x.chat, x.reservation,
           x.reason);
}

/// A user cancelled a started job whose kind's policy is `request`: its
/// worker should stop and fail it, or commit what was already done. Sent
/// once per reservation by the chat actor that marked it (a repeated
/// cancel through another server may send it again).
struct cancel_requested {
  chat_id chat = 0;
  reservation_id reservation = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cancel_requested& x) {
  return f(caf::meta::type_name("cancel_requested"), x.chat, x.reservation);
}

/// A worker could not tell whether its provider did the job
/// (`uncertain`): a reconciler should ask the provider by `provider_ref`
/// and `resolve` it before reconcile-timeout releases it.
struct reconcile_needed {
  chat_id chat = 0;
  reservation_id reservation = 0;
  std::string provider_ref;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reconcile_needed& x) {
  return f(caf::meta::type_name("reconcile_needed"), x.chat, x.reservation,
           x.provider_ref);
}

/// A quiet chat's daily limits were refilled (reactivation).
struct limits_refilled {
  chat_id chat = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, limits_refilled& x) {
  return f(caf::meta::type_name("limits_refilled"), x.chat);
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

/// One keyset page of the reactivation scan: the chats just refilled.
struct reactivation_page {
  std::vector<chat_id> chats;
  reactivation_cursor next; ///< meaningful when chats is not empty
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reactivation_page& x) {
  return f(caf::meta::type_name("reactivation_page"), x.chats, x.next);
}

} // namespace chargeonce
