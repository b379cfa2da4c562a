// SPDX-License-Identifier: Apache-2.0
// --print-default-catalog prints the built-in rules with the quotas the
// options set, in the catalog file's form, and starts nothing.
#include "protocol/catalog.hpp"

#include "main/server/server.hpp"

#include <doctest/doctest.h>

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

using namespace chargeonce;

namespace {

struct printed {
  int status = 0;
  std::string out;
};

/// Runs chargeonce-server's main with `args`, capturing what it prints.
printed run(std::vector<std::string> args) {
  args.insert(args.begin(), "chargeonce-server");
  std::vector<char*> argv;
  for (auto& arg : args)
    argv.push_back(arg.data());
  std::ostringstream out;
  auto* old = std::cout.rdbuf(out.rdbuf());
  auto status = run_server(static_cast<int>(argv.size()), argv.data());
  std::cout.rdbuf(old);
  return {status, out.str()};
}

} // namespace

TEST_SUITE("server.catalog") {

  TEST_CASE("the printed default catalog is the built-in rules, a file the "
            "server reads back") {
    auto r = run({"--print-default-catalog"});
    CHECK(r.status == 0);
    catalog back;
    REQUIRE(parse_catalog(r.out, back).empty());
    CHECK(to_json(back) == to_json(builtin_catalog({10, 3, 10, 10})));
  }

  TEST_CASE("the quota options fill the printed catalog") {
    auto r = run({"--free-daily-images=5", "--print-default-catalog",
                  "--premium-daily-messages=20"});
    CHECK(r.status == 0);
    catalog back;
    REQUIRE(parse_catalog(r.out, back).empty());
    CHECK(back.find_pocket("daily_images")->free_daily == 5);
    CHECK(back.find_pocket("daily_messages")->premium_daily == 20);
    CHECK(back.find_pocket("daily_messages")->free_daily == 10);
  }

  TEST_CASE("options that do not fit refuse to print, as they refuse to "
            "start") {
    auto r = run({"--print-default-catalog", "--free-daily-images=-1"});
    CHECK(r.status == 2);
    CHECK(r.out.empty());
  }
}
