// SPDX-License-Identifier: Apache-2.0
// Destroying the client while asynchronous calls are pending, against a real
// server over TCP and a real Postgres: every call is answered exactly once
// (request_receiver_down, or the real answer when it raced in first), on a
// client thread, and without waiting for its request timeout.
#include "client/client.hpp"
#include "tests/client/async_gate.hpp"
#include "tests/client/async_test.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

using namespace chargeonce;
using namespace chargeonce::test;
using namespace std::chrono_literals;

namespace {

/// Issues `n` gateway calls on `chats` (status, reserve, touch, cancel in
/// turn), each answer counted in `tally` and `done`.
void issue_gateway_calls(client::client& c, const std::vector<chat_id>& chats,
                         int n, tracker& t, answer_tally& tally,
                         countdown& done) {
  for (int i = 0; i < n; ++i) {
    auto chat = chats[i % chats.size()];
    auto slot = t.take();
    auto record = [&tally, &done](auto& x) {
      tally.add(x);
      done.arrive();
    };
    issue([&] {
      switch (i % 4) {
      case 0:
        c.status(chat, t.watch<chat_status>(slot, record));
        break;
      case 1:
        c.reserve(chat, kind::image, "r" + std::to_string(i),
                  t.watch<reservation>(slot, record));
        break;
      case 2:
        c.touch(chat, t.watch<chat_status>(slot, record));
        break;
      default:
        c.cancel(chat, t.watch<reservation>(slot, record));
      }
    });
  }
}

/// When the gate lets the server's held answers go, against destroying the
/// client.
enum class release { after_answers, after_destroy, racing_destroy };

/// `calls` gateway calls through a client of their own while the gate holds
/// the answers (at least one call reaches it), then the client is
/// destroyed; every call is answered within 30 s.
void destroy_pending(gate_fixture& f, const std::vector<chat_id>& chats,
                     int calls, bool batching, release when, tracker& t,
                     answer_tally& tally) {
  f.close_gate();
  countdown done{calls};
  client_side side;
  auto c = std::make_unique<client::client>(
    side.sys, options_for(f.gate_port, client::role::gateway, batching));
  auto before = f.log->received();
  issue_gateway_calls(*c, chats, calls, t, tally, done);
  REQUIRE(f.log->wait_for(before + 1, 30s));
  switch (when) {
  case release::after_answers:
    c.reset();
    CHECK(done.wait(30s));
    f.open_gate();
    return;
  case release::after_destroy:
    c.reset();
    f.open_gate();
    break;
  case release::racing_destroy: {
    std::atomic<bool> go{false};
    std::thread opener{[&] {
      while (!go)
        std::this_thread::yield();
      f.open_gate();
    }};
    go = true;
    c.reset();
    opener.join();
  }
  }
  CHECK(done.wait(30s));
}

} // namespace

