// SPDX-License-Identifier: Apache-2.0
// Commit's arithmetic written again in C++, for the tools that check the
// server from outside: the simulation's model persistence and the chaos
// auditor. The server carries only the SQL (persistence/functions/
// 02_pockets.sql and 06_commit.sql).
#pragma once

#include "protocol/catalog.hpp"
#include "protocol/types.hpp"

#include <cstdint>
#include <string>

namespace chargeonce {

/// Takes `held` from `amounts`, each pocket stopping at zero (a refill may
/// have lowered it meanwhile), and returns what was taken: the receipt's
/// `charged` (chargeonce_pockets_charged, chargeonce_pockets_take).
pockets take_clamped(pockets& amounts, const pockets& held);

/// The part of a hold that a commit of `units` of its `held_total` units
/// charges, before the clamp: the units from the pockets that expire first
/// (every daily pocket, by name, before balance) at the hold's own price
/// per pocket. `units` of 0 or at least `held_total`: the whole hold
/// (chargeonce_captured).
pockets captured(const pockets& held, const pockets& held_units,
                 int32_t held_total, int32_t units);

/// `x` with the pockets at 0 left out (as the pocket columns keep a receipt's
/// `released`).
pockets without_zeros(const pockets& x);

/// The kind's priority queue for premium chats, else its queue
/// (chargeonce_queue).
std::string queue_for(const kind_spec& spec, bool premium);

} // namespace chargeonce
