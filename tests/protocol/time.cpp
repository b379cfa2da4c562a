// SPDX-License-Identifier: Apache-2.0
// Timestamps given on the command line mean what ISO 8601 says they mean.
#include "protocol/time.hpp"

#include <doctest/doctest.h>

using namespace chargeonce;

TEST_SUITE("time") {

  TEST_CASE("formats UTC with microseconds and parses it back") {
    auto t = from_unix_micros(1764508021123456); // 2025-11-30T13:07:01.123456Z
    auto text = format_iso8601(t);
    CHECK(text == "2025-11-30T13:07:01.123456Z");
    auto back = parse_iso8601(text);
    REQUIRE(back);
    CHECK(*back == t);
  }

  TEST_CASE("offsets and date-only forms") {
    CHECK(to_unix_micros(*parse_iso8601("1970-01-01")) == 0);
    CHECK(to_unix_micros(*parse_iso8601("1970-01-01T01:00:00+01:00")) == 0);
    CHECK(to_unix_micros(*parse_iso8601("1969-12-31T23:00:00-01:00")) == 0);
    CHECK(to_unix_micros(*parse_iso8601("1970-01-01T00:00:01.5Z")) == 1500000);
  }

  TEST_CASE("garbage and impossible dates are refused") {
    for (auto bad : {"", "tomorrow", "2026-13-01", "2026-02-30",
                     "2026-01-01T25:00:00Z", "2026-01-01T00:00:00+1"})
      CHECK_FALSE(parse_iso8601(bad));
  }

} // TEST_SUITE
