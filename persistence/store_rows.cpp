// SPDX-License-Identifier: Apache-2.0
// Rows of the server-side functions' answers as the domain's structs.
#include "persistence/store_internal.hpp"

#include <nlohmann/json.hpp>

namespace chargeonce::persistence::detail {

namespace {

caf::optional<caf::timestamp> optional_micros(const nlohmann::json& x) {
  if (x.is_null())
    return caf::none;
  return from_unix_micros(x.get<int64_t>());
}

} // namespace

std::vector<reservation> reservations_from_json(const std::string& text,
                                                pocket_ordinals& ordinals) {
  std::vector<reservation> out;
  // Written by chargeonce_reservations_json: a malformed array is a bug, and
  // nlohmann's exceptions are classified as one.
  for (const auto& j : nlohmann::json::parse(text)) {
    reservation x;
    x.id = j.at("id").get<int64_t>();
    x.chat = j.at("chat").get<int64_t>();
    from_string(j.at("kind").get<std::string>(), x.kind);
    from_string(j.at("status").get<std::string>(), x.status);
    x.queue = j.at("queue").get<std::string>();
    x.held = ordinals.read(j.at("held"));
    x.request_id = j.at("request_id").get<std::string>();
    x.created_at = from_unix_micros(j.at("created_us").get<int64_t>());
    x.lease_expires_at = optional_micros(j.at("lease_us"));
    x.slot = j.at("slot").get<int32_t>();
    x.units = j.at("units").get<int32_t>();
    x.held_units = ordinals.read(j.at("held_units"));
    x.cancel_requested = j.at("cancel_requested").get<bool>();
    if (const auto& ref = j.at("provider_ref"); !ref.is_null())
      x.provider_ref = ref.get<std::string>();
    x.uncertain_at = optional_micros(j.at("uncertain_us"));
    x.window = j.at("window").get<int64_t>();
    out.push_back(std::move(x));
  }
  return out;
}

std::vector<grant_info> grants_from_json(const std::string& text,
                                         chat_id chat) {
  std::vector<grant_info> out;
  // Written by chargeonce_grants_json, as the reservations above.
  for (const auto& j : nlohmann::json::parse(text)) {
    grant_info x;
    x.id = j.at("id").get<int64_t>();
    x.chat = chat;
    x.source = j.at("source").get<std::string>();
    x.credits = j.at("credits").get<int32_t>();
    x.left = j.at("left").get<int32_t>();
    x.held = j.at("held").get<int32_t>();
    x.priority = j.at("priority").get<int32_t>();
    x.expires_at = optional_micros(j.at("expires_us"));
    if (const auto& id = j.at("payment_id"); !id.is_null())
      x.payment_id = id.get<std::string>();
    x.created_at = from_unix_micros(j.at("created_us").get<int64_t>());
    x.expired_at = optional_micros(j.at("expired_us"));
    x.voided_at = optional_micros(j.at("voided_us"));
    x.expired = j.at("expired").get<bool>();
    x.voided = j.at("voided").get<bool>();
    out.push_back(std::move(x));
  }
  return out;
}

} // namespace chargeonce::persistence::detail
