// SPDX-License-Identifier: Apache-2.0
// The one error enum of chargeonce. Codes are part of the wire contract:
// append new ones, never renumber.
#pragma once

#include <caf/error.hpp>
#include <caf/make_message.hpp>

#include <cstdint>
#include <string>

namespace chargeonce {

enum class ec : uint8_t {
  /// Reserved: CAF treats code 0 as "no error".
  none = 0,
  /// The chat already has an active reservation (UNIQUE index, SQLSTATE 23505).
  busy = 1,
  /// A text job found no daily message left (text never falls back to balance).
  insufficient_messages = 2,
  /// An image job found neither a daily image nor a purchased credit.
  insufficient_images = 3,
  /// Unknown chat, or a reservation that no longer exists (cancelled, failed).
  not_found = 4,
  /// Cancel of a reservation a worker already started; nothing changed.
  too_late = 5,
  /// The operation does not fit the reservation's state (e.g. commit before
  /// start, start of a committed reservation).
  invalid_state = 6,
  /// Malformed input: unknown kind, non-positive id, negative amount, a
  /// reservation of another chat.
  invalid_argument = 7,
  /// Postgres failed or did not answer in time (connection lost, timeout,
  /// any SQL error other than the busy index). The caller knows nothing
  /// about the outcome: the operation may or may not have been written (it
  /// can still commit), so retry with the same ids (reserve with the same
  /// request_id, commit with the same reservation); never re-price or drop
  /// the job on this answer.
  storage_unavailable = 8,
  /// The chat is blocked and may not reserve.
  chat_blocked = 9,
  /// The chat is banned and may not reserve.
  chat_banned = 10,
  /// create-chat for a chat_id that already exists; nothing changed.
  already_exists = 11,
  /// The sweeper released this reservation (dead worker, lapsed lease): a
  /// late start, heartbeat or commit is fenced off and charges nothing.
  expired = 12,
  /// The server's queue for Postgres is full (back-pressure): nothing was
  /// done; retry later, preferably with a delay.
  overloaded = 13,
  /// A bug in the server (a broken invariant, an unexpected exception),
  /// logged there at critical level with an id the error's message names.
  /// Like storage_unavailable the operation may or may not have been
  /// written; unlike it, retrying will not help until the bug is fixed, so
  /// clients do not retry it automatically.
  internal = 14,
  /// A job of a catalog kind other than text and image found no pocket of
  /// its pay_from with its price left; the message names the kind and its
  /// pockets (text and image keep insufficient_messages and
  /// insufficient_images).
  insufficient_funds = 15,
  /// A start, heartbeat, commit, fail or uncertain naming a worker other
  /// than the one that started the job (a queue that delivered the job
  /// twice): that worker must not run it; nothing changed.
  already_started = 16,
};

/// The stable name used in logs and in the CLI's `{"error": ...}`.
const char* to_string(ec x);

/// Inverse of to_string; false for unknown names.
bool from_string(const std::string& name, ec& out);

/// What a caller knows after `x` and what to do next, in one sentence
/// (the CLI prints it for people); "" for codes that need no advice.
const char* advice(ec x);

/// A process-unique, increasing number that ties an internal error's
/// answer to the server log line that carries its detail.
uint64_t next_incident_id();

/// The category atom's text, as registered with the actor system.
inline constexpr char error_category_name[] = "chargeonce";

/// The context string a chargeonce error carries, or "" if none.
std::string error_message(const caf::error& err);

/// The name of any error: ours by code, CAF's by its own rendering.
std::string error_name(const caf::error& err);

} // namespace chargeonce

CAF_ERROR_CODE_ENUM(chargeonce::ec, "chargeonce")
