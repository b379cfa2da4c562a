// SPDX-License-Identifier: Apache-2.0
// The model's pricing decision: the rule chargeonce_reserve implements
// (persistence/functions/04_reserve.sql), written again in C++ so that the
// simulation's model persistence decides as the server does. The server
// itself carries only the SQL.
#pragma once

#include "protocol/catalog.hpp"
#include "protocol/errors.hpp"
#include "protocol/types.hpp"

#include <string>

namespace chargeonce::test {

/// What reserve decided: the hold per pocket, the units each pocket's hold
/// pays for, and the worker queue.
struct pocket_choice {
  pockets held;
  pockets held_units;
  std::string queue;
};

/// Decides the hold for one job of `units` units (at least 1) of the kind
/// `spec` describes: its pay_from in order (what expires first comes
/// first), each pocket paying as many of the units left as its amount
/// covers at its price, until all are paid; a premium chat holds nothing
/// for a premium-free kind. All or nothing: `ec::none` means the choice is
/// valid; otherwise the refusal insufficient_for(spec) names.
ec choose_pockets(const kind_spec& spec, bool premium, const pockets& available,
                  int32_t units, pocket_choice& out);

/// One unit (as before units existed).
ec choose_pockets(const kind_spec& spec, bool premium, const pockets& available,
                  pocket_choice& out);

/// The built-in catalog's rules: text from daily messages only (free for
/// premium chats), image from daily images, then balance.
ec choose_pockets(const kind& k, bool premium, const pockets& available,
                  pocket_choice& out);

} // namespace chargeonce::test
