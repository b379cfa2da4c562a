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
#include "protocol/interfaces.hpp"
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
/// persistence actors (which run them) answer them: `apply`, and the
/// messages of protocol/interfaces.hpp no batch carries.
using operations_actor = unbatched_actor::extend<apply_signature>;

/// What a facade asks of the registry: a chat's operations, the event
/// stream and the reads of every chat. Bad input is refused there, before
/// any chat actor spawns.
using core_actor = operations_actor::extend_with<support_actor>;

} // namespace chargeonce
