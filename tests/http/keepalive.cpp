// SPDX-License-Identifier: Apache-2.0
// Requests on a kept-alive connection, as client libraries send them
// (Python's requests.Session, PHP curl with handle reuse, Node's keep-alive
// agent), are answered without waiting for the client's delayed ACK: the
// server's sockets have TCP_NODELAY, so a response written in several
// pieces is not held back by Nagle's algorithm (about 40 ms per request
// otherwise). The server runs in this process, so the test reads the option
// off its end of the connection; the times are shown, not asserted.
// Real Postgres (CHARGEONCE_TEST_DSN) behind the adapter.
#include "main/http/server.hpp"
#include "tests/support/test_db.hpp"
#include "tests/support/threaded_server.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <vector>

using namespace chargeonce;
using namespace std::chrono_literals;

namespace {

/// The server's end, in this process, of the TCP connection whose client
/// end is `client`; -1 when there is none.
int server_end_of(int client) {
  sockaddr_in mine{};
  sockaddr_in theirs{};
  socklen_t len = sizeof mine;
  if (getsockname(client, reinterpret_cast<sockaddr*>(&mine), &len) != 0)
    return -1;
  len = sizeof theirs;
  if (getpeername(client, reinterpret_cast<sockaddr*>(&theirs), &len) != 0)
    return -1;
  for (const auto& entry :
       std::filesystem::directory_iterator{"/proc/self/fd"}) {
    auto fd = std::atoi(entry.path().filename().c_str());
    sockaddr_in local{};
    sockaddr_in peer{};
    len = sizeof local;
    if (fd == client
        || getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0
        || local.sin_family != AF_INET || local.sin_port != theirs.sin_port)
      continue;
    len = sizeof peer;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) == 0
        && peer.sin_port == mine.sin_port)
      return fd;
  }
  return -1;
}

} // namespace

TEST_SUITE("http keep-alive") {

  TEST_CASE("the server's end of a kept-alive connection has TCP_NODELAY: "
            "sequential requests do not wait for delayed ACKs") {
    test::threaded_server srv{test::store_options()};
    http::http_options opts;
    opts.port = 0;
    auto web =
      http::server::start(srv.sys, opts, srv.core, test::dsn(), srv.root);
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
    // The connection is still open, kept alive by the client.
    auto server_end = server_end_of(cli.socket());
    REQUIRE(server_end >= 0);
    int nodelay = 0;
    socklen_t len = sizeof nodelay;
    REQUIRE(getsockopt(server_end, IPPROTO_TCP, TCP_NODELAY, &nodelay, &len)
            == 0);
    CHECK(nodelay != 0);
    std::sort(ms.begin(), ms.end());
    auto median = ms[requests / 2];
    auto p90 = ms[requests * 9 / 10];
    // About 40 ms each with Nagle on; speed itself is chargeonce-bench's.
    MESSAGE("kept-alive GET /healthz: median " << median << " ms, p90 " << p90
                                               << " ms");
    web->reset();
  }
}
