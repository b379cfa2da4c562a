// SPDX-License-Identifier: Apache-2.0
// Bad input is a typed invalid_argument, decided before anything is routed.
#include "protocol/validation.hpp"

#include "protocol/errors.hpp"

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

  TEST_CASE("unknown kinds and oversized request ids are refused") {
    CHECK_FALSE(validate_reserve(1, kind::image, "job-1"));
    CHECK(validate_reserve(1, static_cast<kind>(7), "")
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

  TEST_CASE("negative pocket amounts are refused") {
    CHECK_FALSE(validate_spec(chat_spec{5, {0, 0, 0}, caf::none, caf::none}));
    CHECK(validate_spec(chat_spec{5, {-1, 0, 0}, caf::none, caf::none})
          == ec::invalid_argument);
    CHECK(validate_spec(chat_spec{5, {0, 0, -1}, caf::none, caf::none})
          == ec::invalid_argument);
  }

} // TEST_SUITE
