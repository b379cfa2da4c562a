// SPDX-License-Identifier: Apache-2.0
// --print-default-catalog prints the built-in rules with the quotas the
// options set, in the catalog file's form, and starts nothing.
#include "protocol/catalog.hpp"

#include "main/server/server.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace chargeonce;

namespace {

struct printed {
  int status = 0;
  std::string out;
  std::string err;
};

/// Runs chargeonce-server's main with `args`, capturing what it prints.
printed run(std::vector<std::string> args) {
  args.insert(args.begin(), "chargeonce-server");
  std::vector<char*> argv;
  for (auto& arg : args)
    argv.push_back(arg.data());
  std::ostringstream out;
  std::ostringstream err;
  auto* old = std::cout.rdbuf(out.rdbuf());
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  auto status = run_server(static_cast<int>(argv.size()), argv.data());
  std::cout.rdbuf(old);
  std::cerr.rdbuf(old_err);
  return {status, out.str(), err.str()};
}

/// A catalog file with `text` as its content, removed again at the end.
struct catalog_file {
  std::string path;

  explicit catalog_file(const std::string& text) {
    path = (std::filesystem::temp_directory_path()
            / ("chargeonce_catalog_" + std::to_string(::getpid()) + ".json"))
             .string();
    std::ofstream{path} << text;
  }
  ~catalog_file() { std::filesystem::remove(path); }
  catalog_file(const catalog_file&) = delete;
  catalog_file& operator=(const catalog_file&) = delete;
};

/// A catalog whose `voice` is paid from `pay_from` (a JSON array).
std::string voice_catalog(const std::string& pay_from) {
  return R"({"pockets": {"daily_voice": {"daily": {"free": 2, "premium": 5}},
                         "balance": {"purchased": true}},
             "kinds": {"voice": {"pay_from": )"
         + pay_from + "}}}";
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

  TEST_CASE("the cancel-after-start options set the built-in kinds' "
            "policies; a wrong value or one beside a catalog file refuses to "
            "start") {
    auto r =
      run({"--image-cancel-after-start=request", "--print-default-catalog"});
    CHECK(r.status == 0);
    catalog back;
    REQUIRE(parse_catalog(r.out, back).empty());
    CHECK(back.find_kind("image")->cancel_after_start
          == cancel_policy::request);
    CHECK(back.find_kind("text")->cancel_after_start == cancel_policy::refuse);
    auto both =
      run({"--text-cancel-after-start=request",
           "--image-cancel-after-start=refuse", "--print-default-catalog"});
    REQUIRE(parse_catalog(both.out, back).empty());
    CHECK(back.find_kind("text")->cancel_after_start == cancel_policy::request);
    CHECK(back.find_kind("image")->cancel_after_start == cancel_policy::refuse);
    auto wrong = run({"--text-cancel-after-start=maybe"});
    CHECK(wrong.status == 2);
    CHECK(wrong.err.find("text-cancel-after-start must be refuse or request, "
                         "not 'maybe'")
          != std::string::npos);
    catalog_file f{voice_catalog(R"([{"pocket": "daily_voice"}])")};
    auto beside =
      run({"--catalog=" + f.path, "--image-cancel-after-start=request"});
    CHECK(beside.status == 2);
    CHECK(beside.err.find("image-cancel-after-start applies to the built-in "
                          "catalog only: set cancel_after_start in "
                          + f.path)
          != std::string::npos);
  }

  TEST_CASE("options that do not fit refuse to print, as they refuse to "
            "start") {
    auto r = run({"--print-default-catalog", "--free-daily-images=-1"});
    CHECK(r.status == 2);
    CHECK(r.out.empty());
  }

  TEST_CASE("a catalog that spends balance before a daily pocket refuses "
            "to start, naming the kind") {
    catalog_file f{voice_catalog(R"([{"pocket": "balance", "price": 3},
                                     {"pocket": "daily_voice"}])")};
    auto r = run({"--catalog=" + f.path});
    CHECK(r.status == 2);
    CHECK(r.err.find("catalog " + f.path
                     + ": kind voice pays from balance "
                       "before daily pocket daily_voice")
          != std::string::npos);
  }

  TEST_CASE("a kind priced at 0 refuses to start, naming the kind") {
    catalog_file f{voice_catalog(R"([{"pocket": "daily_voice", "price": 0}])")};
    auto r = run({"--catalog=" + f.path});
    CHECK(r.status == 2);
    CHECK(r.err.find("kind voice: price of daily_voice must be 1 to "
                     "1000000, not 0")
          != std::string::npos);
  }

  TEST_CASE("a missing or broken catalog file refuses to start, naming the "
            "file") {
    auto missing = run({"--catalog=/nonexistent/catalog.json"});
    CHECK(missing.status == 2);
    CHECK(missing.err.find("cannot read catalog /nonexistent/catalog.json")
          != std::string::npos);
    catalog_file f{"{\"pockets\": {}, "};
    auto broken = run({"--catalog=" + f.path});
    CHECK(broken.status == 2);
    CHECK(broken.err.find("the catalog is not valid JSON")
          != std::string::npos);
  }

  TEST_CASE("--print-default-catalog prints the built-in rules even when a "
            "catalog file is given") {
    catalog_file f{voice_catalog(R"([{"pocket": "daily_voice"}])")};
    auto r = run({"--catalog=" + f.path, "--print-default-catalog"});
    CHECK(r.status == 0);
    catalog back;
    REQUIRE(parse_catalog(r.out, back).empty());
    CHECK(to_json(back) == to_json(builtin_catalog({})));
  }
}
