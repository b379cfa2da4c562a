// SPDX-License-Identifier: Apache-2.0
// An operator's catalog against real Postgres (the batch functions):
// `voice` paid from a daily voice quota, then 3 credits; `video` from
// credits only, at 5; `text` free for premium chats. The pockets' order,
// the prices, premium-free kinds, refills and the refusals each checked;
// and the database's record of the catalog's kinds (catalog_kinds), which
// keeps a server from dropping a kind still in use.
#include "persistence/catalog_kinds.hpp"
#include "persistence/migrations.hpp"
#include "persistence/store.hpp"
#include "protocol/errors.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>
#include <pqxx/pqxx>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>

using namespace chargeonce;
using persistence::store;

namespace {

/// The catalog of this file's header, shared with tests/server/catalog.sh.
catalog voice_video() {
  std::ifstream in{CHARGEONCE_VOICE_VIDEO_CATALOG};
  std::stringstream text;
  text << in.rdbuf();
  REQUIRE_MESSAGE(in.good(), "cannot read " CHARGEONCE_VOICE_VIDEO_CATALOG);
  catalog out;
  auto problem = parse_catalog(text.str(), out);
  REQUIRE_MESSAGE(problem.empty(), problem);
  return out;
}

persistence::store_options options_with(const catalog& products) {
  auto opts = test::store_options();
  opts.products = products;
  opts.free_max_active_jobs = 8; // several jobs at once, by request id
  opts.premium_max_active_jobs = 8;
  return opts;
}

pockets amounts(std::initializer_list<std::pair<const char*, int32_t>> xs) {
  pockets out;
  for (const auto& x : xs)
    out.set(x.first, x.second);
  return out;
}

chat_id make_chat(store& db, const pockets& initial) {
  auto chat = test::fresh_chat();
  REQUIRE(db.create_chat(chat_spec{chat, initial, caf::none, caf::none}));
  return chat;
}

std::string where(chat_id chat) {
  return " WHERE chat_id = " + std::to_string(chat);
}

/// Reserves, starts and commits one job; the receipt's charge.
pockets run_job(store& db, chat_id chat, const char* k,
                const std::string& request_id) {
  auto r = db.reserve(chat, kind{k}, request_id);
  REQUIRE_MESSAGE(r, error_message(r.error()));
  REQUIRE(db.start(chat, r->id));
  auto receipt = db.commit(chat, r->id);
  REQUIRE(receipt);
  CHECK(receipt->kind == kind{k});
  return receipt->charged;
}

struct catalog_fixture {
  catalog products = voice_video();
  store db{options_with(products)};
};

} // namespace

