// SPDX-License-Identifier: Apache-2.0
// The pricing decision made at reserve time: which pocket pays, which queue.
#pragma once

#include "protocol/errors.hpp"
#include "protocol/types.hpp"

#include <string>
#include <vector>

namespace chargeonce {

/// What reserve decided: the hold per pocket and the worker queue.
struct pocket_choice {
  pockets held;
  std::string queue;
};

/// Decides the hold for one job. What expires first is spent first: the
/// daily pockets before purchased balance. Text for premium chats is free;
/// text never falls back to balance. `ec::none` means the choice is valid.
ec choose_pockets(kind k, bool premium, const pockets& available,
                  pocket_choice& out);

/// The sum of the holds of `active`.
pockets held_by(const std::vector<reservation>& active);

/// What `amounts` have left once `held` is set aside, per pocket, never
/// below zero: what a new job may be paid from.
pockets left_after(const pockets& amounts, const pockets& held);

/// A chat's pockets less its active holds (status' `available`).
pockets spendable(const chat_status& x);

/// `<kind>_generation_priority` for premium chats, else `<kind>_generation`.
std::string queue_for(kind k, bool premium);

} // namespace chargeonce
