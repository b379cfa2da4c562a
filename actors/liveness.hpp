// SPDX-License-Identifier: Apache-2.0
// The liveness probe of the server's actors: answered only while the actor
// still runs and reads its mailbox. Local only (GET /readyz), never part of a
// published interface.
#pragma once

#include "protocol/type_ids.hpp"

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

namespace chargeonce {

using ping_signature = caf::replies_to<atom::ping>::with<caf::ok_atom>;

/// Whoever answers the probe: the supervisor, which has the registry answer.
using liveness_actor = caf::typed_actor<ping_signature>;

} // namespace chargeonce
