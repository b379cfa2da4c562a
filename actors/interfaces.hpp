// SPDX-License-Identifier: Apache-2.0
// The interfaces the server's own actors speak among themselves. A client's
// operation is converted once, at the facade that received it: the eight
// operations a batch may carry travel on as one `apply` message carrying
// the wire's `operation` and come back as one `outcome`, through the
// registry, the chat actor and the persistence actor. The rest keep their
// published messages: each carries fields no batch carries.
#pragma once

#include "protocol/batch.hpp"
#include "protocol/history.hpp"
#include "protocol/type_ids.hpp"
#include "protocol/types.hpp"

#include <caf/actor.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <string>

namespace chargeonce {

/// One of the eight batchable operations (is_valid), answered as one
/// outcome: its error, or its value. A refusal is an outcome's error; an
/// error message instead (a dead actor, a timeout) means no answer came.
using apply_signature = caf::replies_to<atom::apply, operation>::with<outcome>;

/// A chat's operations, as the chat actors (which serialize them) and the
/// persistence actors (which run them) answer them. The messages other than
/// `apply` mean what the same messages of protocol/interfaces.hpp mean.
using operations_actor = caf::typed_actor<
  apply_signature, caf::replies_to<atom::create, chat_spec>::with<chat_status>,
  caf::replies_to<atom::uncertain, chat_id, reservation_id, std::string,
                  std::string>::with<reservation>,
  caf::replies_to<atom::uncertain, chat_id, reservation_id,
                  std::string>::with<reservation>,
  caf::replies_to<atom::resolve, chat_id, reservation_id, std::string,
                  int32_t>::with<resolution>,
  caf::replies_to<atom::top_up, chat_id, int64_t,
                  std::string>::with<top_up_receipt>,
  caf::replies_to<atom::premium, chat_id, caf::timestamp>::with<chat_status>,
  caf::replies_to<atom::flags, chat_id, flags_update>::with<chat_status>,
  caf::replies_to<atom::limits, chat_id, limits_update>::with<chat_status>>;

/// What a facade asks of the registry: a chat's operations, the event
/// stream and the reads of every chat. Bad input is refused there, before
/// any chat actor spawns.
using core_actor = operations_actor::extend<
  caf::replies_to<atom::subscribe, caf::actor>::with<bool>,
  caf::replies_to<atom::subscribe, caf::actor, event_id>::with<bool>,
  caf::replies_to<atom::resolve, chat_id, reservation_id,
                  std::string>::with<resolution>,
  caf::replies_to<atom::unresolved, reservation_id,
                  uint32_t>::with<unresolved_page>,
  caf::replies_to<atom::history, chat_id, int64_t,
                  uint32_t>::with<history_page>,
  caf::replies_to<atom::explain, chat_id>::with<chat_explanation>>;

} // namespace chargeonce
