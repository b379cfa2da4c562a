// SPDX-License-Identifier: Apache-2.0
// The domain structs that cross actor and network boundaries.
#pragma once

#include <caf/meta/type_name.hpp>
#include <caf/optional.hpp>
#include <caf/timestamp.hpp>

#include <cstdint>
#include <string>

namespace chargeonce {

/// A chat as the bot platform numbers it; negative for group chats.
using chat_id = int64_t;

/// The database identity of a reservation; always positive.
using reservation_id = int64_t;

/// What a job produces; decides which pocket pays for it.
enum class kind : uint8_t { text = 0, image = 1 };

/// Where a reservation is in its life: taken by a worker or not yet.
enum class reservation_status : uint8_t { queued = 0, in_progress = 1 };

const char* to_string(kind x);
const char* to_string(reservation_status x);

/// Parses "text" or "image"; false for anything else.
bool from_string(const std::string& text, kind& out);

/// Parses "queued" or "in_progress"; false for anything else.
bool from_string(const std::string& text, reservation_status& out);

/// True for the enumerators a peer may legally send.
bool is_valid(kind x);

/// Amounts per pocket: a chat's balance, a reservation's hold, a charge.
struct pockets {
  int32_t daily_messages = 0; ///< refills with the daily window
  int32_t daily_images = 0;   ///< refills with the daily window
  int32_t balance = 0;        ///< purchased credits, never expire

  friend bool operator==(const pockets& x, const pockets& y) {
    return x.daily_messages == y.daily_messages
           && x.daily_images == y.daily_images && x.balance == y.balance;
  }
  friend bool operator!=(const pockets& x, const pockets& y) {
    return !(x == y);
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, pockets& x) {
  return f(caf::meta::type_name("pockets"), x.daily_messages, x.daily_images,
           x.balance);
}

/// What an admin sets when registering a chat.
struct chat_spec {
  chat_id chat = 0;
  pockets initial;                             ///< starting amounts
  caf::optional<caf::timestamp> premium_until; ///< none: never premium
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chat_spec& x) {
  return f(caf::meta::type_name("chat_spec"), x.chat, x.initial,
           x.premium_until);
}

/// One active job's hold: the price decided at enqueue, paid at commit.
struct reservation {
  reservation_id id = 0;
  chat_id chat = 0;
  chargeonce::kind kind = kind::text;
  reservation_status status = reservation_status::queued;
  std::string queue;      ///< `<kind>_generation[_priority]`
  pockets held;           ///< what commit will take, per pocket
  std::string request_id; ///< the caller's idempotency key, may be empty
  caf::timestamp created_at;
  /// Armed by the first heartbeat; past it, the sweeper releases the job.
  caf::optional<caf::timestamp> lease_expires_at;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reservation& x) {
  return f(caf::meta::type_name("reservation"), x.id, x.chat, x.kind, x.status,
           x.queue, x.held, x.request_id, x.created_at, x.lease_expires_at);
}

/// The ledger entry of one commit; a repeated commit returns the same one.
struct receipt {
  reservation_id reservation = 0;
  chat_id chat = 0;
  chargeonce::kind kind = kind::text;
  pockets charged; ///< taken from each pocket (held, clamped at zero)
  caf::timestamp committed_at;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, receipt& x) {
  return f(caf::meta::type_name("receipt"), x.reservation, x.chat, x.kind,
           x.charged, x.committed_at);
}

/// A chat's pockets, flags and active reservation, as Postgres has them.
struct chat_status {
  chat_id chat = 0;
  pockets available;
  caf::optional<caf::timestamp> premium_until;
  bool premium = false; ///< premium_until lies in the future
  bool started = false;
  bool blocked = false;
  bool banned = false;
  caf::optional<reservation> active; ///< none: the chat may reserve
  /// When the current daily window opened; none: no window is open, the
  /// next activity opens one.
  caf::optional<caf::timestamp> window_started_at;
  caf::optional<caf::timestamp> last_activity_at;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chat_status& x) {
  return f(caf::meta::type_name("chat_status"), x.chat, x.available,
           x.premium_until, x.premium, x.started, x.blocked, x.banned, x.active,
           x.window_started_at, x.last_activity_at);
}

/// set-flags: each flag given is set, the others are left as they are.
struct flags_update {
  caf::optional<bool> started;
  caf::optional<bool> blocked;
  caf::optional<bool> banned;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, flags_update& x) {
  return f(caf::meta::type_name("flags_update"), x.started, x.blocked,
           x.banned);
}

/// The ledger entry of one purchase; a retried top-up returns the same one.
struct top_up_receipt {
  chat_id chat = 0;
  std::string payment_id;
  int32_t credits = 0; ///< added to the purchased balance
  caf::timestamp purchased_at;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, top_up_receipt& x) {
  return f(caf::meta::type_name("top_up_receipt"), x.chat, x.payment_id,
           x.credits, x.purchased_at);
}

} // namespace chargeonce
