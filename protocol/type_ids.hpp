// SPDX-License-Identifier: Apache-2.0
// Atoms and the one type-ID block: every type that crosses an actor boundary.
#pragma once

#include "protocol/types.hpp"

#include <caf/atom.hpp>
#include <caf/type_id.hpp>

CAF_BEGIN_TYPE_ID_BLOCK(chargeonce, caf::first_custom_type_id)

  CAF_ADD_ATOM(chargeonce, chargeonce::atom, create, "create")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, reserve, "reserve")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, start, "start")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, commit, "commit")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, fail, "fail")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, cancel, "cancel")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, status, "status")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, idle, "idle")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, stop, "stop")

  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::kind))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::reservation_status))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::pockets))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::chat_spec))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::reservation))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::receipt))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::chat_status))

CAF_END_TYPE_ID_BLOCK(chargeonce)
