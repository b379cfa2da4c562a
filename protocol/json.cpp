// SPDX-License-Identifier: Apache-2.0
#include "protocol/json.hpp"

#include "protocol/errors.hpp"
#include "protocol/pockets.hpp"
#include "protocol/time.hpp"

#include <caf/error.hpp>

namespace chargeonce {

namespace {

nlohmann::json optional_time(const caf::optional<caf::timestamp>& t) {
  return t ? nlohmann::json(format_iso8601(*t)) : nlohmann::json(nullptr);
}

/// Only the pockets `x` names (not the built-in three always), by name.
nlohmann::json named_amounts(const pockets& x) {
  auto out = nlohmann::json::object();
  for (const auto& [name, amount] : x.items())
    out[name] = amount;
  return out;
}

} // namespace

nlohmann::json to_json(const pockets& x) {
  // The built-in pockets always, as before the catalog; then the others.
  nlohmann::json out = {{pocket::daily_messages, x.get(pocket::daily_messages)},
                        {pocket::daily_images, x.get(pocket::daily_images)},
                        {pocket::balance, x.get(pocket::balance)}};
  for (const auto& [name, amount] : x.items())
    out[name] = amount;
  return out;
}

nlohmann::json to_json(const reservation& x) {
  nlohmann::json out = {{"id", x.id},
                        {"chat", x.chat},
                        {"kind", to_string(x.kind)},
                        {"status", to_string(x.status)},
                        {"queue", x.queue},
                        {"held", to_json(x.held)},
                        {"request_id", x.request_id},
                        {"created_at", format_iso8601(x.created_at)},
                        {"lease_expires_at", optional_time(x.lease_expires_at)},
                        {"slot", x.slot},
                        {"ended_at", optional_time(x.ended_at)},
                        {"units", x.units},
                        {"cancel_requested", x.cancel_requested},
                        {"window", x.window}};
  if (x.status == reservation_status::outcome_unknown) {
    out["provider_ref"] = x.provider_ref;
    out["uncertain_at"] = optional_time(x.uncertain_at);
  }
  return out;
}

nlohmann::json to_json(const resolution& x) {
  return {{"reservation", x.reservation},
          {"chat", x.chat},
          {"kind", to_string(x.kind)},
          {"outcome", x.outcome},
          {"charged", to_json(x.charged)},
          {"released", to_json(x.released)},
          {"units", x.units},
          {"resolved_at", format_iso8601(x.resolved_at)},
          {"provider_ref", x.provider_ref},
          {"window", x.window}};
}

nlohmann::json to_json(const unresolved_page& x) {
  auto jobs = nlohmann::json::array();
  for (const auto& r : x.jobs)
    jobs.push_back(to_json(r));
  // The cursor of the next page: after the last id.
  nlohmann::json next = nullptr;
  if (!x.jobs.empty())
    next = x.jobs.back().id;
  return {{"reservations", std::move(jobs)}, {"next_after", next}};
}

nlohmann::json to_json(const receipt& x) {
  return {{"reservation", x.reservation},
          {"chat", x.chat},
          {"kind", to_string(x.kind)},
          {"charged", to_json(x.charged)},
          {"committed_at", format_iso8601(x.committed_at)},
          {"units", x.units},
          {"released", to_json(x.released)},
          {"window", x.window}};
}

nlohmann::json to_json(const chat_status& x) {
  auto out = to_json(x.amounts);
  // Every pocket of the catalog, the built-in ones included.
  out["pockets"] = named_amounts(x.amounts);
  out["chat"] = x.chat;
  out["premium"] = x.premium;
  out["premium_until"] = optional_time(x.premium_until);
  out["started"] = x.started;
  out["blocked"] = x.blocked;
  out["banned"] = x.banned;
  // The oldest active job, for gateways written when there was one at most.
  out["reservation"] = x.active ? to_json(*x.active) : nlohmann::json(nullptr);
  out["max_active_jobs"] = x.max_active_jobs;
  out["balance_low_threshold"] = x.balance_low_threshold;
  out["held"] = to_json(x.held);
  out["available"] = to_json(spendable(x));
  auto all = nlohmann::json::array();
  for (const auto& r : x.reservations)
    all.push_back(to_json(r));
  out["reservations"] = std::move(all);
  out["plan"] = x.premium ? "premium" : "free";
  out["window"] = x.window;
  out["window_started_at"] = optional_time(x.window_started_at);
  out["last_activity_at"] = optional_time(x.last_activity_at);
  auto grants = nlohmann::json::array();
  for (const auto& g : x.grants)
    grants.push_back(to_json(g));
  out["grants"] = std::move(grants);
  return out;
}

nlohmann::json to_json(const top_up_receipt& x) {
  nlohmann::json out{{"chat", x.chat},
                     {"payment_id", x.payment_id},
                     {"credits", x.credits},
                     {"purchased_at", format_iso8601(x.purchased_at)},
                     {"source", x.source},
                     {"priority", x.priority},
                     {"expires_at", optional_time(x.expires_at)}};
  // A top-up of 0.2 made no grant.
  out["grant_id"] =
    x.grant_id != 0 ? nlohmann::json(x.grant_id) : nlohmann::json(nullptr);
  out["expires_in_ms"] = x.expires_in_ms != 0 ? nlohmann::json(x.expires_in_ms)
                                              : nlohmann::json(nullptr);
  return out;
}

nlohmann::json to_json(const grant_info& x) {
  nlohmann::json out{{"id", x.id},
                     {"chat", x.chat},
                     {"source", x.source},
                     {"credits", x.credits},
                     {"left", x.left},
                     {"held", x.held},
                     {"priority", x.priority},
                     {"expires_at", optional_time(x.expires_at)},
                     {"created_at", format_iso8601(x.created_at)},
                     {"expired_at", optional_time(x.expired_at)},
                     {"voided_at", optional_time(x.voided_at)},
                     {"expired", x.expired},
                     {"voided", x.voided}};
  out["payment_id"] = x.payment_id.empty() ? nlohmann::json(nullptr)
                                           : nlohmann::json(x.payment_id);
  return out;
}

nlohmann::json to_json(const queue_notice& x) {
  return {{"event", "queue_notice"},
          {"chat", x.chat},
          {"reservation", x.reservation}};
}

nlohmann::json to_json(const reservation_released& x) {
  return {{"event", "reservation_released"},
          {"chat", x.chat},
          {"reservation", x.reservation},
          {"reason", x.reason},
          {"event_id", x.id}};
}

nlohmann::json to_json(const cancel_requested& x) {
  return {{"event", "cancel_requested"},
          {"chat", x.chat},
          {"reservation", x.reservation},
          {"event_id", x.id}};
}

nlohmann::json to_json(const reconcile_needed& x) {
  return {{"event", "reconcile_needed"},
          {"chat", x.chat},
          {"reservation", x.reservation},
          {"provider_ref", x.provider_ref},
          {"event_id", x.id}};
}

nlohmann::json to_json(const limits_refilled& x) {
  return {{"event", "limits_refilled"}, {"chat", x.chat}, {"event_id", x.id}};
}

nlohmann::json to_json(const credits_expired& x) {
  return {{"event", "credits_expired"},
          {"chat", x.chat},
          {"grant", x.grant},
          {"credits", x.credits},
          {"event_id", x.id}};
}

nlohmann::json to_json(const credits_expiring& x) {
  return {{"event", "credits_expiring"},
          {"chat", x.chat},
          {"grant", x.grant},
          {"credits", x.credits},
          {"expires_at", format_iso8601(x.expires_at)},
          {"event_id", x.id}};
}

nlohmann::json to_json(const balance_low& x) {
  return {{"event", "balance_low"},
          {"chat", x.chat},
          {"available", x.available},
          {"threshold", x.threshold},
          {"cause", x.cause},
          {"reservation", x.reservation != 0 ? nlohmann::json(x.reservation)
                                             : nlohmann::json(nullptr)},
          {"event_id", x.id}};
}

nlohmann::json to_json(const subscription_ended& x) {
  return {{"event", "subscription_ended"},
          {"reason", x.reason},
          {"last_event_id", x.last_id}};
}

nlohmann::json to_json(const history_entry& x) {
  nlohmann::json out = {
    {"at", format_iso8601(x.at)}, {"cause", x.cause}, {"detail", x.detail}};
  // Which grants of the balance it took, made, ended or holds: why a job
  // was paid from which.
  auto grants = nlohmann::json::array();
  for (const auto& g : x.grants)
    grants.push_back({{"grant", g.grant}, {"credits", g.credits}});
  out["grants"] = std::move(grants);
  // Which window a job's hold belongs to, a commit was paid by, a refill
  // opened; top-ups and admin rows have none.
  if (x.window)
    out["window"] = *x.window;
  if (x.cause == "reservation") {
    out["reservation"] = x.reservation;
    out["kind"] = x.kind;
    out["status"] = x.status;
    out["request_id"] = x.request_id;
    out["held"] = to_json(x.held);
    out["units"] = x.units;
    out["created_at"] = optional_time(x.created_at);
    out["deadline"] = optional_time(x.deadline);
    out["cancel_requested"] = x.cancel_requested;
    return out;
  }
  out["ledger_id"] = x.ledger_id;
  // Every pocket the row changed, signed; `after` is null for rows written
  // before the ledger kept the pockets.
  out["change"] = named_amounts(x.change);
  out["after"] = x.after ? to_json(*x.after) : nlohmann::json(nullptr);
  if (x.cause == "commit") {
    out["reservation"] = x.reservation;
    out["kind"] = x.kind;
    out["request_id"] = x.request_id;
    out["units"] = x.units;
    out["released"] = to_json(x.released);
  } else if (x.cause == "top_up") {
    out["payment_id"] = x.payment_id;
  }
  return out;
}

namespace {

nlohmann::json entries_of(const std::vector<history_entry>& xs) {
  auto out = nlohmann::json::array();
  for (const auto& e : xs)
    out.push_back(to_json(e));
  return out;
}

} // namespace

nlohmann::json to_json(const history_page& x) {
  return {{"chat", x.chat},
          {"entries", entries_of(x.entries)},
          {"next_before", x.next_before != 0 ? nlohmann::json(x.next_before)
                                             : nlohmann::json(nullptr)},
          {"truncated", x.truncated}};
}

nlohmann::json to_json(const chat_explanation& x) {
  auto deadlines = nlohmann::json::object();
  for (size_t i = 0; i < x.status.reservations.size(); ++i)
    deadlines[std::to_string(x.status.reservations[i].id)] =
      i < x.deadlines.size() ? optional_time(x.deadlines[i])
                             : nlohmann::json(nullptr);
  return {{"chat", x.status.chat},
          {"status", to_json(x.status)},
          {"plan", x.status.premium ? "premium" : "free"},
          {"plan_reason", x.plan_reason},
          {"window_started_at", optional_time(x.status.window_started_at)},
          {"next_refill_at", optional_time(x.next_refill_at)},
          {"refill_interval_ms", x.refill_interval_ms},
          {"deadlines", std::move(deadlines)},
          {"history", entries_of(x.recent.entries)}};
}

nlohmann::json to_json(const caf::error& x) {
  return {{"error", error_name(x)}, {"message", error_message(x)}};
}

} // namespace chargeonce
