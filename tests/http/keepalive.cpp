// SPDX-License-Identifier: Apache-2.0
// Requests on a kept-alive connection, as client libraries send them
// (Python's requests.Session, PHP curl with handle reuse, Node's keep-alive
// agent), are answered without waiting for the client's delayed ACK: the
// server's sockets have TCP_NODELAY, so a response written in several
// pieces is not held back by Nagle's algorithm (about 40 ms per request
// otherwise). Real Postgres (CHARGEONCE_TEST_DSN) behind the adapter.
#include "main/http/server.hpp"
#include "tests/support/test_db.hpp"
#include "tests/support/threaded_server.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <httplib.h>
#include <vector>

using namespace chargeonce;
using namespace std::chrono_literals;

TEST_SUITE("http keep-alive") {

  TEST_CASE("sequential requests on one kept-alive connection take well "
            "under a delayed ACK each (median < 20 ms)") {
    test::threaded_server srv{test::store_options()};
    http::http_options opts;
    opts.port = 0;
    auto web =
      http::server::start(srv.sys, opts, srv.api, test::dsn(), srv.root);
    REQUIRE(web);
    REQUIRE(*web != nullptr);
    httplib::Client cli{"127.0.0.1", (*web)->port()};
    cli.set_keep_alive(true);
    // The client's own writes are not what is under test.
    cli.set_tcp_nodelay(true);
    constexpr int requests = 40;
    std::vector<double> ms;
    for (int i = 0; i < requests; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      auto res = cli.Get("/healthz");
      auto t1 = std::chrono::steady_clock::now();
      REQUIRE(res);
      REQUIRE(res->status == 200);
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    auto median = ms[requests / 2];
    auto p90 = ms[requests * 9 / 10];
    MESSAGE("kept-alive GET /healthz: median " << median << " ms, p90 " << p90
                                               << " ms");
    CHECK(median < 20.0);
    web->reset();
  }
}
