// SPDX-License-Identifier: Apache-2.0
// Typed actor interfaces shared by the server, its clients and the tests.
#pragma once

#include "protocol/type_ids.hpp"
#include "protocol/types.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <string>

namespace chargeonce {

/// The billing API of one server, as gateways, workers and the CLI see it.
/// Every operation names its chat: the server routes by it.
using api_actor = caf::typed_actor<
  /// Registers a chat; fails with already_exists or invalid_argument.
  caf::replies_to<atom::create, chat_spec>::with<chat_status>,
  /// Holds the price of one job (chat, kind, request_id); fails with busy,
  /// insufficient_messages, insufficient_images, not_found, chat_blocked,
  /// chat_banned.
  caf::replies_to<atom::reserve, chat_id, kind, std::string>::with<reservation>,
  /// queued -> in_progress; not_found when the reservation is gone.
  caf::replies_to<atom::start, chat_id, reservation_id>::with<reservation>,
  /// Charges exactly what was held; repeated, returns the same receipt.
  caf::replies_to<atom::commit, chat_id, reservation_id>::with<receipt>,
  /// Deletes the reservation: nothing was charged, nothing to refund.
  caf::replies_to<atom::fail, chat_id, reservation_id>::with<reservation>,
  /// Deletes the chat's reservation while queued; too_late once started.
  caf::replies_to<atom::cancel, chat_id>::with<reservation>,
  /// The chat's pockets, flags and active reservation.
  caf::replies_to<atom::status, chat_id>::with<chat_status>>;

/// The persistence actor answers the same operations, each one transaction
/// against Postgres, acknowledged only after it committed.
using persistence_actor = api_actor;

/// Serializes the operations of one chat; `stop` ends it after passivation.
using chat_actor = api_actor::extend<caf::reacts_to<atom::stop>>;

/// Routes to chat actors; `idle` is a chat actor's passivation request
/// carrying how many operations it has received so far.
using registry_actor =
  api_actor::extend<caf::reacts_to<atom::idle, chat_id, uint64_t>>;

} // namespace chargeonce
