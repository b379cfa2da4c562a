// SPDX-License-Identifier: Apache-2.0
// Pocket arithmetic the server's answers need: refusals, the windows of
// holds, what is left. Every decision (which pocket pays, commit's clamp)
// is the SQL's; the tools' C++ rendition of commit's arithmetic is in
// tools/common/pocket_model.hpp.
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

/// What that message says after the kind's name: "" for the built-in kinds
/// (their messages are as before the catalog), else " (balance: 5 each)".
std::string cannot_pay_detail(const kind_spec& spec);

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

/// A chat's pockets less its active holds (status' `available`).
pockets spendable(const chat_status& x);

} // namespace chargeonce
