// SPDX-License-Identifier: Apache-2.0
// Input checks shared by the API's entrance and the store: bad input is a
// typed error before anything is routed, spawned or written.
#pragma once

#include "protocol/catalog.hpp"
#include "protocol/history.hpp"
#include "protocol/types.hpp"

#include <caf/error.hpp>

namespace chargeonce {

/// Chat ids may be negative (group chats) but never zero.
caf::error validate_chat(chat_id chat);

/// Reservation ids come from an identity column: always positive.
caf::error validate_reservation(chat_id chat, reservation_id id);

/// A kind name a catalog can have and a request_id of at most 256 bytes.
caf::error validate_reserve(chat_id chat, const kind& k,
                            const std::string& request_id);

/// reserve's and commit's units: 0 (not given) or 1 to units_max.
caf::error validate_units(int32_t units);

/// Units a caller named (the forms of reserve, commit and resolve that take
/// them): 1 to units_max. Leaving them out is how to say "one" (reserve)
/// or "the whole hold" (commit, resolve); an explicit 0 is a mistake, e.g.
/// a worker reporting "0 units done" that would be charged in full.
caf::error validate_given_units(int32_t units);

/// A kind of the server's catalog; the refusal names the known ones.
caf::error validate_kind(const catalog& products, const kind& k);

/// Only pockets of the server's catalog, whatever the amount: a pocket it
/// lacks is invalid_argument even at 0 (it has no ordinal to store it by).
caf::error validate_pockets(const catalog& products, const pockets& x);

/// At most 256 bytes of UTF-8 without NUL (may be empty).
caf::error validate_request_id(const std::string& request_id);

/// A worker's identity (start, heartbeat, commit, fail, uncertain): at
/// most 256 bytes, UTF-8 without NUL bytes; "" names none.
caf::error validate_worker(const std::string& worker);

/// The prefix of the request ids a client makes up for a reserve its caller
/// gave none (client::reserve): reused on the client's own retries of that
/// call, so that a lost answer finds its job instead of holding again.
inline constexpr const char* auto_request_id_prefix = "auto:";

/// True for an id a client made up (auto_request_id_prefix). It replays
/// like any other, but it does not say which of the user's intents the job
/// is: where the limit is above 1, a reserve needs an id of the caller's
/// own, and one made up counts as none.
bool is_auto_request_id(const std::string& request_id);

/// A job named by its reservation id (positive), by its request id, or by
/// neither (id 0, request_id empty: the chat's only active job).
caf::error validate_cancel(chat_id chat, reservation_id id,
                           const std::string& request_id);

/// A chat's own limit of active jobs: none (the plan's) or 1 to 64.
caf::error validate_job_limit(const caf::optional<int32_t>& limit);

/// A balance-low threshold: none (the server's) or 0 (off) to the largest
/// balance; a negative one is invalid_argument.
caf::error validate_balance_low_threshold(const caf::optional<int32_t>& x);

/// set-limits: what it sets is valid, and it sets something.
caf::error validate_limits(const limits_update& x);

/// Credits between 1 and the largest balance; a payment_id of 1 to 256
/// bytes.
caf::error validate_top_up(chat_id chat, int64_t credits,
                           const std::string& payment_id);

/// validate_top_up, and the grant's terms: a priority of 0 to 1000, a
/// source of purchase, promo or admin, at most one of expires_at and
/// expires_in (1 ms to 100 years). Postgres checks that expires_at is in
/// the future, by its clock.
caf::error validate_top_up(chat_id chat, int64_t credits,
                           const std::string& payment_id,
                           const grant_terms& terms);

/// A grant named by id (payment_id empty) or by payment_id (grant 0), one of
/// the two: an id of 1 or more, a payment_id as validate_top_up takes it.
caf::error validate_void_grant(chat_id chat, int64_t grant,
                               const std::string& payment_id);

/// A provider_ref of 1 to provider_ref_max_bytes bytes of UTF-8 without NUL.
caf::error validate_uncertain(chat_id chat, reservation_id id,
                              const std::string& provider_ref);

/// An outcome of "succeeded" or "failed"; units 0 (all held) or, with
/// succeeded only, 1 to units_max.
caf::error validate_resolve(chat_id chat, reservation_id id,
                            const std::string& outcome, int32_t units);

/// A page of 1 to unresolved_page_max jobs after a reservation id (0: from
/// the first).
inline constexpr uint32_t unresolved_page_max = 1000;
caf::error validate_unresolved(reservation_id after, uint32_t limit);

/// A valid chat, a `before` of 0 (the newest) or a ledger id, and a page
/// of 1 to history_page_max ledger rows.
caf::error validate_history(chat_id chat, int64_t before, uint32_t limit);

/// A valid chat id, no negative amount, a valid limit of active jobs.
caf::error validate_spec(const chat_spec& spec);

} // namespace chargeonce