TEST_SUITE("client.async.shutdown") {

  TEST_CASE_FIXTURE(gate_fixture,
                    "destroying the client answers every pending call "
                    "exactly once: request_receiver_down, or the real answer "
                    "when it raced in first") {
    std::vector<chat_id> chats;
    for (int i = 0; i < 8; ++i)
      chats.push_back(make_chat({0, 2, 0}));
    constexpr int calls = 40;
    // (Which thread answers is the subject of the next test case.)
    // The server holds every answer: all pending calls, batched (in flight
    // or queued behind the in-flight limit) or still connecting, end with
    // request_receiver_down.
    for (int round = 0; round < 5; ++round) {
      CAPTURE(round);
      tracker t{calls};
      answer_tally tally;
      destroy_pending(*this, chats, calls, true, release::after_answers, t,
                      tally);
      INFO("unexpected answers: " << tally.odd.text());
      CHECK(tally.receiver_down.load() == calls);
      CHECK(tally.real.load() == 0);
      CHECK(tally.other.load() == 0);
      check_exactly_once(t, calls, false);
    }
    // Batching off: a call already sent is answered when the server answers
    // (the gate opens after the client is gone), the others get
    // request_receiver_down.
    for (int round = 0; round < 3; ++round) {
      CAPTURE(round);
      tracker t{calls};
      answer_tally tally;
      destroy_pending(*this, chats, calls, false, release::after_destroy, t,
                      tally);
      INFO("unexpected answers: " << tally.odd.text());
      CHECK(tally.real.load() + tally.receiver_down.load() == calls);
      CHECK(tally.other.load() == 0);
      check_exactly_once(t, calls, false);
    }
    // The race: the server's answers arrive while the client is destroyed.
    for (bool batching : {true, false}) {
      for (int round = 0; round < 20; ++round) {
        CAPTURE(batching);
        CAPTURE(round);
        tracker t{calls};
        answer_tally tally;
        destroy_pending(*this, chats, calls, batching, release::racing_destroy,
                        t, tally);
        INFO("unexpected answers: " << tally.odd.text());
        CHECK(tally.real.load() + tally.receiver_down.load() == calls);
        CHECK(tally.other.load() == 0);
        check_exactly_once(t, calls, false);
      }
    }
    // Still connecting: the server never finishes CAF's handshake; the
    // connects time out after the client is gone. The 1 s connect timeout
    // is what the calls wait for here; the client is gone long before it
    // (eight calls and a destructor: well under a millisecond).
    {
      mute_listener mute;
      tracker t{8};
      countdown done{8};
      answer_tally tally;
      {
        client_side side;
        auto c = std::make_unique<client::client>(
          side.sys, options_for(mute.port, client::role::gateway, true, 1s));
        auto t0 = std::chrono::steady_clock::now();
        issue_gateway_calls(*c, chats, 8, t, tally, done);
        c.reset();
        auto gone = std::chrono::steady_clock::now() - t0;
        MESSAGE("client gone "
                << std::chrono::duration<double, std::milli>(gone).count()
                << " ms after the first call");
        CHECK(done.wait(30s));
      }
      INFO("unexpected answers: " << tally.odd.text());
      CHECK(tally.receiver_down.load() == 8);
      CHECK(tally.other.load() == 0);
      check_exactly_once(t, 8, false);
    }
  }

  TEST_CASE_FIXTURE(gate_fixture,
                    "a call still queued for its batch when the client is "
                    "destroyed is answered on a client thread, never by the "
                    "thread destroying the client") {
    auto chat = make_chat({0, 2, 0});
    // One client system for all rounds: where continuations ran is known
    // when each round's calls have all been answered.
    constexpr int rounds = 200;
    tracker t{rounds * 10};
    std::atomic<int> wrong{0};
    int rounds_with_caller = 0;
    {
      client_side side;
      for (int round = 0; round < rounds; ++round) {
        close_gate();
        countdown done{10};
        auto c = std::make_unique<client::client>(
          side.sys, options_for(gate_port, client::role::gateway, true));
        auto call = [&] {
          auto slot = t.take();
          issue([&] {
            c->status(chat, t.watch<chat_status>(slot, [&](auto& x) {
              if (x || x.error() != caf::sec::request_receiver_down)
                ++wrong;
              done.arrive();
            }));
          });
        };
        // Four batches in flight, held by the server (the client allows
        // four per server: client/connections.cpp's batcher_options) ...
        for (int i = 0; i < 4; ++i) {
          auto before = log->received();
          call();
          REQUIRE(log->wait_for(before + 1, 30s));
        }
        // ... so these wait in the client's queue.
        for (int i = 0; i < 6; ++i)
          call();
        auto before = t.on_caller.load();
        c.reset();
        REQUIRE(done.wait(30s));
        open_gate();
        rounds_with_caller += t.on_caller > before ? 1 : 0;
      }
    }
    MESSAGE("rounds in which ~client ran continuations on its own thread: "
            << rounds_with_caller << " of " << rounds);
    CHECK(wrong.load() == 0);
    check_exactly_once(t, rounds * 10);
  }

  TEST_CASE_FIXTURE(gate_fixture,
                    "batching off: a call pending on a silent server when the "
                    "client is destroyed gets request_receiver_down (not its "
                    "request timeout)") {
    auto chat = make_chat({0, 2, 0});
    close_gate(); // silent from now on
    tracker t{8};
    countdown done{8};
    answer_tally tally;
    {
      client_side side;
      // The default 20 s request timeout: a request left to it would end
      // as request_timeout, which the tally counts as a failure.
      auto c = std::make_unique<client::client>(
        side.sys, options_for(gate_port, client::role::gateway, false));
      auto before = log->received();
      issue_gateway_calls(*c, {chat}, 8, t, tally, done);
      // Every call reached the server: each is its own pending request.
      REQUIRE(log->wait_for(before + 8, 30s));
      c.reset();
      CHECK(done.wait(30s));
      open_gate();
    }
    INFO("unexpected answers: " << tally.odd.text());
    CHECK(tally.receiver_down.load() == 8);
    CHECK(tally.other.load() == 0);
    check_exactly_once(t, 8);
  }

} // TEST_SUITE
