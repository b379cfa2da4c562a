// SPDX-License-Identifier: Apache-2.0
// Atoms and the one type-ID block: every type that crosses an actor boundary.
#pragma once

#include "protocol/batch.hpp"
#include "protocol/events.hpp"
#include "protocol/history.hpp"
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
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, heartbeat, "heartbeat")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, subscribe, "subscribe")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, release, "release")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, sweep, "sweep")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, prune, "prune")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, store, "store")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, notice, "notice")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, api, "api")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, touch, "touch")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, top_up, "top_up")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, premium, "premium")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, flags, "flags")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, reactivate, "reactivate")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, flush, "flush")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, batch, "batch")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, count, "count")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, apply, "apply")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, done, "done")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, expire, "expire")

  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::kind))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::reservation_status))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::pockets))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::chat_spec))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::reservation))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::receipt))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::chat_status))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::queue_notice))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::reservation_released))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::limits_refilled))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::sweep_phase))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::sweep_cursor))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::sweep_candidate))
  CAF_ADD_TYPE_ID(chargeonce, (std::vector<chargeonce::sweep_candidate>))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::flags_update))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::top_up_receipt))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::reactivation_cursor))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::reactivation_page))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::operation_type))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::operation))
  CAF_ADD_TYPE_ID(chargeonce, (std::vector<chargeonce::operation>))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::outcome))
  CAF_ADD_TYPE_ID(chargeonce, (std::vector<chargeonce::outcome>))

  // Appended after the types, so that no earlier type ID moves.
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, ping, "ping")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, limits, "limits")
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::limits_update))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::active_count))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::cancel_requested))
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, uncertain, "uncertain")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, resolve, "resolve")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, unresolved, "unresolved")
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::resolution))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::unresolved_page))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::reconcile_needed))
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, history, "history")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, explain, "explain")
  CAF_ADD_ATOM(chargeonce, chargeonce::atom, probe, "probe")
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::history_page))
  CAF_ADD_TYPE_ID(chargeonce, (chargeonce::chat_explanation))

CAF_END_TYPE_ID_BLOCK(chargeonce)
