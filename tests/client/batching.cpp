// SPDX-License-Identifier: Apache-2.0
// Client batching against a real server over TCP and a real Postgres:
// concurrent callers share batch messages, every one gets its own answer,
// and the guarantees hold as for single requests (one reservation per chat,
// the rest busy).
#include "client/client.hpp"
#include "protocol/errors.hpp"
#include "tests/client/client_test.hpp"
#include "tests/support/test_db.hpp"
#include "tests/support/threaded_server.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

using namespace chargeonce;
using namespace std::chrono_literals;

namespace {

struct fixture {
  test::threaded_server server{test::store_options()};
  persistence::store setup{test::store_options()};
  uint16_t gateway_port = server.publish(0, make_gateway);
  uint16_t worker_port = server.publish(0, make_worker);
  test::client_config cfg;
  caf::actor_system sys{cfg};

  client::client connect(uint16_t port, client::role r) {
    client::options opts;
    opts.servers = {{"127.0.0.1", port}};
    opts.facade = r;
    opts.timeout = 20s;
    return client::client{sys, opts};
  }

  chat_id make_chat(pockets initial) {
    auto chat = test::fresh_chat();
    REQUIRE(setup.create_chat({chat, initial, caf::none, caf::none}));
    return chat;
  }
};

} // namespace

TEST_SUITE("client.batching") {

  TEST_CASE_FIXTURE(fixture, "32 threads running cycles share batches; each "
                             "gets its own answer and is charged once") {
    REQUIRE(gateway_port != 0);
    REQUIRE(worker_port != 0);
    auto gateway = connect(gateway_port, client::role::gateway);
    auto worker = connect(worker_port, client::role::worker);
    constexpr int threads = 32;
    constexpr int cycles = 10;
    std::vector<chat_id> chats;
    for (int i = 0; i < threads; ++i)
      chats.push_back(make_chat({cycles, 0, 0}));
    std::atomic<int> failures{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, chat = chats[t]] {
        for (int i = 0; i < cycles; ++i) {
          auto r = gateway.reserve(chat, kind::text, "job" + std::to_string(i));
          auto s = r ? worker.start(chat, r->id) : r;
          auto c =
            s ? worker.commit(chat, s->id) : caf::expected<receipt>{s.error()};
          if (!c || c->charged != pockets{1, 0, 0})
            ++failures;
        }
      });
    for (auto& x : pool)
      x.join();
    CHECK(failures == 0);
    for (auto chat : chats) {
      CHECK(
        test::sql_int(
          "SELECT count(*) FROM ledger WHERE entry = 'charge' AND chat_id = "
          + std::to_string(chat))
        == cycles);
      CHECK(setup.status(chat)->amounts == pockets{0, 0, 0});
    }
    auto [gateway_batches, gateway_ops] = gateway.batches_sent();
    auto [worker_batches, worker_ops] = worker.batches_sent();
    CHECK(gateway_ops == threads * cycles);
    CHECK(worker_ops == 2 * threads * cycles);
    MESSAGE("gateway: " << gateway_ops << " operations in " << gateway_batches
                        << " batches; worker: " << worker_ops << " in "
                        << worker_batches);
    // With more callers than batches in flight, operations must share.
    CHECK(gateway_batches < gateway_ops);
    CHECK(worker_batches < worker_ops);
  }

  TEST_CASE_FIXTURE(fixture, "64 threads reserving one chat through batches: "
                             "one reservation, 63 busy") {
    auto gateway = connect(gateway_port, client::role::gateway);
    for (int round = 0; round < 3; ++round) {
      auto chat = make_chat({0, 10, 0});
      std::vector<std::future<caf::expected<reservation>>> results;
      for (int i = 0; i < 64; ++i)
        results.push_back(std::async(std::launch::async, [&, i] {
          return gateway.reserve(chat, kind::image, "tap" + std::to_string(i));
        }));
      auto outcome = test::tally(results);
      CHECK(outcome.won == 1);
      CHECK(outcome.busy == 63);
      CHECK(outcome.other == 0);
    }
  }

  TEST_CASE_FIXTURE(fixture, "batching off: the same answers, one message "
                             "per operation") {
    client::options opts;
    opts.servers = {{"127.0.0.1", gateway_port}};
    opts.facade = client::role::gateway;
    opts.batching = false;
    client::client gateway{sys, opts};
    auto chat = make_chat({1, 0, 0});
    REQUIRE(gateway.reserve(chat, kind::text, "x"));
    CHECK(gateway.reserve(chat, kind::text, "y").error() == ec::busy);
    CHECK(gateway.batches_sent() == std::pair<uint64_t, uint64_t>{0, 0});
  }
}