TEST_SUITE("persistence.catalog") {

  TEST_CASE_FIXTURE(catalog_fixture,
                    "voice is paid from its daily quota first, then at 3 "
                    "credits; video only at 5 credits, in its own queue") {
    auto chat =
      make_chat(db, amounts({{"daily_voice", 1}, {pocket::balance, 8}}));
    auto first = db.reserve(chat, kind{"voice"}, "v1");
    REQUIRE(first);
    CHECK(first->held == amounts({{"daily_voice", 1}}));
    CHECK(first->queue == "voice_generation");
    // The daily quota is held: the next voice job is paid from balance.
    auto second = db.reserve(chat, kind{"voice"}, "v2");
    REQUIRE(second);
    CHECK(second->held == amounts({{pocket::balance, 3}}));
    auto video = db.reserve(chat, kind{"video"}, "v3");
    REQUIRE(video);
    CHECK(video->held == amounts({{pocket::balance, 5}}));
    CHECK(video->queue == "video_render");
    // 8 - 3 - 5 leaves nothing for another video.
    auto broke = db.reserve(chat, kind{"video"}, "v4");
    REQUIRE_FALSE(broke);
    CHECK(broke.error() == ec::insufficient_funds);
    CHECK(error_message(broke.error())
          == "chat " + std::to_string(chat)
               + " cannot pay for video (balance: 5 each)");
    for (const auto* r : {&*first, &*second, &*video}) {
      REQUIRE(db.start(chat, r->id));
      auto receipt = db.commit(chat, r->id);
      REQUIRE(receipt);
      CHECK(receipt->charged == r->held);
    }
    auto after = db.status(chat);
    REQUIRE(after);
    CHECK(after->amounts.get("daily_voice") == 0);
    CHECK(after->amounts.get(pocket::balance) == 0);
    CHECK(test::sql_int("SELECT sum(chargeonce_amount(charged, 'balance'))"
                        " FROM ledger"
                        + where(chat))
          == 8);
  }

  TEST_CASE_FIXTURE(catalog_fixture,
                    "a price is paid whole from one pocket: 2 credits do not "
                    "pay a voice job at 3") {
    auto chat = make_chat(db, amounts({{pocket::balance, 2}}));
    auto r = db.reserve(chat, kind{"voice"}, "x");
    REQUIRE_FALSE(r);
    CHECK(r.error() == ec::insufficient_funds);
    CHECK(error_message(r.error())
          == "chat " + std::to_string(chat)
               + " cannot pay for voice (daily_voice: 1, balance: 3 each)");
    CHECK(test::sql_int("SELECT count(*) FROM reservations" + where(chat))
          == 0);
    CHECK(db.status(chat)->amounts.get(pocket::balance) == 2);
  }

  TEST_CASE_FIXTURE(catalog_fixture,
                    "a premium-free kind holds nothing for a premium chat; "
                    "its other kinds are paid as on the free plan, from the "
                    "priority queues") {
    auto chat =
      make_chat(db, amounts({{"daily_messages", 1}, {pocket::balance, 5}}));
    REQUIRE(
      db.set_premium(chat, caf::make_timestamp() + std::chrono::hours{1}));
    auto text = db.reserve(chat, kind{"text"}, "t");
    REQUIRE(text);
    CHECK(text->held == pockets{});
    CHECK(text->queue == "text_generation_priority");
    auto video = db.reserve(chat, kind{"video"}, "v");
    REQUIRE(video);
    CHECK(video->held == amounts({{pocket::balance, 5}}));
    CHECK(video->queue == "video_render_fast");
    REQUIRE(db.start(chat, text->id));
    CHECK(db.commit(chat, text->id)->charged == pockets{});
    CHECK(db.status(chat)->amounts.get("daily_messages") == 1);
  }

  TEST_CASE_FIXTURE(catalog_fixture,
                    "a refill sets every daily pocket of the catalog to the "
                    "plan's quota and leaves balance as it is") {
    auto free_chat = make_chat(db, amounts({{pocket::balance, 4}}));
    auto premium_chat = make_chat(db, amounts({{pocket::balance, 7}}));
    REQUIRE(db.set_premium(premium_chat,
                           caf::make_timestamp() + std::chrono::hours{1}));
    for (auto chat : {free_chat, premium_chat}) {
      run_job(db, chat, "voice", "before"); // 3 credits: no daily voice yet
      REQUIRE(db.touch(chat));              // opens the window
      test::sql("UPDATE chats SET window_started_at = now() - interval "
                "'25 hours'"
                + where(chat));
    }
    auto free_after = db.touch(free_chat);
    REQUIRE(free_after);
    CHECK(
      free_after->amounts
      == amounts(
        {{"daily_messages", 10}, {"daily_voice", 2}, {pocket::balance, 1}}));
    auto premium_after = db.touch(premium_chat);
    REQUIRE(premium_after);
    CHECK(
      premium_after->amounts
      == amounts(
        {{"daily_messages", 10}, {"daily_voice", 5}, {pocket::balance, 4}}));
    // The refilled quota pays first again.
    CHECK(run_job(db, free_chat, "voice", "after")
          == amounts({{"daily_voice", 1}}));
  }

  TEST_CASE_FIXTURE(catalog_fixture,
                    "a kind or a pocket the catalog lacks is invalid_argument "
                    "naming what it has, and writes nothing") {
    auto chat = make_chat(db, amounts({{pocket::balance, 5}}));
    auto image = db.reserve(chat, kind{"image"}, "i");
    REQUIRE_FALSE(image);
    CHECK(image.error() == ec::invalid_argument);
    CHECK(error_message(image.error()).find("text, video, voice")
          != std::string::npos);
    CHECK(test::sql_int("SELECT count(*) FROM reservations" + where(chat))
          == 0);
    auto other = test::fresh_chat();
    auto bad = db.create_chat(
      chat_spec{other, amounts({{"daily_images", 3}}), caf::none, caf::none});
    REQUIRE_FALSE(bad);
    CHECK(bad.error() == ec::invalid_argument);
    CHECK(error_message(bad.error()).find("daily_images") != std::string::npos);
    CHECK(test::sql_int("SELECT count(*) FROM chats" + where(other)) == 0);
  }
}

