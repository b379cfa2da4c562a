// SPDX-License-Identifier: Apache-2.0
// The client's asynchronous calls and batches, against a real server over
// TCP and a real Postgres: closed loops driven only by continuations are
// charged exactly once and share batches with blocking calls; with batching
// off, or a server without batches, the answers are the same and nothing
// travels in a batch.
#include "client/client.hpp"
#include "tests/client/async_gate.hpp"
#include "tests/client/async_loops.hpp"
#include "tests/client/async_script.hpp"
#include "tests/client/async_test.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace chargeonce;
using namespace chargeonce::test;
using namespace std::chrono_literals;

TEST_SUITE("client.async.batching") {

  TEST_CASE_FIXTURE(gate_fixture,
                    "48 closed loops driven only by continuations: each "
                    "commit charges what was reserved, balances end exact, "
                    "and they share batches with blocking callers") {
    REQUIRE(gate_port != 0);
    constexpr int loops = 48;
    constexpr int cycles = 10;
    constexpr int blocking_threads = 8;
    int mixed = 0; // batches with operations of both kinds, in all rounds
    for (int round = 0; round < 3; ++round) {
      CAPTURE(round);
      std::vector<chat_id> chats;
      for (int i = 0; i < loops; ++i)
        chats.push_back(make_chat({cycles, 0, 0}));
      std::vector<chat_id> blocking_chats;
      for (int i = 0; i < blocking_threads; ++i)
        blocking_chats.push_back(make_chat({cycles, 0, 0}));
      tracker t{loops * cycles * 3};
      countdown done{loops};
      std::atomic<int> failures{0};
      std::atomic<int> blocking_failures{0};
      surprises odd;
      std::pair<uint64_t, uint64_t> sent;
      {
        client_side side;
        client::client c{side.sys,
                         options_for(gate_port, client::role::all, true)};
        // Blocking callers on the same client at the same time.
        std::vector<std::thread> blocking;
        for (auto chat : blocking_chats)
          blocking.emplace_back([&, chat] {
            for (int i = 0; i < cycles; ++i) {
              auto r = c.reserve(chat, kind::text, "b" + std::to_string(i));
              auto s = r ? c.start(chat, r->id) : r;
              auto x =
                s ? c.commit(chat, s->id) : caf::expected<receipt>{s.error()};
              if (!x || x->charged != pockets{1, 0, 0})
                ++blocking_failures;
            }
          });
        closed_loop loop{c, t, done, failures, odd, cycles};
        for (auto chat : chats)
          loop.run(chat, 0);
        // The test thread only waits.
        CHECK(done.wait(60s));
        for (auto& x : blocking)
          x.join();
        sent = c.batches_sent();
      }
      INFO("unexpected answers: " << odd.text());
      CHECK(failures.load() == 0);
      CHECK(blocking_failures.load() == 0);
      check_exactly_once(t, loops * cycles * 3);
      for (auto chat : chats) {
        auto st = setup.status(chat);
        REQUIRE(st);
        CHECK(st->amounts == pockets{0, 0, 0});
        CHECK_FALSE(st->active);
        CHECK(
          test::sql_int(
            "SELECT count(*) FROM ledger WHERE entry = 'charge' AND chat_id = "
            + std::to_string(chat))
          == cycles);
      }
      for (auto chat : blocking_chats)
        CHECK(setup.status(chat)->amounts == pockets{0, 0, 0});
      // Every operation, asynchronous or blocking, travelled in a batch,
      // and batches were shared.
      const uint64_t operations = (loops + blocking_threads) * cycles * 3;
      CHECK(sent.second == operations);
      CHECK(sent.first < sent.second);
      std::set<chat_id> async_set{chats.begin(), chats.end()};
      std::set<chat_id> blocking_set{blocking_chats.begin(),
                                     blocking_chats.end()};
      auto mixed_before = mixed;
      {
        std::lock_guard<std::mutex> guard{log->mtx};
        for (auto& batch : log->batches) {
          bool a = false;
          bool b = false;
          for (auto chat : batch) {
            a = a || async_set.count(chat) > 0;
            b = b || blocking_set.count(chat) > 0;
          }
          mixed += a && b ? 1 : 0;
        }
        log->batches.clear();
      }
      MESSAGE("round " << round << ": " << sent.second << " operations in "
                       << sent.first << " batches, " << mixed - mixed_before
                       << " of them mixed");
    }
    // Continuations and blocking callers share batch messages. Whether a
    // blocking caller's operation finds continuations' operations queued is
    // up to timing: counted over the rounds' thousands of operations.
    CHECK(mixed > 0);
  }

  TEST_CASE_FIXTURE(gate_fixture,
                    "batching off, or a server without batches: the same "
                    "answers, one request per call, batches_sent() stays "
                    "{0, 0}") {
    using none_sent = std::pair<uint64_t, uint64_t>;
    // A port that offers every operation but no batches: the API itself.
    auto plain =
      server.sys.middleman().publish(server.api, 0, "127.0.0.1", true);
    REQUIRE(plain);
    auto want = blocking_script(*this);
    {
      std::lock_guard<std::mutex> guard{log->mtx};
      log->batches.clear(); // the blocking client's
    }
    struct setting {
      const char* name;
      client::options opts;
    };
    std::vector<setting> variants{
      {"batching off", options_for(gate_port, client::role::all, false)},
      {"server without batches", options_for(*plain, client::role::all, true)},
    };
    for (auto& v : variants) {
      CAPTURE(v.name);
      check_async_script(*this, v.opts, want);
      // 64 reserves of one chat.
      auto chat = make_chat({0, 10, 0});
      auto gate_before = log->received();
      auto sent = race_reserves(v.opts, chat);
      CHECK(sent == none_sent{0, 0});
      if (v.opts.servers.front().port == gate_port) // one request per call
        CHECK(log->received() - gate_before == 64);
      // Closed loops.
      constexpr int loops = 16;
      constexpr int cycles = 5;
      std::vector<chat_id> chats;
      for (int i = 0; i < loops; ++i)
        chats.push_back(make_chat({cycles, 0, 0}));
      tracker lt{loops * cycles * 3};
      countdown loops_done{loops};
      std::atomic<int> failures{0};
      surprises odd;
      {
        client_side side;
        client::client c{side.sys, v.opts};
        closed_loop loop{c, lt, loops_done, failures, odd, cycles};
        for (auto x : chats)
          loop.run(x, 0);
        CHECK(loops_done.wait(30s));
        sent = c.batches_sent();
      }
      INFO("unexpected answers: " << odd.text());
      CHECK(failures.load() == 0);
      check_exactly_once(lt, loops * cycles * 3);
      CHECK(sent == none_sent{0, 0});
      for (auto x : chats)
        CHECK(setup.status(x)->amounts == pockets{0, 0, 0});
    }
    // The gate saw no batch from the batching-off client.
    std::lock_guard<std::mutex> guard{log->mtx};
    CHECK(log->batches.empty());
  }

} // TEST_SUITE
