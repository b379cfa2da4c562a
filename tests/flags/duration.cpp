// SPDX-License-Identifier: Apache-2.0
// Durations on the command line: the server's own forms mean the same here
// as to the server's option parser, a bare number is seconds, and anything
// else is refused with a message naming the flag and the accepted forms.
#include "main/flags/duration.hpp"

#include "main/flags/flags.hpp"
#include "main/server/config.hpp"

#include <caf/optional.hpp>
#include <doctest/doctest.h>

#include <sstream>
#include <string>

using namespace chargeonce;
using namespace std::chrono;

namespace {

constexpr auto forever = nanoseconds::max();

nanoseconds parse(const std::string& text) {
  return parse_duration("duration", text, nanoseconds{0}, forever);
}

/// The message of the usage_error parse() throws, or "" when none.
std::string refusal(const std::string& text) {
  try {
    parse(text);
  } catch (const usage_error& e) {
    return e.what();
  }
  return {};
}

/// What chargeonce-server makes of --idle-timeout=`text`, or none when its
/// parser refuses it.
caf::optional<caf::timespan> server_reads(const std::string& text) {
  server_config cfg;
  std::istringstream no_ini;
  if (cfg.parse({"--idle-timeout=" + text}, no_ini))
    return caf::none;
  return cfg.idle_timeout;
}

} // namespace

TEST_SUITE("flags") {

  TEST_CASE("a bare number is seconds") {
    CHECK(parse("90") == seconds{90});
    CHECK(parse("0") == seconds{0});
  }

  TEST_CASE("every unit of the server's syntax is accepted") {
    CHECK(parse("90s") == seconds{90});
    CHECK(parse("1500ms") == milliseconds{1500});
    CHECK(parse("3min") == minutes{3});
    CHECK(parse("1h") == hours{1});
    CHECK(parse("250us") == microseconds{250});
    CHECK(parse("7ns") == nanoseconds{7});
  }

  TEST_CASE("a form with a unit means here what it means to the server") {
    for (auto text : {"90s", "1500ms", "3min", "1h", "250us", "7ns", "0s",
                      "9223372036s", "2562047h"}) {
      CAPTURE(text);
      auto server = server_reads(text);
      REQUIRE(server);
      CHECK(parse(text) == *server);
    }
  }

  TEST_CASE("what the server's parser refuses is refused here") {
    for (auto text : {"1.5s", "1.5x", "s", "", "5sec", "5m", "5S", "5 s",
                      "99999999999999999999s"}) {
      CAPTURE(text);
      CHECK_FALSE(server_reads(text));
      CHECK_FALSE(refusal(text).empty());
    }
  }

  TEST_CASE("days are ours, as bare seconds are: read here, never written "
            "by duration_text, which the server parses") {
    CHECK(parse("30d") == hours{720});
    CHECK(parse("1d") == hours{24});
    CHECK_FALSE(server_reads("30d"));
    CHECK(duration_text(hours{720}) == "720h");
    CHECK_FALSE(refusal("1.5d").empty());
    CHECK_FALSE(refusal("010d").empty());
  }

  TEST_CASE("a bare number, which the server refuses, is seconds here") {
    CHECK_FALSE(server_reads("90"));
    CHECK(parse("90") == seconds{90});
  }

  TEST_CASE("forms the server reads other than they look are refused") {
    // CAF's integer syntax takes signs, blanks and bases: 010s is 8 s, and a
    // count beyond the nanosecond range wraps around silently.
    CHECK(*server_reads("010s") == seconds{8});
    CHECK(refusal("010s").find("leading 0") != std::string::npos);
    for (auto text :
         {"010s", "0x10s", "+5s", " 5s", "-1s", "010", "9223372037s"}) {
      CAPTURE(text);
      CHECK_FALSE(refusal(text).empty());
    }
  }

  TEST_CASE("a malformed duration is refused naming the flag and the forms") {
    for (auto text : {"-1", "1.5x", "s", "", "1.5", "5sec", "5m", "90 s"}) {
      CAPTURE(text);
      CHECK(refusal(text)
            == std::string{"--duration takes "} + duration_forms + ", got '"
                 + text + "'");
    }
  }

  TEST_CASE("an overflowing duration is refused as out of range") {
    auto want = [](const std::string& text) {
      return "--duration must be between 0s and 9223372036854775807ns, got '"
             + text + "'";
    };
    CHECK(refusal("99999999999999999999") == want("99999999999999999999"));
    CHECK(refusal("99999999999999999999s") == want("99999999999999999999s"));
    CHECK(refusal("9223372037") == want("9223372037"));
    CHECK(refusal("2562048h") == want("2562048h"));
  }

  TEST_CASE("a duration outside the bounds is refused naming them") {
    auto bounded = [](const std::string& text) {
      return parse_duration("warmup", text, seconds{1}, hours{1});
    };
    CHECK(bounded("1s") == seconds{1});
    CHECK(bounded("60min") == hours{1});
    CHECK_THROWS_WITH_AS(
      bounded("0"), "--warmup must be between 1s and 1h, got '0'", usage_error);
    CHECK_THROWS_WITH_AS(bounded("999ms"),
                         "--warmup must be between 1s and 1h, got '999ms'",
                         usage_error);
    CHECK_THROWS_WITH_AS(bounded("3601s"),
                         "--warmup must be between 1s and 1h, got '3601s'",
                         usage_error);
  }

  TEST_CASE("whole seconds take any unit but refuse a fraction of a second") {
    CHECK(parse_duration_seconds("duration", "90", 1, 3600) == 90);
    CHECK(parse_duration_seconds("duration", "2min", 1, 3600) == 120);
    CHECK(parse_duration_seconds("duration", "3000ms", 1, 3600) == 3);
    CHECK(parse_duration_seconds("duration", "1h", 1, 3600) == 3600);
    CHECK_THROWS_WITH_AS(parse_duration_seconds("duration", "1500ms", 1, 3600),
                         "--duration counts whole seconds, got '1500ms'",
                         usage_error);
    CHECK_THROWS_WITH_AS(parse_duration_seconds("duration", "2h", 1, 3600),
                         "--duration must be between 1s and 1h, got '2h'",
                         usage_error);
  }

  TEST_CASE("duration_text writes the largest exact unit, which parses back") {
    CHECK(duration_text(seconds{0}) == "0s");
    CHECK(duration_text(seconds{90}) == "90s");
    CHECK(duration_text(milliseconds{1500}) == "1500ms");
    CHECK(duration_text(minutes{3}) == "3min");
    CHECK(duration_text(hours{24}) == "24h");
    CHECK(duration_text(nanoseconds{7}) == "7ns");
    for (auto x :
         {nanoseconds{7}, nanoseconds{microseconds{250}},
          nanoseconds{seconds{90}}, nanoseconds{hours{168}}, forever}) {
      CAPTURE(x.count());
      CHECK(parse(duration_text(x)) == x);
      CHECK(*server_reads(duration_text(x)) == x);
    }
  }
}
