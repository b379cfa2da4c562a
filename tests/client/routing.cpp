// SPDX-License-Identifier: Apache-2.0
// Rendezvous hashing: stable homes, even spread, and a server change moves
// only the chats it must.
#include "client/routing.hpp"

#include "protocol/errors.hpp"

#include <doctest/doctest.h>

#include <map>

using namespace chargeonce;
using namespace chargeonce::client;

namespace {

std::vector<endpoint> servers(int n) {
  std::vector<endpoint> out;
  for (int i = 0; i < n; ++i)
    out.push_back({"10.0.0." + std::to_string(i + 1), 4242});
  return out;
}

size_t home(const std::vector<endpoint>& xs, chat_id chat) {
  return rank(xs, chat).front();
}

} // namespace

TEST_SUITE("routing") {

  TEST_CASE("a chat's home is stable and its rank lists every server once") {
    auto xs = servers(5);
    for (chat_id chat : {chat_id{1}, chat_id{-100123}, chat_id{987654321}}) {
      auto order = rank(xs, chat);
      CHECK(order == rank(xs, chat));
      std::vector<size_t> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      CHECK(sorted == std::vector<size_t>{0, 1, 2, 3, 4});
    }
    // The weight depends only on the server's name and the chat, not on the
    // list it is in: every process computes the same homes.
    CHECK(weight(xs[2], 77) == weight(endpoint{"10.0.0.3", 4242}, 77));
  }

  TEST_CASE("chats spread evenly over the servers") {
    auto xs = servers(4);
    std::map<size_t, int> count;
    for (chat_id chat = 1; chat <= 40000; ++chat)
      ++count[home(xs, chat)];
    for (auto& [server, n] : count) {
      CAPTURE(server);
      CHECK(n > 9000); // 10,000 each in expectation
      CHECK(n < 11000);
    }
  }

  TEST_CASE("removing a server moves only its chats; adding one takes only "
            "what it wins") {
    auto four = servers(4);
    auto three = std::vector<endpoint>(four.begin(), four.begin() + 3);
    int moved = 0;
    for (chat_id chat = 1; chat <= 20000; ++chat) {
      auto before = four[home(four, chat)];
      auto after = three[home(three, chat)];
      if (!(before == four[3]))
        CHECK(before == after); // not on the removed server: stays
      else
        ++moved;
      // Failing over goes to the chat's second choice: its home without the
      // removed server.
      if (before == four[3])
        CHECK(after == four[rank(four, chat)[1]]);
    }
    CHECK(moved > 4000); // about a quarter
    CHECK(moved < 6000);
  }

  TEST_CASE("server lists parse strictly") {
    auto xs = parse_endpoints("a:1,[::1]:4242,b.example:65535");
    REQUIRE(xs);
    CHECK(xs->size() == 3);
    CHECK((*xs)[1].host == "::1");
    CHECK((*xs)[1].label() == "[::1]:4242");
    for (auto bad :
         {"", "a", "a:", ":1", "a:0", "a:70000", "a:1,,b:2", "a:1,a:1", "a:x"})
      CHECK(parse_endpoints(bad).error() == ec::invalid_argument);
  }

} // TEST_SUITE
