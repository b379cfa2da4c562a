// SPDX-License-Identifier: Apache-2.0
// The JSON shapes users script against (CLI output, later HTTP).
// Field names are a contract: add, never rename.
#pragma once

#include "protocol/events.hpp"
#include "protocol/history.hpp"
#include "protocol/types.hpp"

#include <caf/fwd.hpp>
#include <nlohmann/json.hpp>

namespace chargeonce {

nlohmann::json to_json(const pockets& x);
nlohmann::json to_json(const reservation& x);
nlohmann::json to_json(const receipt& x);
nlohmann::json to_json(const chat_status& x);
nlohmann::json to_json(const top_up_receipt& x);
nlohmann::json to_json(const grant_info& x);

/// Events: {"event": "<type>", "chat": ..., "reservation": ...}.
nlohmann::json to_json(const queue_notice& x);
nlohmann::json to_json(const reservation_released& x);
nlohmann::json to_json(const cancel_requested& x);
nlohmann::json to_json(const reconcile_needed& x);
nlohmann::json to_json(const resolution& x);
/// {"reservations": [...], "next_after": the last id or null}
nlohmann::json to_json(const unresolved_page& x);
nlohmann::json to_json(const limits_refilled& x);
/// {"event": "credits_expired", "chat", "grant", "credits", "event_id"}.
nlohmann::json to_json(const credits_expired& x);
/// {..., "grant", "credits", "expires_at": ISO 8601, "event_id"}.
nlohmann::json to_json(const credits_expiring& x);
/// {..., "available", "threshold", "cause", "reservation": id or null}.
nlohmann::json to_json(const balance_low& x);
nlohmann::json to_json(const subscription_ended& x);

/// The support view: {"chat", "entries": [...], "next_before": the next
/// page's cursor or null, "truncated"}; an entry carries only the fields
/// its cause has.
nlohmann::json to_json(const history_entry& x);
nlohmann::json to_json(const history_page& x);
/// {"status", "plan_reason", "next_refill_at", "refill_interval_ms",
/// "deadlines": {reservation id: time}, "history": [...]}.
nlohmann::json to_json(const chat_explanation& x);

/// {"error": "<name>", "message": "<context>"}.
nlohmann::json to_json(const caf::error& x);

} // namespace chargeonce
