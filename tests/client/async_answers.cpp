// SPDX-License-Identifier: Apache-2.0
// Where and with what the client's asynchronous calls are answered, against
// a real server over TCP and a real Postgres: a continuation runs exactly
// once, never inside the call that issued it and never on the caller's
// thread; the answers are those of the blocking calls.
#include "client/client.hpp"
#include "tests/client/async_gate.hpp"
#include "tests/client/async_loops.hpp"
#include "tests/client/async_script.hpp"
#include "tests/client/async_test.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <functional>
#include <string>
#include <vector>

using namespace chargeonce;
using namespace chargeonce::test;
using namespace std::chrono_literals;

TEST_SUITE("client.async.answers") {

  TEST_CASE_FIXTURE(gate_fixture,
                    "a continuation never runs inside the call that issued "
                    "it (nor on the caller's thread): answered by a server, "
                    "issued from continuations, failing at once") {
    constexpr int chains = 64;
    constexpr int depth = 6;
    // Chains of calls each issued by the previous call's continuation, on
    // a real server, batched and not.
    for (bool batching : {true, false}) {
      CAPTURE(batching);
      std::vector<chat_id> chats;
      for (int i = 0; i < 8; ++i)
        chats.push_back(make_chat({1, 1, 0}));
      tracker t{chains * depth};
      countdown done{chains};
      std::atomic<int> failures{0};
      {
        client_side side;
        client::client c{
          side.sys, options_for(gateway_port, client::role::gateway, batching)};
        std::function<void(chat_id, int)> step = [&](chat_id chat, int left) {
          if (left == 0) {
            done.arrive();
            return;
          }
          auto slot = t.take();
          auto next = [&step, &failures, chat, left](auto& x) {
            if (!x)
              ++failures;
            step(chat, left - 1);
          };
          issue([&] {
            if (left % 2 == 0)
              c.status(chat, t.watch<chat_status>(slot, next));
            else
              c.touch(chat, t.watch<chat_status>(slot, next));
          });
        };
        for (int i = 0; i < chains; ++i)
          step(chats[i % chats.size()], depth);
        CHECK(done.wait(30s));
      }
      CHECK(failures.load() == 0);
      check_exactly_once(t, chains * depth);
    }
    // Calls that fail at once: nobody listens on either server's port, so
    // every connect is refused (the first fails over to the second). Safe
    // and unsafe operations, issued from the test thread and from
    // continuations.
    for (bool batching : {true, false}) {
      CAPTURE(batching);
      tracker t{chains * depth};
      countdown done{chains};
      std::atomic<int> wrong{0};
      surprises odd;
      {
        client_side side;
        client::client c{side.sys, options_for({{"127.0.0.1", closed_port()},
                                                {"127.0.0.1", closed_port()}},
                                               client::role::all, batching)};
        std::function<void(chat_id, int)> step = [&](chat_id chat, int left) {
          if (left == 0) {
            done.arrive();
            return;
          }
          auto slot = t.take();
          auto next = [&, chat, left](auto& x) {
            if (x || is_service_error(x.error())) {
              ++wrong;
              odd.add("an answer from nowhere");
            }
            step(chat, left - 1);
          };
          issue([&] {
            switch (left % 6) {
            case 0:
              c.status(chat, t.watch<chat_status>(slot, next));
              break;
            case 1:
              c.cancel(chat, t.watch<reservation>(slot, next));
              break;
            case 2:
              c.commit(chat, 1, t.watch<receipt>(slot, next));
              break;
            case 3:
              c.reserve(chat, kind::text, "", t.watch<reservation>(slot, next));
              break;
            case 4:
              c.start(chat, 1, t.watch<reservation>(slot, next));
              break;
            default:
              c.touch(chat, t.watch<chat_status>(slot, next));
            }
          });
        };
        for (int i = 0; i < chains; ++i)
          step(test::fresh_chat(), depth);
        CHECK(done.wait(30s));
      }
      INFO(odd.text());
      CHECK(wrong.load() == 0);
      check_exactly_once(t, chains * depth);
    }
    // No server at all: answered by an actor all the same.
    {
      tracker t{16};
      countdown done{16};
      std::atomic<int> wrong{0};
      {
        client_side side;
        client::client c{side.sys, options_for(std::vector<client::endpoint>{},
                                               client::role::all, true)};
        for (int i = 0; i < 16; ++i) {
          auto slot = t.take();
          issue([&] {
            c.status(
              test::fresh_chat(), t.watch<chat_status>(slot, [&](auto& x) {
                if (x || x.error() != caf::sec::no_actor_published_at_port)
                  ++wrong;
                done.arrive();
              }));
          });
        }
        CHECK(done.wait(30s));
      }
      CHECK(wrong.load() == 0);
      check_exactly_once(t, 16);
    }
  }

  TEST_CASE_FIXTURE(gate_fixture,
                    "exactly one answer per call, and the service errors of "
                    "the blocking calls: 64 reserves of one chat give one "
                    "reservation and 63 busy; every state answers as the "
                    "blocking API does") {
    for (int round = 0; round < 3; ++round) {
      CAPTURE(round);
      auto chat = make_chat({0, 10, 0});
      auto sent = race_reserves(
        options_for(gateway_port, client::role::gateway, true), chat);
      CHECK(sent.second == 64);
      auto st = setup.status(chat);
      REQUIRE(st);
      REQUIRE(st->active);
      CHECK(st->amounts == pockets{0, 10, 0}); // held, not charged
    }
    // Every state of a chat: the asynchronous answers are the blocking ones.
    auto want = blocking_script(*this);
    check_async_script(*this, options_for(gate_port, client::role::all, true),
                       want);
    // And through the role ports (the gateway's and the worker's clients).
    tracker t{64};
    std::vector<std::string> got;
    {
      client_side side;
      client::client gateway{
        side.sys, options_for(gateway_port, client::role::gateway, true)};
      client::client worker{
        side.sys, options_for(worker_port, client::role::worker, true)};
      // The script's calls, each to the client of its role.
      struct split_calls {
        async_calls gateway;
        async_calls worker;
        auto touch(chat_id chat) { return gateway.touch(chat); }
        auto status(chat_id chat) { return gateway.status(chat); }
        auto cancel(chat_id chat) { return gateway.cancel(chat); }
        auto reserve(chat_id chat, kind k, const std::string& request_id) {
          return gateway.reserve(chat, k, request_id);
        }
        auto start(chat_id chat, reservation_id id) {
          return worker.start(chat, id);
        }
        auto heartbeat(chat_id chat, reservation_id id) {
          return worker.heartbeat(chat, id);
        }
        auto commit(chat_id chat, reservation_id id) {
          return worker.commit(chat, id);
        }
        auto fail(chat_id chat, reservation_id id) {
          return worker.fail(chat, id);
        }
      };
      split_calls calls{{gateway, t}, {worker, t}};
      got = script(calls, make_chat({1, 0, 0}), test::fresh_chat());
    }
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("line " << i);
      CHECK(got[i] == want[i]);
    }
    check_exactly_once(t, want.size());
  }

} // TEST_SUITE
