// SPDX-License-Identifier: Apache-2.0
// Every program's duration flags take the same forms: chargeonce-bench's
// --duration, --warmup and --idle-timeout, chargeonce-chaos's --duration
// and chargeonce-cli's --timeout.
#include "main/cli/args.hpp"
#include "main/cli/commands.hpp"
#include "main/flags/flags.hpp"
#include "tests/support/argv.hpp"
#include "tools/bench/options.hpp"
#include "tools/chaos/options.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace chargeonce;
using namespace std::chrono;

namespace {

bench::bench_options bench_with(const std::string& flag) {
  test::argv_of a{{"--postgres=dbname=x", "--in-process", flag}};
  return bench::parse_args(a.argc(), a.argv());
}

chaos::chaos_options chaos_with(const std::string& flag) {
  test::argv_of a{{flag}};
  return chaos::parse_options(a.argc(), a.argv());
}

} // namespace

TEST_SUITE("flags") {

  TEST_CASE("the bench takes durations in any form, bare numbers as "
            "seconds") {
    CHECK(bench_with("--duration=90").duration_s == 90);
    CHECK(bench_with("--duration=90s").duration_s == 90);
    CHECK(bench_with("--duration=3min").duration_s == 180);
    CHECK(bench_with("--duration=1h").duration_s == 3600);
    CHECK(bench_with("--warmup=0").warmup_s == 0);
    CHECK(bench_with("--warmup=2000ms").warmup_s == 2);
    CHECK(bench_with("--idle-timeout=1").idle_timeout_s == 1);
    CHECK(bench_with("--idle-timeout=2min").idle_timeout_s == 120);
  }

  TEST_CASE("the bench refuses a fraction of a second and names the flag") {
    CHECK_THROWS_WITH_AS(bench_with("--duration=1500ms"),
                         "--duration counts whole seconds, got '1500ms'",
                         usage_error);
    CHECK_THROWS_WITH_AS(bench_with("--warmup=2h"),
                         "--warmup must be between 0s and 1h, got '2h'",
                         usage_error);
    CHECK_THROWS_AS(bench_with("--idle-timeout=1.5x"), usage_error);
  }

  TEST_CASE("the bench passes its duration on to child processes as it "
            "reads it") {
    auto o = bench_with("--duration=2min");
    auto args = bench::child_args(o, "baseline", 0, 10, 1);
    CHECK(std::find(args.begin(), args.end(), "--duration=120") != args.end());
  }

  TEST_CASE("chaos takes durations in any form, bare numbers as seconds") {
    CHECK(chaos_with("--duration=60").duration_s == 60);
    CHECK(chaos_with("--duration=90s").duration_s == 90);
    CHECK(chaos_with("--duration=3min").duration_s == 180);
    CHECK(chaos_with("--duration=1h").duration_s == 3600);
    CHECK_THROWS_WITH_AS(chaos_with("--duration=1500ms"),
                         "--duration counts whole seconds, got '1500ms'",
                         usage_error);
    CHECK_THROWS_WITH_AS(chaos_with("--duration=0"),
                         "--duration must be between 1s and 168h, got '0'",
                         usage_error);
  }

  TEST_CASE("the cli's --timeout takes durations in any form") {
    auto timeout = [](const std::string& text) {
      return cli::parse_connection({{"server", "h:1"}, {"timeout", text}})
        .timeout;
    };
    CHECK(timeout("90") == seconds{90});
    CHECK(timeout("90s") == seconds{90});
    CHECK(timeout("1500ms") == milliseconds{1500});
    CHECK(timeout("3min") == minutes{3});
    CHECK(timeout("1h") == hours{1});
  }

  TEST_CASE("every program's --help names the duration forms") {
    for (std::string text :
         {std::string{bench::usage_text}, std::string{chaos::usage_text},
          cli::usage_text()}) {
      bool named = text.find("--duration=DURATION") != std::string::npos
                   || text.find("--timeout=DURATION") != std::string::npos;
      CHECK(named);
      CHECK(text.find("1500ms, 90s, 3min, 1h") != std::string::npos);
    }
  }
}
