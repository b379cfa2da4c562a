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

  TEST_CASE("negative pocket amounts are refused") {
    CHECK_FALSE(validate_spec(chat_spec{5, {0, 0, 0}, caf::none}));
    CHECK(validate_spec(chat_spec{5, {-1, 0, 0}, caf::none})
          == ec::invalid_argument);
    CHECK(validate_spec(chat_spec{5, {0, 0, -1}, caf::none})
          == ec::invalid_argument);
  }

} // TEST_SUITE
