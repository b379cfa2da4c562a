// SPDX-License-Identifier: Apache-2.0
// Pricing rules: what expires first is spent first; premium text is free.
#include "protocol/pockets.hpp"

#include <doctest/doctest.h>

using namespace chargeonce;

TEST_SUITE("pockets") {

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

  TEST_CASE("queue names follow <kind>_generation[_priority]") {
    CHECK(queue_for(kind::text, false) == "text_generation");
    CHECK(queue_for(kind::image, true) == "image_generation_priority");
  }

} // TEST_SUITE
