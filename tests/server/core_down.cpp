// SPDX-License-Identifier: Apache-2.0
// A server whose actors die must not keep serving: /readyz turns 503 at once
// (never a cached 200), and the process exits with exit_core_down so that
// systemd's Restart= brings it back. Real Postgres (CHARGEONCE_TEST_DSN).
#include "main/http/server.hpp"
#include "main/server/server.hpp"
#include "tests/support/test_db.hpp"
#include "tests/support/threaded_server.hpp"
#include "tests/support/wait.hpp"

#include <caf/all.hpp>
#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <httplib.h>
#include <poll.h>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace chargeonce;
using namespace std::chrono_literals;

namespace {

using clock_type = std::chrono::steady_clock;

/// Kills `registry` and returns once it is gone.
void kill_and_wait(caf::actor_system& sys, const caf::actor& registry) {
  caf::scoped_actor self{sys};
  self->monitor(registry);
  caf::anon_send_exit(registry, caf::exit_reason::kill);
  self->receive([](const caf::down_msg&) {});
}

/// The registry behind a supervisor: the handle it hands out to publish.
caf::actor registry_of(caf::actor_system& sys, const caf::actor& root) {
  caf::actor out;
  caf::scoped_actor self{sys};
  self->request(root, 10s, atom::core_v)
    .receive([&](core_actor& x) { out = caf::actor_cast<caf::actor>(x); },
             [](const caf::error&) {});
  return out;
}

/// One GET /readyz on a fresh connection, as a prober sends it. A loopback
/// connect takes microseconds and the answer milliseconds (the server's own
/// checks give up after 1 s and 2 s): 5 s means the server hangs.
httplib::Result readyz(uint16_t port) {
  httplib::Client cli{"127.0.0.1", port};
  cli.set_connection_timeout(5, 0);
  cli.set_read_timeout(5, 0);
  return cli.Get("/readyz");
}

using std::chrono::duration_cast;
using std::chrono::milliseconds;

/// The `http=` port of a port file, 0 while it is not written.
uint16_t http_port_of(const std::string& path) {
  std::ifstream in{path};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("http=", 0) == 0)
      return static_cast<uint16_t>(std::stoi(line.substr(5)));
  return 0;
}

/// A byte from `fd` within `timeout`.
bool read_byte(int fd, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) != 1)
    return false;
  char c = 0;
  return read(fd, &c, 1) == 1;
}

/// In the child: waits for the parent's byte on `trigger`, kills the
/// registry, and answers on `ack` once it is gone. EOF: does nothing.
void kill_registry_on_trigger(caf::actor_system& sys, const caf::actor& root,
                              int trigger, int ack) {
  std::thread{[&sys, root, trigger, ack] {
    char c = 0;
    if (read(trigger, &c, 1) != 1)
      return;
    auto registry = registry_of(sys, root);
    // A live chat actor, which the registry's own shutdown never reaches
    // after a kill: the process must exit all the same.
    caf::scoped_actor self{sys};
    self
      ->request(caf::actor_cast<core_actor>(registry), 10s, atom::apply_v,
                operation_on(operation_type::status, chat_id{1}))
      .receive([](const outcome&) {}, [](const caf::error&) {});
    kill_and_wait(sys, registry);
    if (write(ack, "k", 1) != 1)
      std::_Exit(99);
  }}.detach();
}

/// The child: a whole chargeonce-server on the test database; never returns.
[[noreturn]] void run_child(const std::string& dsn,
                            const std::string& port_file, int trigger,
                            int ack) {
  std::vector<std::string> args{
    "chargeonce-server", "--postgres=" + dsn,   "--port=0",
    "--http-port=0",     "--sweep-interval=1h", "--port-file=" + port_file};
  std::vector<char*> argv;
  for (auto& x : args)
    argv.push_back(x.data());
  argv.push_back(nullptr);
  server_hooks hooks;
  hooks.serving = [trigger, ack](caf::actor_system& sys,
                                 const caf::actor& root) {
    kill_registry_on_trigger(sys, root, trigger, ack);
  };
  auto rc = run_server(static_cast<int>(args.size()), argv.data(), hooks);
  std::_Exit(rc); // no static destructors of the test runner in the child
}

/// What the parent saw of a child server.
struct child_end {
  bool exited = false;
  int status = 0;
  clock_type::duration after_kill{};
  int ready_after_kill = 0;   ///< /readyz answers 200 after the kill
  int refused_after_kill = 0; ///< 503 answers (the actors' reason)
};

