// SPDX-License-Identifier: Apache-2.0
// The client library against two real servers over TCP: chats go to their
// home server; when it dies, safe operations fail over to the next one and
// unsafe ones report the connection error; a restarted server is
// reconnected.
#include "client/client.hpp"
#include "protocol/errors.hpp"
#include "tests/client/client_test.hpp"
#include "tests/support/test_db.hpp"
#include "tests/support/threaded_server.hpp"

#include <doctest/doctest.h>

#include <memory>
#include <thread>

using namespace chargeonce;
using namespace std::chrono_literals;

TEST_SUITE("client") {

  TEST_CASE("failover: safe operations move to the next server, unsafe ones "
            "report the connection error, a restarted server is reconnected") {
    auto a = std::make_unique<test::threaded_server>(test::store_options());
    test::threaded_server b{test::store_options()};
    auto servers = test::publish_all({a.get(), &b});
    test::client_config cfg;
    caf::actor_system sys{cfg};
    client::options opts;
    opts.servers = servers;
    opts.timeout = 5s;
    client::client c{sys, opts};
    std::vector<chat_id> at_a;
    for (int i = 0; i < 4; ++i) {
      at_a.push_back(test::chat_homed_at(c, servers, 0));
      REQUIRE(c.create({at_a.back(), {0, 5, 5}, caf::none, caf::none}));
    }
    auto r = c.reserve(at_a[0], kind::image, "job-a0");
    REQUIRE(r);
    REQUIRE(c.reserve(at_a[1], kind::image, "")); // to cancel later
    a.reset();                                    // server A is gone
    // Safe: a worker's start and commit fail over to B (same database).
    auto started = c.start(at_a[0], r->id);
    REQUIRE(started);
    CHECK(started->status == reservation_status::in_progress);
    // Units named as 0 are refused before they travel (in a batch, 0
    // would read as "not given", the whole hold); left out, all of it.
    auto zero_commit = c.commit(at_a[0], r->id, 0);
    REQUIRE_FALSE(zero_commit);
    CHECK(zero_commit.error() == ec::invalid_argument);
    auto zero_reserve = c.reserve(at_a[2], kind::image, "job-zero", 0);
    REQUIRE_FALSE(zero_reserve);
    CHECK(zero_reserve.error() == ec::invalid_argument);
    REQUIRE(c.commit(at_a[0], r->id));
    // A reserve with its request_id is safe; without one the client gives
    // it an id of its own (auto:), which makes it safe too.
    CHECK(c.reserve(at_a[2], kind::image, "job-a2"));
    auto made_up = c.reserve(at_a[3], kind::image, "");
    REQUIRE(made_up);
    CHECK(made_up->request_id.rfind("auto:", 0) == 0);
    CHECK(made_up->request_id.size() == 5 + 32);
    CHECK(c.reserve(at_a[3], kind::image, made_up->request_id)->id
          == made_up->id); // an ordinary id for replays
    auto cancel = c.cancel(at_a[1]);
    REQUIRE_FALSE(cancel);
    CHECK(cancel.error().category() != caf::atom(error_category_name));
    // Service errors are answers, not failures: no failover, no retry.
    CHECK(c.reserve(at_a[2], kind::image, "other").error() == ec::busy);
    // A server back on A's port is reconnected.
    a = std::make_unique<test::threaded_server>(test::store_options());
    REQUIRE(a->publish(servers[0].port) == servers[0].port);
    auto st = c.cancel(at_a[1]); // cancel is not retried: it must reach A
    REQUIRE(st);
    CHECK(st->chat == at_a[1]);
  }

} // TEST_SUITE
