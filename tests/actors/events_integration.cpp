// SPDX-License-Identifier: Apache-2.0
// The event bus through the real actors over a real Postgres: a gateway
// that was away resumes after its last event id and gets each event once;
// a subscriber that stops answering is cut off while billing goes on.
#include "protocol/errors.hpp"
#include "tests/support/test_db.hpp"
#include "tests/support/threaded_server.hpp"
#include "tests/support/wait.hpp"

#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

using namespace chargeonce;
using namespace std::chrono_literals;

namespace {

/// What a gateway received, from any thread.
struct received {
  std::mutex mtx;
  std::vector<reservation_released> releases; ///< of the watched chats
  std::vector<subscription_ended> endings;
  chat_id first = 0;
  int64_t count = 0;

  size_t size() {
    std::lock_guard<std::mutex> guard{mtx};
    return releases.size();
  }
};

/// A gateway keeping every release of chats [first, first + count).
caf::behavior gateway(caf::event_based_actor*, std::shared_ptr<received> log) {
  return {
    [log](const reservation_released& x) {
      std::lock_guard<std::mutex> guard{log->mtx};
      if (x.chat >= log->first && x.chat < log->first + log->count)
        log->releases.push_back(x);
    },
    [log](const subscription_ended& x) {
      std::lock_guard<std::mutex> guard{log->mtx};
      log->endings.push_back(x);
    },
    [](const limits_refilled&) {},
    [](const cancel_requested&) {},
    [](const reconcile_needed&) {},
    [](const queue_notice&) {},
  };
}

/// Takes releases and never answers them: a gateway stuck in its handler.
caf::behavior stuck_gateway(caf::event_based_actor* self,
                            std::shared_ptr<received> log) {
  return {
    [self, log](const reservation_released& x) {
      std::lock_guard<std::mutex> guard{log->mtx};
      if (x.chat >= log->first && x.chat < log->first + log->count)
        log->releases.push_back(x);
      return self->make_response_promise(); // never delivered
    },
    [log](const subscription_ended& x) {
      std::lock_guard<std::mutex> guard{log->mtx};
      log->endings.push_back(x);
    },
  };
}

/// What a gateway that knows the grant and balance events received of one
/// chat.
struct balance_log {
  std::mutex mtx;
  chat_id chat = 0;
  std::vector<credits_expiring> expiring;
  std::vector<credits_expired> expired;
  std::vector<balance_low> low;

  size_t size() {
    std::lock_guard<std::mutex> guard{mtx};
    return expiring.size() + expired.size() + low.size();
  }
};

caf::behavior balance_gateway(caf::event_based_actor*,
                              std::shared_ptr<balance_log> log) {
  auto keep = [log](auto& into, const auto& x) {
    std::lock_guard<std::mutex> guard{log->mtx};
    if (x.chat == log->chat)
      into.push_back(x);
  };
  return {
    [log, keep](const credits_expiring& x) { keep(log->expiring, x); },
    [log, keep](const credits_expired& x) { keep(log->expired, x); },
    [log, keep](const balance_low& x) { keep(log->low, x); },
    [](const reservation_released&) {},
    [](const limits_refilled&) {},
    [](const cancel_requested&) {},
    [](const reconcile_needed&) {},
    [](const queue_notice&) {},
  };
}

/// What arrives within milliseconds to a few seconds (a subscriber
/// timeout); a minute means it never will.
constexpr auto arrival_max = 60s;

supervisor_options quiet_supervisor() {
  supervisor_options sup;
  sup.sweep_interval = 1h; // sweeps only when the test asks
  return sup;
}

} // namespace

