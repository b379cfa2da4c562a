// SPDX-License-Identifier: Apache-2.0
// The model's pricing rules (pricing.hpp): what expires first is spent
// first; premium text is free; a partial commit charges what expires first
// (tools/common/pocket_model.hpp). The server's own decision is tested in SQL
// (tests/sql/operations.sql) and against Postgres (tests/persistence).
#include "tests/simulation/pricing.hpp"
#include "tools/common/pocket_model.hpp"

#include <doctest/doctest.h>

using namespace chargeonce;
using namespace chargeonce::test;

TEST_SUITE("model pricing") {

  TEST_CASE("text: premium holds nothing and goes to the priority queue") {
    for (int dm : {0, 1}) // a premium chat pays nothing, whatever it has
      for (int bal : {0, 1}) {
        pocket_choice c;
        CHECK(choose_pockets(kind::text, true, {dm, 0, bal}, c) == ec::none);
        CHECK(c.held == pockets{});
        CHECK(c.queue == "text_generation_priority");
      }
  }

  TEST_CASE("text: a free chat holds one daily message, never balance") {
    pocket_choice c;
    CHECK(choose_pockets(kind::text, false, {3, 5, 7}, c) == ec::none);
    CHECK(c.held == pockets{1, 0, 0});
    CHECK(c.queue == "text_generation");
    CHECK(choose_pockets(kind::text, false, {0, 5, 7}, c)
          == ec::insufficient_messages);
  }

  TEST_CASE("image: daily image first, then balance, else insufficient") {
    // All combinations of empty/non-empty pockets, premium or not.
    for (bool premium : {false, true})
      for (int dm : {0, 2})
        for (int di : {0, 2})
          for (int bal : {0, 2}) {
            CAPTURE(premium);
            CAPTURE(dm);
            CAPTURE(di);
            CAPTURE(bal);
            pocket_choice c;
            auto code = choose_pockets(kind::image, premium, {dm, di, bal}, c);
            CHECK(
              c.queue
              == (premium ? "image_generation_priority" : "image_generation"));
            if (di > 0) {
              CHECK(code == ec::none);
              CHECK(c.held == pockets{0, 1, 0});
            } else if (bal > 0) {
              CHECK(code == ec::none);
              CHECK(c.held == pockets{0, 0, 1});
            } else {
              CHECK(code == ec::insufficient_images);
            }
          }
  }

  TEST_CASE("a catalog kind: the first pocket with its price left pays, "
            "balance last") {
    kind_spec voice{"voice",        {{"daily_voice", 1}, {"balance", 3}},
                    false,          "voice_q",
                    "voice_q_fast", cancel_policy::refuse};
    pocket_choice c;
    pockets left;
    left.set("daily_voice", 1);
    left.set("balance", 9);
    CHECK(choose_pockets(voice, false, left, c) == ec::none);
    CHECK(c.held.get("daily_voice") == 1);
    CHECK(c.held.get("balance") == 0);
    CHECK(c.queue == "voice_q");
    left.set("daily_voice", 0);
    CHECK(choose_pockets(voice, true, left, c) == ec::none);
    CHECK(c.held.get("balance") == 3); // its price there, not 1
    CHECK(c.queue == "voice_q_fast");
    left.set("balance", 2); // less than the price: cannot pay
    CHECK(choose_pockets(voice, false, left, c) == ec::insufficient_funds);
  }

  TEST_CASE("a premium-free kind holds nothing for premium chats only") {
    kind_spec memo{"memo",   {{"daily_memo", 1}}, true,
                   "memo_q", "memo_q_fast",       cancel_policy::refuse};
    pocket_choice c;
    CHECK(choose_pockets(memo, true, pockets{}, c) == ec::none);
    CHECK(c.held == pockets{});
    CHECK(choose_pockets(memo, false, pockets{}, c) == ec::insufficient_funds);
  }

  TEST_CASE("units are split over the pockets in the catalog's order, at "
            "each pocket's price, all or nothing") {
    auto image = *builtin_catalog({}).find_kind("image");
    image.pay_from[1].price = 1;
    pocket_choice c;
    // The example: 5 units, 2 daily images and 10 credits.
    CHECK(choose_pockets(image, false, pockets{0, 2, 10}, 5, c) == ec::none);
    CHECK(c.held == pockets(0, 2, 3));
    CHECK(c.held_units == pockets(0, 2, 3));
    // At a price of 2 credits a unit the same 3 units cost 6.
    image.pay_from[1].price = 2;
    CHECK(choose_pockets(image, false, pockets{0, 2, 10}, 5, c) == ec::none);
    CHECK(c.held == pockets(0, 2, 6));
    CHECK(c.held_units == pockets(0, 2, 3));
    // 7 units need 2 daily images and 5 * 2 = 10 credits: nothing is held.
    CHECK(choose_pockets(image, false, pockets{0, 2, 9}, 7, c)
          == ec::insufficient_images);
    CHECK(c.held == pockets{});
    CHECK(c.held_units == pockets{});
    // A credit left over that pays no whole unit stays where it is.
    CHECK(choose_pockets(image, false, pockets{0, 0, 5}, 2, c) == ec::none);
    CHECK(c.held == pockets(0, 0, 4));
  }

  TEST_CASE("text on the free plan takes daily messages only, all or nothing; "
            "premium text holds nothing, whatever the units") {
    auto text = *builtin_catalog({}).find_kind("text");
    pocket_choice c;
    CHECK(choose_pockets(text, false, pockets{3, 0, 100}, 4, c)
          == ec::insufficient_messages);
    CHECK(choose_pockets(text, false, pockets{4, 0, 100}, 4, c) == ec::none);
    CHECK(c.held == pockets(4, 0, 0));
    CHECK(choose_pockets(text, true, pockets{}, 1000, c) == ec::none);
    CHECK(c.held == pockets{});
  }
}

TEST_SUITE("model commit") {

  TEST_CASE("a commit of fewer units charges the pockets that expire first "
            "at the hold's own prices") {
    pockets held{0, 2, 6};  // 2 daily images, 3 units of 2 credits
    pockets units{0, 2, 3}; // 5 units
    CHECK(captured(held, units, 5, 0) == held); // not given: the whole hold
    CHECK(captured(held, units, 5, 5) == held);
    CHECK(captured(held, units, 5, 1) == pockets(0, 1, 0));
    CHECK(captured(held, units, 5, 2) == pockets(0, 2, 0));
    CHECK(captured(held, units, 5, 4) == pockets(0, 2, 4));
    // Daily pockets by name, then balance.
    pockets h2;
    h2.set("daily_b", 3);
    h2.set("daily_a", 2);
    h2.set("balance", 1);
    CHECK(captured(h2, h2, 6, 3).get("daily_a") == 2);
    CHECK(captured(h2, h2, 6, 3).get("daily_b") == 1);
    CHECK(captured(h2, h2, 6, 3).get("balance") == 0);
    CHECK(captured(pockets{}, pockets{}, 4, 2) == pockets{}); // premium-free
  }
}
