// SPDX-License-Identifier: Apache-2.0
// The catalog file: the built-in rules, the file form read back, and every
// refusal naming what is wrong.
#include "protocol/catalog.hpp"

#include <doctest/doctest.h>

using namespace chargeonce;

namespace {

/// The problem parse_catalog reports for `text` (empty: accepted).
std::string problem_of(const std::string& text) {
  catalog c;
  return parse_catalog(text, c);
}

/// A catalog with one kind `k` whose body is `kind_body`, beside the
/// built-in pockets.
std::string with_kind(const std::string& kind_body,
                      const std::string& k = "voice") {
  return R"({"pockets": {"daily_voice": {"daily": {"free": 2, "premium": 5}},
                         "balance": {"purchased": true}},
             "kinds": {")"
         + k + "\": " + kind_body + "}}";
}

} // namespace

TEST_SUITE("catalog") {

  TEST_CASE("the built-in catalog is the original design's rules") {
    auto c = builtin_catalog({10, 3, 12, 11});
    CHECK(validate(c).empty());
    REQUIRE(c.kinds.size() == 2);
    const auto* text = c.find_kind("text");
    REQUIRE(text != nullptr);
    CHECK(text->premium_free);
    REQUIRE(text->pay_from.size() == 1);
    CHECK(text->pay_from[0].pocket == "daily_messages");
    CHECK(text->queue == "text_generation");
    CHECK(text->priority_queue == "text_generation_priority");
    const auto* image = c.find_kind("image");
    REQUIRE(image != nullptr);
    CHECK_FALSE(image->premium_free);
    REQUIRE(image->pay_from.size() == 2);
    CHECK(image->pay_from[0].pocket == "daily_images");
    CHECK(image->pay_from[1].pocket == "balance");
    CHECK(image->cancel_after_start == cancel_policy::refuse);
    CHECK(c.find_pocket("daily_messages")->free_daily == 10);
    CHECK(c.find_pocket("daily_images")->free_daily == 3);
    CHECK(c.find_pocket("daily_messages")->premium_daily == 12);
    CHECK(c.find_pocket("daily_images")->premium_daily == 11);
    CHECK(c.find_pocket("balance")->purchased);
    CHECK(c.kind_names() == "image, text");
  }

  TEST_CASE("the printed catalog reads back to the same catalog") {
    auto c = builtin_catalog({});
    catalog back;
    REQUIRE(parse_catalog(to_json(c).dump(2), back).empty());
    CHECK(to_json(back) == to_json(c));
    CHECK(to_json(c).dump().find(R"("pockets":{"daily_messages")")
          == 1); // the file's order, pockets first
  }

  TEST_CASE("the issue's example file is accepted with its defaults filled") {
    catalog c;
    auto problem = parse_catalog(R"({
      "pockets": {
        "daily_messages": {"daily": {"free": 10, "premium": 10}},
        "daily_images":   {"daily": {"free": 3, "premium": 10}},
        "balance":        {"purchased": true}
      },
      "kinds": {
        "text":  {"pay_from": [{"pocket": "daily_messages", "price": 1}], "premium_free": true},
        "image": {"pay_from": [{"pocket": "daily_images", "price": 1}, {"pocket": "balance", "price": 1}],
                  "queue": "image_generation", "priority_queue": "image_generation_priority",
                  "cancel_after_start": "refuse"}
      }
    })",
                                 c);
    REQUIRE(problem.empty());
    CHECK(to_json(c) == to_json(builtin_catalog({10, 3, 10, 10})));
  }

  TEST_CASE("a kind's prices, queues and cancel policy are read") {
    catalog c;
    REQUIRE(parse_catalog(with_kind(R"({"pay_from": [{"pocket": "daily_voice"},
                                  {"pocket": "balance", "price": 3}],
                                  "cancel_after_start": "request"})"),
                          c)
              .empty());
    const auto* voice = c.find_kind("voice");
    REQUIRE(voice != nullptr);
    CHECK(voice->pay_from[0].price == 1); // price defaults to 1
    CHECK(voice->pay_from[1].price == 3);
    CHECK(voice->queue == "voice_generation");
    CHECK(voice->priority_queue == "voice_generation_priority");
    CHECK(voice->cancel_after_start == cancel_policy::request);
  }

  TEST_CASE("balance is there even when the file does not list it") {
    catalog c;
    REQUIRE(parse_catalog(R"({"pockets": {}, "kinds": {"video":
                             {"pay_from": [{"pocket": "balance", "price": 5}]}}})",
                          c)
              .empty());
    REQUIRE(c.find_pocket("balance") != nullptr);
    CHECK(c.find_pocket("balance")->purchased);
  }

  TEST_CASE("balance before a daily pocket is refused, naming the kind") {
    auto problem = problem_of(with_kind(
      R"({"pay_from": [{"pocket": "balance"}, {"pocket": "daily_voice"}]})"));
    CHECK(problem.find("kind voice pays from balance before daily pocket "
                       "daily_voice")
          != std::string::npos);
  }

  TEST_CASE("a price of 0 or less is refused, naming the kind and pocket") {
    for (const char* price : {"0", "-2"}) {
      auto problem = problem_of(with_kind(
        std::string{R"({"pay_from": [{"pocket": "balance", "price": )"} + price
        + "}]}"));
      CHECK(problem.find("kind voice: price of balance must be 1 to")
            != std::string::npos);
    }
    CHECK(problem_of(
            with_kind(R"({"pay_from": [{"pocket": "balance", "price": 1.5}]})"))
          == "kind voice: price of balance must be an integer");
  }

  TEST_CASE("a kind without a way to pay, or paid from an unknown pocket, is "
            "refused") {
    CHECK(problem_of(with_kind(R"({"pay_from": []})"))
          == "kind voice has no way to pay: pay_from is empty");
    CHECK(problem_of(with_kind(R"({"premium_free": true})"))
          == "kind voice needs pay_from: the pockets it is paid from, in "
             "order");
    CHECK(problem_of(with_kind(R"({"pay_from": [{"pocket": "gold"}]})"))
          == "kind voice is paid from unknown pocket \"gold\"");
    CHECK(problem_of(with_kind(
            R"({"pay_from": [{"pocket": "balance"}, {"pocket": "balance"}]})"))
          == "kind voice lists pocket balance twice");
  }

  TEST_CASE("duplicate names are refused, though JSON parsers keep one") {
    CHECK(problem_of(R"({"pockets": {}, "kinds": {
                          "voice": {"pay_from": [{"pocket": "balance"}]},
                          "voice": {"pay_from": [{"pocket": "balance"}]}}})")
          == "the catalog names \"kinds.voice\" twice");
    CHECK(problem_of(
            R"({"pockets": {"daily_voice": {"daily": {"free": 1, "premium": 1}},
                                     "daily_voice": {"daily": {"free": 2, "premium": 2}}},
                         "kinds": {"voice": {"pay_from": [{"pocket": "balance"}]}}})")
          == "the catalog names \"pockets.daily_voice\" twice");
  }

  TEST_CASE("names, fields and shapes are checked") {
    CHECK(
      problem_of(with_kind(R"({"pay_from": [{"pocket": "balance"}]})", "Voice"))
        .find("kind name \"Voice\" must match")
      != std::string::npos);
    CHECK(problem_of(with_kind(R"({"pay_from": [{"pocket": "balance"}],
                                   "prize": 3})"))
          == "kind voice: unknown field \"prize\"");
    CHECK(problem_of(with_kind(R"({"pay_from": [{"pocket": "balance"}],
                                   "cancel_after_start": "later"})"))
          == "kind voice: cancel_after_start must be \"refuse\" or "
             "\"request\", not \"later\"");
    CHECK(problem_of(with_kind(R"({"pay_from": [{"pocket": "balance"}],
                                   "queue": "a queue"})"))
            .find("kind voice: queue name \"a queue\" must be")
          != std::string::npos);
    CHECK(problem_of(R"({"pockets": {}, "kinds": {}})")
          == "the catalog has no kinds");
    CHECK(problem_of("[1, 2]").find("must be a JSON object")
          != std::string::npos);
    CHECK(problem_of("{\"kinds\": ").find("not valid JSON")
          != std::string::npos);
    CHECK(problem_of(R"({"pockets": {}, "kinds": {}, "extra": 1})")
          == "the catalog: unknown field \"extra\"");
  }

  TEST_CASE("pockets: daily quotas per plan, balance the only purchased one") {
    auto kinds = std::string{
      R"(, "kinds": {"v": {"pay_from": [{"pocket": "balance"}]}}})"};
    CHECK(problem_of(R"({"pockets": {"gold": {"purchased": true}})" + kinds)
          == "pocket gold cannot be purchased: balance is the one purchased "
             "pocket");
    CHECK(problem_of(
            R"({"pockets": {"balance": {"daily": {"free": 1, "premium": 1}}})"
            + kinds)
          == "pocket balance is the purchased pocket: {\"purchased\": true}");
    CHECK(problem_of(R"({"pockets": {"dv": {"daily": {"free": 1}}})" + kinds)
          == "pocket dv: daily.premium is missing");
    CHECK(
      problem_of(R"({"pockets": {"dv": {"daily": {"free": -1, "premium": 1}}})"
                 + kinds)
        .find("pocket dv: daily.free must be 0 to")
      != std::string::npos);
    CHECK(problem_of(R"({"pockets": {"dv": {}})" + kinds)
            .find("pocket dv needs a daily quota")
          != std::string::npos);
  }
}
