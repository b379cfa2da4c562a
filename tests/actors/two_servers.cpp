// SPDX-License-Identifier: Apache-2.0
// Two servers on one Postgres (a client with an old server list reaches
// both for the same chat): the database alone keeps a chat's active
// reservations within its limit, one charge per commit and no negative
// pocket.
#include "protocol/errors.hpp"
#include "tests/support/test_db.hpp"
#include "tests/support/threaded_server.hpp"

#include <doctest/doctest.h>

#include <future>
#include <vector>

using namespace chargeonce;

namespace {

struct two_servers {
  test::threaded_server a{test::store_options()};
  test::threaded_server b{test::store_options()};

  test::threaded_server& pick(int i) { return i % 2 == 0 ? a : b; }
};

} // namespace

TEST_SUITE("two_servers") {

  TEST_CASE_FIXTURE(two_servers,
                    "64 reserves of one chat through two servers: one "
                    "reservation, 63 busy") {
    for (int round = 0; round < 5; ++round) {
      auto chat = test::fresh_chat();
      REQUIRE(a.ask<chat_status>(atom::create_v,
                                 chat_spec{chat, {0, 9, 9}, {}, caf::none}));
      std::vector<std::future<caf::expected<reservation>>> results;
      for (int i = 0; i < 64; ++i)
        results.push_back(std::async(std::launch::async, [&, i] {
          return pick(i).ask<reservation>(atom::reserve_v, chat, kind::image,
                                          std::string{});
        }));
      auto outcome = test::tally(results);
      CHECK(outcome.won == 1);
      CHECK(outcome.busy == 63);
      CHECK(outcome.other == 0);
    }
  }

  TEST_CASE_FIXTURE(
    two_servers, "64 reserves of one chat with limit 2 through two servers, "
                 "distinct request ids: two reservations, 62 busy, never 3") {
    for (int round = 0; round < 5; ++round) {
      auto chat = test::fresh_chat();
      REQUIRE(
        a.ask<chat_status>(atom::create_v, chat_spec{chat, {0, 9, 9}, {}, 2}));
      std::vector<std::future<caf::expected<reservation>>> results;
      for (int i = 0; i < 64; ++i)
        results.push_back(std::async(std::launch::async, [&, i] {
          return pick(i).ask<reservation>(atom::reserve_v, chat, kind::image,
                                          "tap-" + std::to_string(i));
        }));
      auto outcome = test::tally(results);
      CHECK(outcome.won == 2);
      CHECK(outcome.busy == 62);
      CHECK(outcome.other == 0);
      CHECK(test::sql_int("SELECT count(*) FROM reservations WHERE chat_id = "
                          + std::to_string(chat))
            == 2);
    }
  }

  TEST_CASE_FIXTURE(two_servers,
                    "commits of one reservation through both servers charge "
                    "once; cancel and start through different servers never "
                    "both succeed") {
    auto chat = test::fresh_chat();
    REQUIRE(a.ask<chat_status>(atom::create_v,
                               chat_spec{chat, {0, 0, 500}, {}, caf::none}));
    int started = 0;
    for (int i = 0; i < 200; ++i) {
      auto r =
        a.ask<reservation>(atom::reserve_v, chat, kind::image, std::string{});
      REQUIRE(r);
      auto start = std::async(std::launch::async, [&] {
        return a.ask<reservation>(atom::start_v, chat, r->id);
      });
      auto cancel = std::async(std::launch::async, [&] {
        return b.ask<reservation>(atom::cancel_v, chat);
      });
      auto s = start.get();
      auto c = cancel.get();
      REQUIRE(static_cast<bool>(s) != static_cast<bool>(c));
      if (!s)
        continue;
      ++started;
      auto commit_a = std::async(std::launch::async, [&] {
        return a.ask<receipt>(atom::commit_v, chat, r->id);
      });
      auto commit_b = std::async(std::launch::async, [&] {
        return b.ask<receipt>(atom::commit_v, chat, r->id);
      });
      auto x = commit_a.get();
      auto y = commit_b.get();
      REQUIRE(x);
      REQUIRE(y);
      REQUIRE(x->committed_at == y->committed_at); // the same ledger row
    }
    MESSAGE("started (then committed twice): " << started << " of 200");
    auto st = a.ask<chat_status>(atom::status_v, chat);
    REQUIRE(st);
    CHECK(st->amounts.get(pocket::balance) == 500 - started);
    CHECK(test::sql_int(
            "SELECT count(*) FROM ledger WHERE entry = 'charge' AND chat_id = "
            + std::to_string(chat))
          == started);
  }

  TEST_CASE_FIXTURE(two_servers,
                    "refills on one server racing commits on the other never "
                    "make a pocket negative") {
    auto chat = test::fresh_chat();
    REQUIRE(a.ask<chat_status>(atom::touch_v, chat));
    for (int i = 0; i < 100; ++i) {
      test::sql(
        "UPDATE chats SET pockets = chargeonce_pockets_with(pockets, "
        "'{\"daily_images\": 1}'), "
        "window_started_at = now() - interval '25 hours' WHERE chat_id = "
        + std::to_string(chat));
      auto r =
        a.ask<reservation>(atom::reserve_v, chat, kind::image, std::string{});
      REQUIRE(r);
      REQUIRE(a.ask<reservation>(atom::start_v, chat, r->id));
      auto refill = std::async(std::launch::async, [&] {
        return b.ask<chat_status>(atom::touch_v, chat);
      });
      auto commit = std::async(std::launch::async, [&] {
        return a.ask<receipt>(atom::commit_v, chat, r->id);
      });
      REQUIRE(refill.get());
      REQUIRE(commit.get());
      auto images = a.ask<chat_status>(atom::status_v, chat)
                      ->amounts.get(pocket::daily_images);
      REQUIRE((images == 2 || images == 3));
    }
  }

} // TEST_SUITE
