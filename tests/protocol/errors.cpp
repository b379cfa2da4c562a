// SPDX-License-Identifier: Apache-2.0
// Error codes are a wire and CLI contract: every code has a stable name that
// round-trips, and errors carry their context across make_error.
#include "protocol/errors.hpp"

#include "protocol/config.hpp"
#include "protocol/json.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <doctest/doctest.h>

using namespace chargeonce;

TEST_SUITE("errors") {

  TEST_CASE("every code's name round-trips and names are unique") {
    std::set<std::string> seen;
    for (int i = 1; i <= static_cast<int>(ec::insufficient_funds);
         ++i) { // the last code
      auto code = static_cast<ec>(i);
      std::string name = to_string(code);
      CHECK(seen.insert(name).second);
      ec parsed = ec::none;
      REQUIRE(from_string(name, parsed));
      CHECK(parsed == code);
    }
    ec ignored;
    CHECK_FALSE(from_string("no_such_error", ignored));
    CHECK_FALSE(from_string("none", ignored));
  }

  TEST_CASE("the contract names of the core errors") {
    CHECK(std::string{to_string(ec::busy)} == "busy");
    CHECK(std::string{to_string(ec::storage_unavailable)}
          == "storage_unavailable");
    CHECK(std::string{to_string(ec::too_late)} == "too_late");
    CHECK(std::string{to_string(ec::insufficient_messages)}
          == "insufficient_messages");
  }

  TEST_CASE("codes are the wire contract: overloaded is 13, internal 14, "
            "insufficient_funds 15, already_started 16") {
    CHECK(static_cast<int>(ec::storage_unavailable) == 8);
    CHECK(static_cast<int>(ec::overloaded) == 13);
    CHECK(static_cast<int>(ec::internal) == 14);
    CHECK(std::string{to_string(ec::internal)} == "internal");
    CHECK(static_cast<int>(ec::insufficient_funds) == 15);
    CHECK(std::string{to_string(ec::insufficient_funds)}
          == "insufficient_funds");
    CHECK(static_cast<int>(ec::already_started) == 16);
    CHECK(std::string{to_string(ec::already_started)} == "already_started");
    CHECK(std::string{to_string(static_cast<ec>(17))} == "unknown");
  }

  TEST_CASE("storage_unavailable advises a retry with the same ids, since "
            "the operation may have been written") {
    std::string text = advice(ec::storage_unavailable);
    CHECK(text.find("may or may not have been written") != std::string::npos);
    CHECK(text.find("retry with the same ids (reserve with the same "
                    "request_id, commit with the same reservation)")
          != std::string::npos);
    CHECK(std::string{advice(ec::internal)}.find("not retried automatically")
          != std::string::npos);
    CHECK(std::string{advice(ec::busy)}.empty());
  }

  TEST_CASE("incident ids are unique and increasing") {
    auto a = next_incident_id();
    auto b = next_incident_id();
    CHECK(a > 0);
    CHECK(b > a);
  }

  TEST_CASE("an error keeps code, category and message; JSON shows both") {
    auto err = caf::make_error(ec::busy, "chat 42 has reservation 17");
    CHECK(err == ec::busy);
    CHECK(error_name(err) == "busy");
    CHECK(error_message(err) == "chat 42 has reservation 17");
    auto js = to_json(err);
    CHECK(js["error"] == "busy");
    CHECK(js["message"] == "chat 42 has reservation 17");
  }

  TEST_CASE("the registered category renders our names") {
    caf::actor_system_config cfg;
    register_protocol(cfg);
    caf::actor_system sys{cfg};
    auto text = sys.render(caf::make_error(ec::too_late, "started"));
    CHECK(text.find("too_late") != std::string::npos);
    CHECK(error_name(caf::make_error(caf::sec::request_timeout))
          == "request_timeout");
  }

} // TEST_SUITE
