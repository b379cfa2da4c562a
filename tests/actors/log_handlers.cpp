// SPDX-License-Identifier: Apache-2.0
// What a peer's unexpected messages cost the log: one short excerpt per
// message, at most log_limiter::limits{}.lines_per_window_max lines per peer
// and window plus one line counting the rest, and a limiter whose memory
// stays bounded however many peers there are.
#include "actors/log_handlers.hpp"

#include "actors/log_limiter.hpp"
#include "tests/support/wait.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <doctest/doctest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace chargeonce;
using namespace std::chrono_literals;

namespace {

/// Every spdlog line written while it lives, in the server's pattern.
class captured_log {
public:
  captured_log() {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto logger = std::make_shared<spdlog::logger>("captured", sink);
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z [%l] %v");
    spdlog::set_default_logger(logger);
  }

  captured_log(const captured_log&) = delete;
  captured_log& operator=(const captured_log&) = delete;

  ~captured_log() { spdlog::set_default_logger(previous_); }

  std::vector<std::string> lines() {
    spdlog::default_logger()->flush();
    std::vector<std::string> out;
    std::istringstream in{out_.str()};
    for (std::string line; std::getline(in, line);)
      out.push_back(line);
    return out;
  }

private:
  std::shared_ptr<spdlog::logger> previous_ = spdlog::default_logger();
  std::ostringstream out_;
};

size_t count_containing(const std::vector<std::string>& lines,
                        const std::string& part) {
  return static_cast<size_t>(
    std::count_if(lines.begin(), lines.end(), [&](const std::string& line) {
      return line.find(part) != std::string::npos;
    }));
}

struct config : caf::actor_system_config {
  config() {
    load<caf::io::middleman>(); // a real node id, as a peer's would be
    set("scheduler.max-threads", 2);
  }
};

/// An actor with the handlers, which knows only `get`.
caf::behavior target(caf::event_based_actor* self) {
  install_log_handlers(self);
  return {[](caf::get_atom) {
    return 0;
  }};
}

/// An actor system, the target and a client; the destructor stops the
/// target and waits for it, so its exit line is written.
struct fixture {
  config cfg;
  caf::actor_system sys{cfg};
  captured_log log;
  caf::scoped_actor client{sys};
  caf::actor dst = sys.spawn(target);

  /// Returns once `dst` handled every message `client` sent before.
  void sync() {
    client->request(dst, 30s, caf::get_atom_v)
      .receive([](int) {}, [](caf::error& err) { FAIL(caf::to_string(err)); });
  }

  /// Stops `dst`, waits until it is gone; its log lines afterwards.
  std::vector<std::string> stop() {
    client->send_exit(dst, caf::exit_reason::user_shutdown);
    client->wait_for(dst);
    return log.lines();
  }

  /// The log lines once one contains `part`: the exit functor that writes
  /// the summary runs after the one wait_for attached (microseconds later;
  /// 30 s means never).
  std::vector<std::string> lines_once(const std::string& part) {
    auto w = test::wait_until(
      [&] { return count_containing(log.lines(), part) > 0; }, 30s, 1ms);
    MESSAGE("'" << part << "' logged after " << w.ms() << " ms");
    return log.lines();
  }

  ~fixture() {
    client->send_exit(dst, caf::exit_reason::user_shutdown);
    client->wait_for(dst);
  }
};

using clock_type = log_limiter::clock;

} // namespace

TEST_SUITE("actors.log_handlers") {

  TEST_CASE_FIXTURE(fixture, "an unexpected 1 MB message is logged as one "
                             "short line that gives its size") {
    std::string huge(1 << 20, 'x');
    client->send(dst, huge);
    sync();
    auto lines = stop();
    REQUIRE(count_containing(lines, "unexpected message ") == 1);
    auto line = lines[0];
    MESSAGE("line of ", line.size(), " bytes: ", line);
    // Timestamp, level, actor, peer node and a 160-byte excerpt.
    CHECK(line.size() <= 350);
    CHECK(line.find("xxxx") != std::string::npos);
    CHECK(line.find("bytes)") != std::string::npos);
  }

  TEST_CASE_FIXTURE(fixture, "a thousand unexpected messages from one peer "
                             "write at most the limit and one line counting "
                             "the rest") {
    auto limit = log_limiter::limits{}.lines_per_window_max;
    for (int i = 0; i < 1000; ++i)
      client->send(dst, std::string(1000, 'y'));
    sync();
    stop();
    auto lines = lines_once("suppressed=");
    CHECK(count_containing(lines, "unexpected message ") == limit);
    CHECK(count_containing(lines, "suppressed=" + std::to_string(1000 - limit))
          == 1);
    CHECK(lines.size() == limit + 1);
  }

  TEST_CASE("each peer has its own lines; the first message after a window "
            "reports how many of that peer's were not logged") {
    log_limiter limiter{{3, 1min, 64}};
    auto t0 = clock_type::now();
    int logged_a = 0;
    int logged_b = 0;
    for (int i = 0; i < 10; ++i) {
      auto a = limiter.admit("a", t0 + 1s);
      auto b = limiter.admit("b", t0 + 1s);
      logged_a += a.log ? 1 : 0;
      logged_b += b.log ? 1 : 0;
      CHECK(a.suppressed == 0);
    }
    CHECK(logged_a == 3);
    CHECK(logged_b == 3);
    auto later = limiter.admit("a", t0 + 1s + 1min);
    CHECK(later.log);
    CHECK(later.suppressed == 7);
    auto owed = limiter.take_suppressed();
    REQUIRE(owed.size() == 1);
    CHECK(owed[0].first == "b");
    CHECK(owed[0].second == 7);
    CHECK(limiter.take_suppressed().empty());
  }

  TEST_CASE("a hostile crowd of peers cannot grow the limiter: beyond "
            "peers_max they share one entry and its lines") {
    log_limiter limiter{{2, 1min, 8}};
    auto t0 = clock_type::now();
    int logged = 0;
    for (int i = 0; i < 100000; ++i)
      logged += limiter.admit("peer-" + std::to_string(i), t0).log ? 1 : 0;
    CHECK(limiter.peers() == 9);
    CHECK(logged == 8 + 2); // one each, then other-peers' two
    // Once their windows are over, quiet peers make room for new ones.
    log_limiter quiet{{2, 1min, 8}};
    for (int i = 0; i < 8; ++i)
      quiet.admit("old-" + std::to_string(i), t0);
    CHECK(quiet.admit("new", t0 + 2min).log);
    CHECK(quiet.peers() == 1);
  }

  TEST_CASE("an excerpt is cut at a character boundary and escapes control "
            "characters, so it cannot forge log lines") {
    CHECK(log_excerpt("short", 10) == "short");
    CHECK(log_excerpt("a\nb\r\x1b", 10) == "a\\x0ab\\x0d\\x1b");
    std::string accents = "\xc3\xa9\xc3\xa9\xc3\xa9"; // three é
    CHECK(log_excerpt(accents, 3) == "\xc3\xa9... (6 bytes)");
    auto cut = log_excerpt(std::string(1 << 20, 'z'), 256);
    CHECK(cut == std::string(256, 'z') + "... (1048576 bytes)");
  }
}
