// SPDX-License-Identifier: Apache-2.0
// Pocket arithmetic shared by the server, its clients and the model: the
// queues, refusals, commit's clamp and the windows of holds. The decision
// which pocket pays is the SQL's (chargeonce_reserve).
#pragma once

#include "protocol/catalog.hpp"
#include "protocol/errors.hpp"
#include "protocol/types.hpp"

#include <string>
#include <vector>

namespace chargeonce {

/// The refusal of a kind no pocket can pay for: insufficient_messages for
/// text and insufficient_images for image (their names since before the
/// catalog), insufficient_funds for every other kind.
ec insufficient_for(const kind& k);

/// The refusal's message: "chat 42 cannot pay for video (balance: 5 each)".
std::string cannot_pay_message(chat_id chat, const kind_spec& spec);

/// What that message says after the kind's name: "" for the built-in kinds
/// (their messages are as before the catalog), else " (balance: 5 each)".
std::string cannot_pay_detail(const kind_spec& spec);

/// Commit's arithmetic: takes `held` from `amounts`, each pocket stopping at
/// zero (a refill may have lowered it meanwhile), and returns what was taken:
/// the receipt's `charged`.
pockets take_clamped(pockets& amounts, const pockets& held);

/// The part of `x` (a hold, or what a commit of it takes) that falls on the
/// chat's pockets in window `window`, for a job whose hold was taken in
/// window `taken_in`: all of it in the same window; after a refill only its
/// balance part, since the window it was taken in paid the daily part.
pockets in_window(const pockets& x, int64_t taken_in, int64_t window);

/// What the holds of `holding` take from the chat's pockets in window
/// `window` (in_window of each): what status calls `held`.
pockets held_by(const std::vector<reservation>& holding, int64_t window);

/// What `amounts` have left once `held` is set aside, per pocket of
/// `amounts`, never below zero: what a new job may be paid from.
pockets left_after(const pockets& amounts, const pockets& held);

/// The part of a hold that a commit of `units` of its `held_total` units
/// charges, before the clamp: the units from the pockets that expire first
/// (every daily pocket, by name, before balance) at the hold's own price
/// per pocket. `units` of 0 or at least `held_total`: the whole hold.
pockets captured(const pockets& held, const pockets& held_units,
                 int32_t held_total, int32_t units);

/// `x` with the pockets at 0 left out (as the pocket columns keep a receipt's
/// `released`).
pockets without_zeros(const pockets& x);

/// A chat's pockets less its active holds (status' `available`).
pockets spendable(const chat_status& x);

/// The kind's priority queue for premium chats, else its queue.
std::string queue_for(const kind_spec& spec, bool premium);

/// The built-in kinds' queues: `<kind>_generation[_priority]`.
std::string queue_for(const kind& k, bool premium);

} // namespace chargeonce
