// SPDX-License-Identifier: Apache-2.0
// The JSON field names users script against (CLI output, watch lines).
#include "protocol/json.hpp"

#include "protocol/errors.hpp"
#include "protocol/time.hpp"

#include <doctest/doctest.h>

using namespace chargeonce;

TEST_SUITE("json") {

  TEST_CASE("events carry event, chat and reservation (and reason), and the "
            "durable ones their event_id") {
    auto notice = to_json(queue_notice{42, 7});
    CHECK(notice
          == nlohmann::json{
            {"event", "queue_notice"}, {"chat", 42}, {"reservation", 7}});
    auto released = to_json(reservation_released{-5, 9, "lease_expired", 123});
    CHECK(released["event"] == "reservation_released");
    CHECK(released["event_id"] == 123);
    CHECK(released["chat"] == -5);
    CHECK(released["reservation"] == 9);
    CHECK(released["reason"] == "lease_expired");
    auto refilled = to_json(limits_refilled{11, 5});
    CHECK(refilled
          == nlohmann::json{
            {"event", "limits_refilled"}, {"chat", 11}, {"event_id", 5}});
    CHECK(to_json(subscription_ended{"too_slow", 77})
          == nlohmann::json{{"event", "subscription_ended"},
                            {"reason", "too_slow"},
                            {"last_event_id", 77}});
  }

  TEST_CASE("a reservation shows its hold per pocket and its lease") {
    reservation r;
    r.id = 3;
    r.chat = 42;
    r.kind = kind::image;
    r.status = reservation_status::in_progress;
    r.queue = "image_generation";
    r.held = {0, 1, 0};
    r.created_at = from_unix_micros(0);
    auto js = to_json(r);
    CHECK(js["kind"] == "image");
    CHECK(js["status"] == "in_progress");
    CHECK(js["held"]
          == nlohmann::json{
            {"daily_messages", 0}, {"daily_images", 1}, {"balance", 0}});
    CHECK(js["created_at"] == "1970-01-01T00:00:00.000000Z");
    CHECK(js["lease_expires_at"].is_null());
    r.lease_expires_at = from_unix_micros(1000000);
    CHECK(to_json(r)["lease_expires_at"] == "1970-01-01T00:00:01.000000Z");
  }

  TEST_CASE("the job lifecycle's fields: cancel_requested always, "
            "provider_ref and uncertain_at for outcome_unknown only; the "
            "resolution, the unresolved page and their events") {
    reservation r;
    r.id = 4;
    r.chat = 42;
    r.created_at = from_unix_micros(0);
    r.status = reservation_status::in_progress;
    r.cancel_requested = true;
    auto running = to_json(r);
    CHECK(running["cancel_requested"] == true);
    CHECK_FALSE(running.contains("provider_ref"));
    r.status = reservation_status::outcome_unknown;
    r.slot = -1;
    r.provider_ref = "prov-1";
    r.uncertain_at = from_unix_micros(1'000'000);
    auto unknown = to_json(r);
    CHECK(unknown["status"] == "outcome_unknown");
    CHECK(unknown["slot"] == -1);
    CHECK(unknown["provider_ref"] == "prov-1");
    CHECK(unknown["uncertain_at"] == "1970-01-01T00:00:01.000000Z");
    resolution x{4,         42, kind::image,         "succeeded", {0, 0, 1},
                 {0, 0, 2}, 1,  from_unix_micros(0), "prov-1"};
    auto resolved = to_json(x);
    CHECK(resolved["outcome"] == "succeeded");
    CHECK(resolved["charged"]["balance"] == 1);
    CHECK(resolved["released"]["balance"] == 2);
    CHECK(resolved["units"] == 1);
    CHECK(resolved["provider_ref"] == "prov-1");
    CHECK(to_json(unresolved_page{})
          == nlohmann::json{{"reservations", nlohmann::json::array()},
                            {"next_after", nullptr}});
    CHECK(to_json(unresolved_page{{r}})["next_after"] == 4);
    CHECK(to_json(reconcile_needed{42, 4, "prov-1", 8})
          == nlohmann::json{{"event", "reconcile_needed"},
                            {"chat", 42},
                            {"reservation", 4},
                            {"provider_ref", "prov-1"},
                            {"event_id", 8}});
    CHECK(to_json(cancel_requested{42, 4, 9})
          == nlohmann::json{{"event", "cancel_requested"},
                            {"chat", 42},
                            {"reservation", 4},
                            {"event_id", 9}});
  }

  TEST_CASE("grant and balance events name their grant, credits, expiry, "
            "threshold and cause") {
    CHECK(to_json(credits_expired{42, 7, 5, 10})
          == nlohmann::json{{"event", "credits_expired"},
                            {"chat", 42},
                            {"grant", 7},
                            {"credits", 5},
                            {"event_id", 10}});
    auto at = parse_iso8601("2026-03-01T12:00:00Z");
    REQUIRE(at);
    CHECK(to_json(credits_expiring{42, 7, 5, *at, 11})
          == nlohmann::json{{"event", "credits_expiring"},
                            {"chat", 42},
                            {"grant", 7},
                            {"credits", 5},
                            {"expires_at", format_iso8601(*at)},
                            {"event_id", 11}});
    CHECK(to_json(balance_low{42, 4, 5, "reserve", 9, 12})
          == nlohmann::json{{"event", "balance_low"},
                            {"chat", 42},
                            {"available", 4},
                            {"threshold", 5},
                            {"cause", "reserve"},
                            {"reservation", 9},
                            {"event_id", 12}});
    CHECK(to_json(balance_low{42, 0, 5, "expire", 0, 13})["reservation"]
          == nullptr);
  }

  TEST_CASE("a chat shows pockets, plan, window and its reservation") {
    chat_status st;
    st.chat = 8;
    st.amounts = {1, 2, 3};
    st.premium = true;
    st.balance_low_threshold = 4;
    auto js = to_json(st);
    CHECK(js["balance_low_threshold"] == 4);
    CHECK(js["plan"] == "premium");
    CHECK(js["daily_messages"] == 1);
    CHECK(js["balance"] == 3);
    CHECK(js["window_started_at"].is_null());
    CHECK(js["reservation"].is_null());
    st.premium = false;
    CHECK(to_json(st)["plan"] == "free");
  }

  TEST_CASE("receipts and top-ups") {
    auto receipt_js =
      to_json(receipt{3, 42, kind::text, {1, 0, 0}, from_unix_micros(0)});
    CHECK(receipt_js["reservation"] == 3);
    CHECK(receipt_js["charged"]["daily_messages"] == 1);
    auto top_up_js =
      to_json(top_up_receipt{42, "pay-1", 10, from_unix_micros(0)});
    CHECK(top_up_js["payment_id"] == "pay-1");
    CHECK(top_up_js["credits"] == 10);
    // The fields of 0.2 keep their values; a receipt of then names no grant.
    CHECK(top_up_js["chat"] == 42);
    CHECK(top_up_js["purchased_at"] == "1970-01-01T00:00:00.000000Z");
    CHECK(top_up_js["grant_id"].is_null());
    CHECK(top_up_js["source"] == "purchase");
    CHECK(top_up_js["priority"] == 100);
    CHECK(top_up_js["expires_at"].is_null());
    CHECK(top_up_js["expires_in_ms"].is_null());
    top_up_receipt promo{42, "pay-2", 3, from_unix_micros(0)};
    promo.grant_id = 7;
    promo.source = "promo";
    promo.priority = 5;
    promo.expires_at = from_unix_micros(86'400'000'000);
    promo.expires_in_ms = 86'400'000;
    auto promo_js = to_json(promo);
    CHECK(promo_js["grant_id"] == 7);
    CHECK(promo_js["source"] == "promo");
    CHECK(promo_js["priority"] == 5);
    CHECK(promo_js["expires_at"] == "1970-01-02T00:00:00.000000Z");
    CHECK(promo_js["expires_in_ms"] == 86'400'000);
  }

} // TEST_SUITE
