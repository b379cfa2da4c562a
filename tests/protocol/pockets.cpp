// SPDX-License-Identifier: Apache-2.0
// Pocket arithmetic: queues, refusals, the clamp, holds across windows.
#include "protocol/pockets.hpp"

#include <doctest/doctest.h>

using namespace chargeonce;

TEST_SUITE("pockets") {

  TEST_CASE("queue names follow <kind>_generation[_priority]") {
    CHECK(queue_for(kind::text, false) == "text_generation");
    CHECK(queue_for(kind::image, true) == "image_generation_priority");
  }

  TEST_CASE("a catalog kind's refusal names its prices") {
    kind_spec voice{"voice",        {{"daily_voice", 1}, {"balance", 3}},
                    false,          "voice_q",
                    "voice_q_fast", cancel_policy::refuse};
    CHECK(cannot_pay_message(42, voice)
          == "chat 42 cannot pay for voice (daily_voice: 1, balance: 3 "
             "each)");
    CHECK(insufficient_for(kind{"voice"}) == ec::insufficient_funds);
  }

  TEST_CASE("a hold of a past window weighs only with its balance part on "
            "the pockets of the window now") {
    reservation old;
    old.window = 4;
    old.held.set("daily_voice", 2);
    old.held.set("balance", 3);
    reservation current;
    current.window = 5;
    current.held.set("daily_voice", 1);
    auto held = held_by({old, current}, 5);
    CHECK(held.get("daily_voice") == 1);
    CHECK(held.get("balance") == 3);
    CHECK(in_window(old.held, 4, 4) == old.held);
    CHECK(in_window(old.held, 4, 5) == pockets{0, 0, 3});
    CHECK(in_window(current.held, 5, 6).items().empty());
  }

  TEST_CASE("holds and what is left are counted per pocket of any name") {
    reservation a;
    a.held.set("daily_voice", 1);
    reservation b;
    b.held.set("daily_voice", 1);
    b.held.set("balance", 5);
    auto held = held_by({a, b}, 0);
    CHECK(held.get("daily_voice") == 2);
    CHECK(held.get("balance") == 5);
    pockets amounts;
    amounts.set("daily_voice", 3);
    amounts.set("balance", 4);
    amounts.set("daily_video", 0);
    auto left = left_after(amounts, held);
    CHECK(left.get("daily_voice") == 1);
    CHECK(left.get("balance") == 0); // clamped, never negative
    CHECK(left.items().size() == 3); // every pocket of the amounts
  }

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

  TEST_CASE("pockets that differ only in listed zeros are equal") {
    pockets listed;
    listed.set("balance", 0);
    CHECK(listed == pockets{});
    CHECK(pockets{0, 0, 2} != pockets{});
    pockets two;
    two.set("balance", 2);
    CHECK(two == pockets(0, 0, 2));
  }

} // TEST_SUITE