/// Scrapes /readyz without pause until the child exits (given up after
/// `limit`, a liveness bound).
child_end scrape_until_exit(pid_t pid, uint16_t port, clock_type::time_point t0,
                            clock_type::duration limit) {
  child_end out;
  while (clock_type::now() - t0 < limit) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      out.exited = true;
      out.status = status;
      out.after_kill = clock_type::now() - t0;
      return out;
    }
    if (auto r = readyz(port)) {
      if (r->status == 200)
        ++out.ready_after_kill;
      else if (r->body.find("actors: ") != std::string::npos)
        ++out.refused_after_kill;
    } else {
      std::this_thread::sleep_for(1ms); // closed: the child is on its way
    }
  }
  return out;
}

} // namespace

TEST_SUITE("server core down") {

  TEST_CASE("/readyz answers 503 at once when the registry dies, never the "
            "cached 200 of a moment before") {
    test::threaded_server srv{test::store_options()};
    http::http_options opts;
    opts.port = 0;
    auto web =
      http::server::start(srv.sys, opts, srv.core, test::dsn(), srv.root);
    REQUIRE(web);
    REQUIRE(*web != nullptr);
    auto port = (*web)->port();
    auto live = readyz(port);
    auto t_live = clock_type::now();
    REQUIRE(live);
    CHECK(live->status == 200);
    kill_and_wait(srv.sys, caf::actor_cast<caf::actor>(srv.core));
    auto t0 = clock_type::now();
    // Within the Postgres check's 1 s cache, where a cached verdict would
    // still say 200 (the time since the 200 is printed below).
    auto dead = readyz(port);
    auto t1 = clock_type::now();
    REQUIRE(dead);
    CHECK(dead->status == 503);
    // The ping bounced off the dead registry: asked on this probe, not
    // cached, and not a wait for the 1 s timeout ("did not answer within").
    CHECK(dead->body.find("actors: registry down") != std::string::npos);
    MESSAGE("after the kill: "
            << dead->status << " " << dead->body << " in "
            << duration_cast<milliseconds>(t1 - t0).count() << " ms, "
            << duration_cast<milliseconds>(t0 - t_live).count()
            << " ms after the 200");
    web->reset();
  }

  TEST_CASE("a server whose registry dies exits with exit_core_down, and its "
            "/readyz never answers 200 meanwhile") {
    char dir_template[] = "core_down.XXXXXX";
    REQUIRE(mkdtemp(dir_template) != nullptr);
    auto port_file = std::string{dir_template} + "/server.port";
    int trigger[2];
    int ack[2];
    REQUIRE(pipe(trigger) == 0);
    REQUIRE(pipe(ack) == 0);
    const auto& dsn = test::dsn(); // migrated here, not in the child
    // Safe only while this process has no other thread: the first test
    // case's actor system joined its threads when it was destroyed.
    auto pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(trigger[1]);
      close(ack[0]);
      run_child(dsn, port_file, trigger[0], ack[1]);
    }
    close(trigger[0]);
    close(ack[1]);
    auto stop_child = [&] { // on any failure below: no orphan server
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    };
    // Starting and becoming ready take a fraction of a second; a minute each
    // means the child hangs (or exited: then waiting is over at once).
    uint16_t port = 0;
    bool child_gone = false;
    auto started = test::wait_until(
      [&] {
        child_gone = waitpid(pid, nullptr, WNOHANG) != 0;
        port = http_port_of(port_file);
        return port != 0 || child_gone;
      },
      60s, 20ms);
    if (port == 0)
      stop_child();
    REQUIRE(port != 0);
    auto ready = test::wait_until(
      [&] {
        auto r = readyz(port);
        return r && r->status == 200;
      },
      60s, 50ms);
    MESSAGE("port file after " << started.ms() << " ms, ready " << ready.ms()
                               << " ms later");
    if (!ready)
      stop_child();
    REQUIRE(ready); // a live core is ready: the ping is answered
    auto t_trigger = clock_type::now();
    REQUIRE(write(trigger[1], "k", 1) == 1);
    bool killed = read_byte(ack[0], 60s);
    auto t0 = clock_type::now();
    if (!killed)
      stop_child();
    REQUIRE(killed);
    // It exits within milliseconds; a minute means it never will.
    auto end = scrape_until_exit(pid, port, t0, 60s);
    if (!end.exited)
      stop_child();
    MESSAGE(
      "registry killed after "
      << duration_cast<milliseconds>(t0 - t_trigger).count() << " ms; exited "
      << duration_cast<milliseconds>(end.after_kill).count()
      << " ms after the kill; /readyz after the kill: " << end.ready_after_kill
      << " x 200, " << end.refused_after_kill << " x 503 (actors)");
    REQUIRE(end.exited);
    REQUIRE(WIFEXITED(end.status));
    CHECK(WEXITSTATUS(end.status) == exit_core_down);
    CHECK(end.ready_after_kill == 0);
    close(trigger[1]);
    close(ack[0]);
    std::remove(port_file.c_str());
    rmdir(dir_template);
  }

} // TEST_SUITE
