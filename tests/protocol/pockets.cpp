// SPDX-License-Identifier: Apache-2.0
// Pocket arithmetic: refusals, holds across windows, what is left.
#include "protocol/pockets.hpp"

#include <doctest/doctest.h>

using namespace chargeonce;

TEST_SUITE("pockets") {

  TEST_CASE("a catalog kind's refusal names its prices") {
    kind_spec voice{"voice",        {{"daily_voice", 1}, {"balance", 3}},
                    false,          "voice_q",
                    "voice_q_fast", cancel_policy::refuse};
    CHECK(cannot_pay_detail(voice) == " (daily_voice: 1, balance: 3 each)");
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