TEST_SUITE("persistence.catalog") {

  TEST_CASE("the database refuses a negative pocket, whoever writes it, and "
            "a pockets value that is not one dimension from 1") {
    store db{test::store_options()};
    auto chat = make_chat(db, amounts({{pocket::balance, 1}}));
    for (const char* value :
         {"{NULL,NULL,-1}", "{0,0,1,-5}", "{{1,2},{3,4}}", "[0:2]={1,2,3}"}) {
      CAPTURE(value);
      CHECK_THROWS_AS(test::sql("UPDATE chats SET pockets = '"
                                + std::string{value} + "'" + where(chat)),
                      pqxx::check_violation);
    }
    CHECK(db.status(chat)->amounts == amounts({{pocket::balance, 1}}));
  }
}

TEST_SUITE("persistence.catalog_kinds") {

  TEST_CASE("a catalog that drops a kind with active reservations or ledger "
            "rows is refused with the counts; an unused kind is forgotten") {
    test::scratch_database scratch{"catalog"};
    REQUIRE(persistence::migrate(scratch.dsn));
    auto products = voice_video();
    REQUIRE_FALSE(persistence::record_catalog_kinds(scratch.dsn, products));
    auto opts = options_with(products);
    opts.dsn = scratch.dsn;
    store db{opts};
    REQUIRE(db.create_chat(
      chat_spec{1, amounts({{pocket::balance, 20}}), caf::none, caf::none}));
    auto without = [&](const std::string& name) {
      auto out = products;
      out.kinds.erase(
        std::find_if(out.kinds.begin(), out.kinds.end(),
                     [&](const kind_spec& k) { return k.name == name; }));
      return out;
    };
    auto kinds = [&] {
      pqxx::connection conn{scratch.dsn};
      pqxx::nontransaction tx{conn};
      return tx
        .exec1(
          "SELECT string_agg(kind, ',' ORDER BY kind) FROM catalog_kinds")[0]
        .as<std::string>();
    };
    CHECK(kinds() == "text,video,voice");

    auto job = db.reserve(1, kind{"video"}, "a");
    REQUIRE(job);
    auto active =
      persistence::record_catalog_kinds(scratch.dsn, without("video"));
    CHECK(active == ec::invalid_argument);
    CHECK(error_message(active).find(
            "kind video has 1 active reservations and 0 ledger rows")
          != std::string::npos);
    REQUIRE(db.start(1, job->id));
    REQUIRE(db.commit(1, job->id));
    auto charged =
      persistence::record_catalog_kinds(scratch.dsn, without("video"));
    CHECK(charged == ec::invalid_argument);
    CHECK(error_message(charged).find(
            "kind video has 0 active reservations and 1 ledger rows")
          != std::string::npos);
    CHECK(kinds() == "text,video,voice"); // a refusal changes nothing

    // voice never sold: dropping it is fine, and adding it back too.
    CHECK_FALSE(
      persistence::record_catalog_kinds(scratch.dsn, without("voice")));
    CHECK(kinds() == "text,video");
    CHECK_FALSE(persistence::record_catalog_kinds(scratch.dsn, products));
    CHECK(kinds() == "text,video,voice");

    // A voice job of unknown outcome: no reservation, no ledger row yet,
    // and resolving it succeeded will charge a voice hold.
    auto open = db.reserve(1, kind{"voice"}, "b");
    REQUIRE(open);
    REQUIRE(db.start(1, open->id));
    REQUIRE(db.uncertain(1, open->id, "provider-1"));
    auto unknown =
      persistence::record_catalog_kinds(scratch.dsn, without("voice"));
    REQUIRE(unknown == ec::invalid_argument);
    CHECK(error_message(unknown).find(
            "kind voice has 0 active reservations and 0 ledger rows, and 1 "
            "jobs of unknown outcome")
          != std::string::npos);
    CHECK(kinds() == "text,video,voice");
  }

  TEST_CASE_FIXTURE(catalog_fixture,
                    "create-chat naming a pocket the catalog does not know "
                    "is invalid_argument, even at 0, and creates nothing") {
    for (int amount : {0, 3}) {
      auto chat = test::fresh_chat();
      auto refused = db.create_chat(chat_spec{
        chat, amounts({{pocket::daily_images, amount}, {pocket::balance, 1}}),
        caf::none, caf::none});
      REQUIRE_FALSE(refused);
      CHECK(refused.error() == ec::invalid_argument);
      CHECK(error_message(refused.error()).find("unknown pocket daily_images")
            != std::string::npos);
      CHECK(test::sql_int("SELECT count(*) FROM chats" + where(chat)) == 0);
    }
  }

  TEST_CASE("a dead database is storage_unavailable, not a refusal") {
    auto err = persistence::record_catalog_kinds(
      "host=/nonexistent port=1 dbname=x connect_timeout=1", voice_video());
    CHECK(err == ec::storage_unavailable);
  }
}
