// SPDX-License-Identifier: Apache-2.0
// Every operation chargeonce answers, as one enum from the client to the
// SQL: the client's retry policy, a batch on the wire, the persistence
// statement and the metric label all index it, and one table says what each
// operation is. A new operation is one enumerator and one row.
#pragma once

#include "protocol/errors.hpp"

#include <array>
#include <cstddef>
#include <cstdint>

namespace chargeonce {

/// The eight operations a batch may carry come first, with the numbers they
/// cross the network with in a batch (tests/protocol/operation_type.cpp
/// pins them); then those that always travel alone.
enum class operation_type : uint8_t {
  touch = 0,
  reserve = 1,
  cancel = 2,
  status = 3,
  start = 4,
  heartbeat = 5,
  commit = 6,
  fail = 7,
  create = 8,
  top_up = 9,
  set_premium = 10,
  set_flags = 11,
  set_limits = 12,
  uncertain = 13,
  resolve = 14,
  unresolved = 15,
  history = 16,
  explain = 17,
  subscribe = 18,
  void_grant = 19,
  /// Not an operation but how many there are: keep it last.
  count_,
};

inline constexpr size_t operation_type_count =
  static_cast<size_t>(operation_type::count_);

/// A set of error codes: bit n for the ec value n.
using error_set = uint32_t;

/// The set of `codes`.
template <class... Codes>
constexpr error_set errors(Codes... codes) {
  return (error_set{0} | ... | (error_set{1} << static_cast<unsigned>(codes)));
}

/// What any operation may answer besides its own refusals: bad input, an
/// outage, a full queue, a bug.
inline constexpr error_set any_operation_errors = errors(
  ec::invalid_argument, ec::storage_unavailable, ec::overloaded, ec::internal);

/// Who may send an operation: the role's token (HTTP) or facade (CAF).
enum class operation_role : uint8_t { gateway, worker, admin };

/// What an operation is.
struct operation_traits {
  operation_type type;
  /// The name in logs, the metric label, the SQL batch's op text.
  const char* name;
  operation_role role;
  /// A client's batch may carry it.
  bool batchable;
  /// A persistence statement may carry it beside other operations
  /// (chargeonce_apply_batch); the others run a transaction each.
  bool in_statement;
  /// A request that met a connection error may be sent again: doing it
  /// twice (the first may have taken effect) answers and changes what doing
  /// it once would. A reserve only with a request id (retry_safe in
  /// client/retry.hpp).
  bool retry_safe;
  /// The refusals it may answer beside any_operation_errors (docs/clients.md,
  /// "The messages", lists the same; tests/protocol/operation_type.cpp
  /// compares them).
  error_set refusals;
};

/// What a worker's operation on a reservation may be refused: the job is
/// gone, was swept, is not in the state the operation needs, or runs under
/// another worker's start.
inline constexpr error_set worker_refusals =
  errors(ec::not_found, ec::expired, ec::invalid_state, ec::already_started);

// Reasons for retry_safe, in table order: status, unresolved, history and
// explain read only; touch finds its chat registered and the window just
// opened (it records activity again, refills nothing); reserve returns the
// active reservation of its request id at the price decided the first time
// (without one it is a second request and answers busy); cancel names a
// chat, so a bare repeat after the first took effect would cancel the user's
// next job, and a named one would answer not_found for the job it did
// cancel; start returns the started job; heartbeat moves the lease a little
// further; commit returns the first receipt and charges nothing; fail can
// only find its job gone; create would answer already_exists and hide that
// this very call created the chat; top_up is idempotent by payment_id;
// set_premium, set_flags and set_limits set absolute values; uncertain
// answers the same for the same provider_ref; resolve answers the first
// resolution; subscribe resumes from the id its caller holds; void_grant
// answers the voided grant again.
inline constexpr std::array<operation_traits, operation_type_count>
  operation_table{{
    {operation_type::touch, "touch", operation_role::gateway, true, false, true,
     errors()},
    {operation_type::reserve, "reserve", operation_role::gateway, true, true,
     true,
     errors(ec::busy, ec::insufficient_messages, ec::insufficient_images,
            ec::insufficient_funds, ec::not_found, ec::chat_blocked,
            ec::chat_banned)},
    {operation_type::cancel, "cancel", operation_role::gateway, true, true,
     false,
     errors(ec::too_late, ec::not_found, ec::invalid_state, ec::expired)},
    {operation_type::status, "status", operation_role::gateway, true, true,
     true, errors(ec::not_found)},
    {operation_type::start, "start", operation_role::worker, true, true, true,
     worker_refusals},
    {operation_type::heartbeat, "heartbeat", operation_role::worker, true, true,
     true, worker_refusals},
    {operation_type::commit, "commit", operation_role::worker, true, true, true,
     worker_refusals},
    {operation_type::fail, "fail", operation_role::worker, true, true, true,
     worker_refusals},
    {operation_type::create, "create", operation_role::admin, false, false,
     false, errors(ec::already_exists)},
    {operation_type::top_up, "top_up", operation_role::admin, false, false,
     true, errors(ec::not_found)},
    {operation_type::set_premium, "set_premium", operation_role::admin, false,
     false, true, errors(ec::not_found)},
    {operation_type::set_flags, "set_flags", operation_role::admin, false,
     false, true, errors(ec::not_found)},
    {operation_type::set_limits, "set_limits", operation_role::admin, false,
     false, true, errors(ec::not_found)},
    {operation_type::uncertain, "uncertain", operation_role::worker, false,
     false, true, worker_refusals},
    {operation_type::resolve, "resolve", operation_role::worker, false, false,
     true, errors(ec::invalid_state, ec::expired, ec::not_found)},
    {operation_type::unresolved, "unresolved", operation_role::worker, false,
     false, true, errors()},
    {operation_type::history, "history", operation_role::admin, false, false,
     true, errors(ec::not_found)},
    {operation_type::explain, "explain", operation_role::admin, false, false,
     true, errors(ec::not_found)},
    {operation_type::subscribe, "subscribe", operation_role::gateway, false,
     false, true, errors()},
    {operation_type::void_grant, "void_grant", operation_role::admin, false,
     false, true, errors(ec::not_found)},
  }};

namespace detail {

constexpr bool operation_table_in_enum_order() {
  for (size_t i = 0; i < operation_table.size(); ++i)
    if (static_cast<size_t>(operation_table[i].type) != i)
      return false;
  return true;
}

} // namespace detail

static_assert(detail::operation_table_in_enum_order(),
              "operation_table lists every operation_type, in enum order");

/// True for the values of the enum (a peer may send any byte).
constexpr bool is_operation_type(operation_type x) {
  return static_cast<size_t>(x) < operation_type_count;
}

/// What `x` is; only for values is_operation_type accepts.
constexpr const operation_traits& traits_of(operation_type x) {
  return operation_table[static_cast<size_t>(x)];
}

/// Whether `x` may answer the error `code`: its own refusals and what any
/// operation may answer.
constexpr bool may_answer(operation_type x, ec code) {
  auto bit = error_set{1} << static_cast<unsigned>(code);
  return ((traits_of(x).refusals | any_operation_errors) & bit) != 0;
}

/// The operation's name; "unknown" for a value that is none.
const char* to_string(operation_type x);

/// True for the operations a peer may legally send in a batch.
bool is_valid(operation_type x);

/// True for the operations of the gateway role (touch, reserve, cancel,
/// status, subscribe).
bool is_gateway_operation(operation_type x);

} // namespace chargeonce
