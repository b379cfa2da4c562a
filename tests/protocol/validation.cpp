// SPDX-License-Identifier: Apache-2.0
// Bad input is a typed invalid_argument, decided before anything is routed.
#include "protocol/validation.hpp"

#include "protocol/errors.hpp"

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <doctest/doctest.h>

using namespace chargeonce;

TEST_SUITE("validation") {

  TEST_CASE("chat ids may be negative but not zero") {
    CHECK_FALSE(validate_chat(-1001234));
    CHECK(validate_chat(0) == ec::invalid_argument);
  }

  TEST_CASE("reservation ids must be positive") {
    CHECK_FALSE(validate_reservation(1, 1));
    CHECK(validate_reservation(1, 0) == ec::invalid_argument);
    CHECK(validate_reservation(1, -5) == ec::invalid_argument);
    CHECK(validate_reservation(0, 5) == ec::invalid_argument);
  }

  TEST_CASE("kinds no catalog can name and oversized request ids are "
            "refused") {
    CHECK_FALSE(validate_reserve(1, kind::image, "job-1"));
    CHECK_FALSE(validate_reserve(1, kind{"voice_2"}, "job-1"));
    for (const char* bad : {"", "Voice", "2x", "a b", "x;DROP"})
      CHECK(validate_reserve(1, kind{bad}, "") == ec::invalid_argument);
    CHECK(validate_reserve(1, kind{std::string(33, 'a')}, "")
          == ec::invalid_argument);
    CHECK(validate_reserve(1, kind::text, std::string(257, 'x'))
          == ec::invalid_argument);
  }

  TEST_CASE("request and payment ids must be UTF-8 without NUL bytes "
            "(what Postgres text holds)") {
    using namespace std::string_literals;
    for (auto good : {"job-1"s, "ключ-7"s, "\xf0\x9f\x92\xb3 card"s,
                      "quote \" back\\slash {a,b}"s, ""s}) {
      CHECK_FALSE(validate_reserve(1, kind::text, good));
      CHECK_FALSE(validate_top_up(1, 5, good.empty() ? "p"s : good));
    }
    for (auto bad : {"a\0b"s, "\xff"s, "\xc0\xaf"s, "\xed\xa0\x80"s,
                     "\xf4\x90\x80\x80"s, "\xe2\x82"s, "x\x80"s}) {
      INFO("bytes: ", bad.size());
      CHECK(validate_reserve(1, kind::text, bad) == ec::invalid_argument);
      CHECK(validate_top_up(1, 5, bad) == ec::invalid_argument);
    }
  }

  TEST_CASE("a top-up's grant terms: priority 0 to 1000, a known source, "
            "one expiry at most, a relative one of 1 ms to 100 years") {
    CHECK_FALSE(validate_top_up(1, 5, "p", grant_terms{}));
    grant_terms t;
    t.priority = 0;
    t.source = "promo";
    t.expires_in_ms = grant_expires_in_ms_max;
    CHECK_FALSE(validate_top_up(1, 5, "p", t));
    t.priority = 1000;
    t.source = "admin";
    t.expires_in_ms = 0;
    t.expires_at = caf::make_timestamp();
    CHECK_FALSE(validate_top_up(1, 5, "p", t));
    auto bad = [](auto change) {
      grant_terms x;
      change(x);
      return validate_top_up(1, 5, "p", x) == ec::invalid_argument;
    };
    CHECK(bad([](grant_terms& x) { x.priority = -1; }));
    CHECK(bad([](grant_terms& x) { x.priority = 1001; }));
    CHECK(bad([](grant_terms& x) { x.source = "gift"; }));
    CHECK(bad([](grant_terms& x) { x.source = ""; }));
    CHECK(bad([](grant_terms& x) { x.expires_in_ms = -1; }));
    CHECK(bad(
      [](grant_terms& x) { x.expires_in_ms = grant_expires_in_ms_max + 1; }));
    CHECK(bad([](grant_terms& x) {
      x.expires_in_ms = 1;
      x.expires_at = caf::make_timestamp();
    }));
    // The top-up's own checks come first.
    CHECK(validate_top_up(1, 0, "p", grant_terms{}) == ec::invalid_argument);
  }

  TEST_CASE("void-grant names a grant of 1 or more or a payment id, one of "
            "them") {
    CHECK_FALSE(validate_void_grant(1, 5, ""));
    CHECK_FALSE(validate_void_grant(1, 0, "p"));
    CHECK(validate_void_grant(1, 0, "") == ec::invalid_argument);
    CHECK(validate_void_grant(1, 5, "p") == ec::invalid_argument);
    CHECK(validate_void_grant(1, -5, "") == ec::invalid_argument);
    CHECK(validate_void_grant(0, 5, "") == ec::invalid_argument);
    CHECK(validate_void_grant(1, 0, std::string("a\0b", 3))
          == ec::invalid_argument);
  }

  TEST_CASE("negative pocket amounts are refused") {
    CHECK_FALSE(validate_spec(chat_spec{5, {0, 0, 0}, caf::none, caf::none}));
    CHECK(validate_spec(chat_spec{5, {-1, 0, 0}, caf::none, caf::none})
          == ec::invalid_argument);
    CHECK(validate_spec(chat_spec{5, {0, 0, -1}, caf::none, caf::none})
          == ec::invalid_argument);
  }

  TEST_CASE("pockets off the wire that name a pocket twice, out of order or "
            "beyond a catalog's count are refused") {
    // What a peer can send: the serialized form of any list of pairs.
    auto from_wire = [](std::vector<std::pair<std::string, int32_t>> items) {
      std::vector<char> buf;
      caf::binary_serializer sink{nullptr, buf};
      REQUIRE_FALSE(sink(items));
      pockets out;
      caf::binary_deserializer source{nullptr, buf};
      REQUIRE_FALSE(source(out));
      return out;
    };
    auto spec_of = [](const pockets& p) {
      return chat_spec{5, p, caf::none, caf::none};
    };
    CHECK_FALSE(
      validate_spec(spec_of(from_wire({{"balance", 1}, {"daily_images", 2}}))));
    CHECK(validate_spec(spec_of(from_wire({{"balance", 1}, {"balance", 2}})))
          == ec::invalid_argument);
    CHECK(
      validate_spec(spec_of(from_wire({{"daily_images", 1}, {"balance", 2}})))
      == ec::invalid_argument);
    std::vector<std::pair<std::string, int32_t>> many;
    for (char c = 'a'; c <= 'q'; ++c) // 17 pockets
      many.emplace_back(std::string{"p"} + c, 1);
    CHECK(validate_spec(spec_of(from_wire(many))) == ec::invalid_argument);
    CHECK(validate_spec(spec_of(from_wire({{"Gold", 1}})))
          == ec::invalid_argument);
  }

  TEST_CASE("set-limits sets a job limit of 1 to 64, a balance-low threshold "
            "of 0 or more, or both, and something") {
    auto update = [](caf::optional<int32_t> jobs, bool set_jobs,
                     caf::optional<int32_t> low, bool set_low) {
      return limits_update{jobs, set_jobs, low, set_low};
    };
    CHECK_FALSE(validate_limits(update(2, true, caf::none, false)));
    CHECK_FALSE(validate_limits(update(caf::none, false, 0, true)));
    CHECK_FALSE(validate_limits(update(caf::none, false, caf::none, true)));
    CHECK_FALSE(validate_limits(update(caf::none, true, 2'000'000, true)));
    CHECK(validate_limits(update(caf::none, false, -1, true))
          == ec::invalid_argument);
    CHECK(validate_limits(update(0, true, 5, true)) == ec::invalid_argument);
    CHECK(validate_limits(update(caf::none, false, caf::none, false))
          == ec::invalid_argument);
    // What is not set is not checked: the old limit's field is ignored.
    CHECK_FALSE(validate_limits(update(0, false, 5, true)));
  }

} // TEST_SUITE
