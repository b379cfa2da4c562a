// SPDX-License-Identifier: Apache-2.0
// The actor layer over a real Postgres, with real threads: the guarantees of
// the store hold end to end through the registry and chat actors.
#include "persistence/store.hpp"
#include "protocol/config.hpp"
#include "protocol/errors.hpp"
#include "tests/support/test_db.hpp"
#include "tests/support/threaded_server.hpp"

#include <caf/all.hpp>
#include <doctest/doctest.h>

#include <future>
#include <thread>
#include <vector>

using namespace chargeonce;
using namespace std::chrono_literals;

namespace {

struct server_fixture : test::threaded_server {
  persistence::store setup{options()};

  server_fixture() : threaded_server(options()) {}

  static persistence::store_options options() { return test::store_options(); }

  chat_id make_chat(pockets initial) {
    auto chat = test::fresh_chat();
    REQUIRE(setup.create_chat({chat, initial, caf::none, caf::none}));
    return chat;
  }
};

} // namespace

TEST_SUITE("actors.integration") {

  TEST_CASE_FIXTURE(server_fixture,
                    "64 clients reserving one chat at once: one reservation, "
                    "63 busy") {
    for (int round = 0; round < 5; ++round) {
      auto chat = make_chat({0, 10, 0});
      std::vector<std::future<caf::expected<reservation>>> results;
      for (int i = 0; i < 64; ++i)
        results.push_back(std::async(std::launch::async, [&] {
          return ask<reservation>(atom::reserve_v, chat, kind::image,
                                  std::string{});
        }));
      auto outcome = test::tally(results);
      CHECK(outcome.won == 1);
      CHECK(outcome.busy == 63);
      CHECK(outcome.other == 0);
      CHECK(test::sql_int("SELECT count(*) FROM reservations WHERE chat_id = "
                          + std::to_string(chat))
            == 1);
    }
  }

  TEST_CASE_FIXTURE(server_fixture,
                    "cancel racing start through the chat actor 1,000 times: "
                    "exactly one wins") {
    auto chat = make_chat({0, 0, 1000});
    int started = 0;
    for (int i = 0; i < 1000; ++i) {
      auto r =
        ask<reservation>(atom::reserve_v, chat, kind::image, std::string{});
      REQUIRE(r);
      auto id = r->id;
      auto start = std::async(std::launch::async, [&] {
        return ask<reservation>(atom::start_v, chat, id);
      });
      auto cancel = std::async(std::launch::async, [&] {
        return ask<reservation>(atom::cancel_v, chat);
      });
      auto s = start.get();
      auto c = cancel.get();
      if (s) {
        REQUIRE_FALSE(c);
        REQUIRE(c.error() == ec::too_late);
        ++started;
        REQUIRE(ask<reservation>(atom::fail_v, chat, id));
      } else {
        REQUIRE(s.error() == ec::not_found);
        REQUIRE(c);
        REQUIRE(c->id == id);
      }
    }
    MESSAGE("started first: " << started << " of 1000");
    CHECK(test::sql_int("SELECT count(*) FROM reservations WHERE chat_id = "
                        + std::to_string(chat))
          == 0);
  }

  TEST_CASE_FIXTURE(server_fixture,
                    "a whole job through the actors charges exactly once") {
    auto chat = make_chat({1, 1, 1});
    auto r =
      ask<reservation>(atom::reserve_v, chat, kind::image, std::string{"job"});
    REQUIRE(r);
    REQUIRE(ask<reservation>(atom::start_v, chat, r->id));
    std::vector<std::future<caf::expected<receipt>>> commits;
    for (int i = 0; i < 8; ++i) // a worker retrying its commit, concurrently
      commits.push_back(std::async(std::launch::async, [&] {
        return ask<receipt>(atom::commit_v, chat, r->id);
      }));
    for (auto& f : commits) {
      auto x = f.get();
      REQUIRE(x);
      CHECK(x->charged == pockets{0, 1, 0});
    }
    auto st = ask<chat_status>(atom::status_v, chat);
    REQUIRE(st);
    CHECK(st->amounts == pockets{1, 0, 1});
    CHECK_FALSE(st->active);
  }

  TEST_CASE_FIXTURE(server_fixture,
                    "units are named or left out: an explicit 0 is "
                    "invalid_argument on reserve, commit and resolve and "
                    "charges nothing; left out, commit and resolve take the "
                    "whole hold") {
    auto chat = make_chat({0, 0, 10});
    auto zero_reserve = ask<reservation>(atom::reserve_v, chat, kind::image,
                                         std::string{"a"}, int32_t{0});
    REQUIRE_FALSE(zero_reserve);
    CHECK(zero_reserve.error() == ec::invalid_argument);
    auto r = ask<reservation>(atom::reserve_v, chat, kind::image,
                              std::string{"b"}, int32_t{2});
    REQUIRE(r);
    REQUIRE(ask<reservation>(atom::start_v, chat, r->id));
    // A worker reporting "0 units done" is not charged in full.
    auto zero_commit = ask<receipt>(atom::commit_v, chat, r->id, int32_t{0});
    REQUIRE_FALSE(zero_commit);
    CHECK(zero_commit.error() == ec::invalid_argument);
    CHECK(ask<chat_status>(atom::status_v, chat)->amounts == pockets{0, 0, 10});
    REQUIRE(ask<reservation>(atom::uncertain_v, chat, r->id,
                             std::string{"provider-1"}));
    auto zero_resolve = ask<resolution>(atom::resolve_v, chat, r->id,
                                        std::string{"succeeded"}, int32_t{0});
    REQUIRE_FALSE(zero_resolve);
    CHECK(zero_resolve.error() == ec::invalid_argument);
    auto whole =
      ask<resolution>(atom::resolve_v, chat, r->id, std::string{"succeeded"});
    REQUIRE(whole);
    CHECK(ask<chat_status>(atom::status_v, chat)->amounts == pockets{0, 0, 8});
  }

  TEST_CASE("a dead database is storage_unavailable through the actors and "
            "the server stays up") {
    test::threaded_server server{
      {"host=/nonexistent-socket-dir dbname=none connect_timeout=1", 500ms}};
    for (int i = 0; i < 3; ++i) {
      auto r = server.ask<reservation>(atom::reserve_v, chat_id{77}, kind::text,
                                       std::string{});
      REQUIRE_FALSE(r);
      CHECK(r.error() == ec::storage_unavailable);
    }
  }

} // TEST_SUITE