TEST_SUITE("actors.events") {

  TEST_CASE("a gateway stopped while 1,000 releases happen, restarted with "
            "its last event id, receives each release exactly once, in "
            "id order") {
    constexpr int64_t n = 1'000;
    auto base = test::fresh_chat_block(n + 10);
    test::threaded_server server{test::store_options(), quiet_supervisor()};
    // Before it stops, the gateway sees ten releases and keeps the last id.
    auto before = std::make_shared<received>();
    before->first = base;
    before->count = n + 10;
    auto first = server.sys.spawn(gateway, before);
    REQUIRE(server.ask<bool>(atom::subscribe_v, first));
    test::insert_stuck_reservations(base, 10, "1 hour");
    REQUIRE(server.ask_actor<uint64_t>(server.root, atom::sweep_v));
    auto first_ten =
      test::wait_until([&] { return before->size() == 10; }, arrival_max);
    MESSAGE("10 releases arrived after " << first_ten.ms() << " ms");
    REQUIRE(first_ten);
    auto last_seen = before->releases.back().id;
    CHECK(last_seen > 0);
    caf::anon_send_exit(first, caf::exit_reason::kill);
    // Down: 1,000 jobs are released meanwhile.
    test::insert_stuck_reservations(base + 10, n, "1 hour");
    auto released = server.ask_actor<uint64_t>(server.root, atom::sweep_v);
    REQUIRE(released);
    CHECK(*released >= static_cast<uint64_t>(n));
    // Back, after its last id.
    auto after = std::make_shared<received>();
    after->first = base;
    after->count = n + 10;
    auto second = server.sys.spawn(gateway, after);
    REQUIRE(server.ask<bool>(atom::subscribe_v, second, last_seen));
    auto resumed = test::wait_until(
      [&] { return after->size() >= static_cast<size_t>(n); }, arrival_max);
    MESSAGE(n << " releases arrived after " << resumed.ms() << " ms");
    CHECK(resumed);
    // A duplicate would come by now; on a slow machine one may come later
    // and go unseen, never fail a correct bus.
    std::this_thread::sleep_for(500ms);
    std::lock_guard<std::mutex> guard{after->mtx};
    CHECK(after->releases.size() == static_cast<size_t>(n));
    std::map<chat_id, int> per_chat;
    event_id previous = last_seen;
    for (const auto& x : after->releases) {
      ++per_chat[x.chat];
      CHECK(x.id > previous); // in id order, none from before the stop
      previous = x.id;
      CHECK(x.reason == "sweep_timeout");
    }
    CHECK(per_chat.size() == static_cast<size_t>(n));
    CHECK(per_chat.begin()->first == base + 10);
    CHECK(per_chat.rbegin()->first == base + 10 + n - 1);
    caf::anon_send_exit(second, caf::exit_reason::user_shutdown);
  }

  TEST_CASE("a subscriber that leaves events unanswered is cut off with "
            "subscription_ended and its last id, having been sent no more "
            "than its window while the sweep went on; a new subscription "
            "after that id gets the rest") {
    constexpr int64_t n = 50;
    auto base = test::fresh_chat_block(n);
    auto sup = quiet_supervisor();
    sup.events.subscriber_timeout = 1s;
    sup.events.in_flight_max = 10;
    test::threaded_server server{test::store_options(), sup};
    auto log = std::make_shared<received>();
    log->first = base;
    log->count = n;
    auto stuck = server.sys.spawn(stuck_gateway, log);
    REQUIRE(server.ask<bool>(atom::subscribe_v, stuck));
    test::insert_stuck_reservations(base, n, "1 hour");
    auto t0 = std::chrono::steady_clock::now();
    auto released = server.ask_actor<uint64_t>(server.root, atom::sweep_v);
    auto sweep_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
    REQUIRE(released);
    CHECK(*released >= static_cast<uint64_t>(n));
    MESSAGE("swept " << *released << " with a stuck subscriber in " << sweep_ms
                     << " ms");
    auto cut_off = test::wait_until(
      [&] {
        std::lock_guard<std::mutex> guard{log->mtx};
        return !log->endings.empty();
      },
      arrival_max);
    MESSAGE("cut off " << cut_off.ms() << " ms after the sweep");
    REQUIRE(cut_off);
    subscription_ended ended;
    {
      std::lock_guard<std::mutex> guard{log->mtx};
      ended = log->endings.front();
    }
    CHECK(ended.reason == "too_slow");
    // It was sent ten (in_flight_max), the last of them is its last id;
    // other tests' events may be among them.
    auto seen = log->size();
    CHECK(seen <= 10);
    auto rest = std::make_shared<received>();
    rest->first = base;
    rest->count = n;
    auto fresh = server.sys.spawn(gateway, rest);
    REQUIRE(server.ask<bool>(atom::subscribe_v, fresh, ended.last_id));
    auto rest_arrived =
      test::wait_until([&] { return rest->size() == n - seen; }, arrival_max);
    MESSAGE("the rest arrived after " << rest_arrived.ms() << " ms");
    CHECK(rest_arrived);
    caf::anon_send_exit(fresh, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(stuck, caf::exit_reason::user_shutdown);
  }

  TEST_CASE("credits_expiring, balance_low and credits_expired reach a "
            "subscriber with their fields, each once; a subscriber written "
            "before them skips them and gets the next event") {
    auto opts = test::store_options();
    opts.balance_low_threshold = 10; // the server's; the chat has none
    test::threaded_server server{opts, quiet_supervisor()};
    auto base = test::fresh_chat_block(2);
    auto chat = base;
    auto log = std::make_shared<balance_log>();
    log->chat = chat;
    auto knows = server.sys.spawn(balance_gateway, log);
    REQUIRE(server.ask<bool>(atom::subscribe_v, knows));
    // The gateway of before: it knows none of the three.
    auto old = std::make_shared<received>();
    old->first = base + 1;
    old->count = 1;
    auto older = server.sys.spawn(gateway, old);
    REQUIRE(server.ask<bool>(atom::subscribe_v, older));
    REQUIRE(server.ask<chat_status>(atom::create_v,
                                    chat_spec{chat, {}, caf::none, caf::none}));
    // Expires in an hour, inside expiry-notice (24 h): told by its top-up.
    grant_terms soon;
    soon.expires_in_ms = 3'600'000;
    auto grant = server.ask<top_up_receipt>(atom::top_up_v, chat, int64_t{10},
                                            "ev-" + std::to_string(chat), soon);
    REQUIRE(grant);
    // An image job with no daily images left holds 1 of the balance: 10
    // available falls to 9, below the server's 10.
    auto r = server.ask<reservation>(atom::reserve_v, chat, kind::image,
                                     std::string{});
    REQUIRE(r);
    CHECK(r->held.get(pocket::balance) == 1);
    // The grant's time comes; the scan after the sweep expires it.
    test::sql("UPDATE grants SET expires_at = now() - interval '1 second' "
              "WHERE grant_id = "
              + std::to_string(grant->grant_id));
    test::sql("UPDATE chats SET next_expiry = now() - interval '1 second' "
              "WHERE chat_id = "
              + std::to_string(chat));
    REQUIRE(server.sweep());
    auto arrived =
      test::wait_until([&] { return log->size() >= 3; }, arrival_max);
    MESSAGE("the three events arrived after " << arrived.ms() << " ms");
    REQUIRE(arrived);
    // The sweep of the old gateway's chat: a release after the three.
    test::insert_stuck_reservations(base + 1, 1, "1 hour");
    REQUIRE(server.sweep());
    auto released =
      test::wait_until([&] { return old->size() == 1; }, arrival_max);
    MESSAGE("the old gateway's release arrived after " << released.ms()
                                                       << " ms");
    CHECK(released);
    // A second scan changes nothing: once each. (A duplicate would come by
    // now; on a slow machine one may come later and go unseen, never fail
    // a correct bus.)
    REQUIRE(server.sweep());
    std::this_thread::sleep_for(500ms);
    std::lock_guard<std::mutex> guard{log->mtx};
    REQUIRE(log->expiring.size() == 1);
    REQUIRE(log->low.size() == 1);
    REQUIRE(log->expired.size() == 1);
    const auto& expiring = log->expiring.front();
    CHECK(expiring.grant == grant->grant_id);
    CHECK(expiring.credits == 10);
    REQUIRE(grant->expires_at);
    CHECK(expiring.expires_at == *grant->expires_at);
    const auto& low = log->low.front();
    CHECK(low.available == 9);
    CHECK(low.threshold == 10);
    CHECK(low.cause == "reserve");
    CHECK(low.reservation == r->id);
    const auto& expired = log->expired.front();
    CHECK(expired.grant == grant->grant_id);
    CHECK(expired.credits == 9); // the job's credit is still held
    CHECK(expiring.id < low.id);
    CHECK(low.id < expired.id);
    std::lock_guard<std::mutex> old_guard{old->mtx};
    REQUIRE(old->releases.size() == 1);
    CHECK(old->releases.front().id > expired.id);
    caf::anon_send_exit(knows, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(older, caf::exit_reason::user_shutdown);
  }

  TEST_CASE("resuming after an id beyond the newest event is refused as "
            "invalid_argument, naming both") {
    test::threaded_server server{test::store_options(), quiet_supervisor()};
    auto log = std::make_shared<received>();
    auto who = server.sys.spawn(gateway, log);
    auto refused =
      server.ask<bool>(atom::subscribe_v, who, event_id{1'000'000'000'000});
    REQUIRE_FALSE(refused);
    CHECK(refused.error() == ec::invalid_argument);
    CHECK(error_message(refused.error()).find("beyond the newest event")
          != std::string::npos);
    auto negative = server.ask<bool>(atom::subscribe_v, who, event_id{-1});
    REQUIRE_FALSE(negative);
    CHECK(negative.error() == ec::invalid_argument);
    caf::anon_send_exit(who, caf::exit_reason::user_shutdown);
  }

} // TEST_SUITE
