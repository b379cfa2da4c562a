// SPDX-License-Identifier: Apache-2.0
// Sweeping through the real actors over a real Postgres: many stuck
// reservations, concurrent commits, and subscribers that fail.
#include "actors/metrics/rendering.hpp"
#include "protocol/errors.hpp"
#include "tests/support/test_db.hpp"
#include "tests/support/threaded_server.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

using namespace chargeonce;
using namespace std::chrono_literals;

namespace {

persistence::store_options options() {
  return test::store_options(); // sweep-timeout 3 min, lease 30 s
}

/// A bound, not a goal: far above the growth measured. Under AddressSanitizer
/// freed memory sits in its quarantine, so the bound there is looser.
#if defined(__SANITIZE_ADDRESS__)
constexpr long rss_growth_max_kib = 1024 * 1024;
#else
constexpr long rss_growth_max_kib = 256 * 1024;
#endif

// Liveness bounds: if it has not happened by then, something hangs. Each is
// at least ten times the longest time measured on a quiet 2-core machine
// (the test prints the time it took).

/// For the first of 10,000 stuck reservations to go, and then for each
/// next one while the sweep runs: measured 10-14 s from the server's start
/// to the last (the first tick at 10 s). Their events and the refill events
/// of the reactivation are waited for the same way, as long as they keep
/// arriving: a volume of work a busy machine stretches.
constexpr std::chrono::seconds release_stall_max{120};
/// For a reactivation scan of 1,000,000 chats: measured 20 s.
constexpr std::chrono::seconds reactivation_wait_max{240};
/// For what follows at once: events after their writes, the gauge after a
/// sweep, Postgres's clock past a 1 s timeout (measured 0-50 ms, 50 ms,
/// 1 s).
constexpr std::chrono::seconds trailing_wait_max{60};

/// Peak resident set size of this process so far, in KiB.
long peak_rss_kib() {
  std::ifstream status{"/proc/self/status"};
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0)
      return std::stol(line.substr(6));
  return -1;
}

/// `n` chats from `base` on, stuck for an hour.
void make_stuck(chat_id base, int64_t n) {
  test::insert_stuck_reservations(base, n, "1 hour");
}

long long remaining(chat_id base, int64_t n) {
  return test::sql_int("SELECT count(*) FROM reservations WHERE chat_id "
                       "BETWEEN "
                       + std::to_string(base) + " AND "
                       + std::to_string(base + n - 1));
}

/// Counts reservation_released events of a chat range.
caf::behavior release_counter(caf::event_based_actor*,
                              std::shared_ptr<std::atomic<int64_t>> count,
                              chat_id base, int64_t n) {
  return {
    [=](const reservation_released& x) {
      if (x.chat >= base && x.chat < base + n)
        ++*count;
    },
    [](const queue_notice&) {},
    [](const limits_refilled&) {},
  };
}

/// Counts limits_refilled events of a chat range.
caf::behavior refill_counter(caf::event_based_actor*,
                             std::shared_ptr<std::atomic<int64_t>> count,
                             chat_id base, int64_t n) {
  return {
    [=](const limits_refilled& x) {
      if (x.chat >= base && x.chat < base + n)
        ++*count;
    },
    [](const queue_notice&) {},
    [](const reservation_released&) {},
  };
}

/// A gateway whose handler fails on every release and every refill.
caf::behavior failing_subscriber() {
  return {
    [](const reservation_released&) {
      throw std::runtime_error("gateway is broken");
    },
    [](const queue_notice&) {},
    [](const limits_refilled&) {
      throw std::runtime_error("gateway is broken");
    },
  };
}

/// What a gateway of the lifecycle events receives, for one reservation.
struct lifecycle_log {
  std::mutex mtx;
  std::vector<std::string> events;
};

caf::behavior lifecycle_recorder(caf::event_based_actor*,
                                 std::shared_ptr<lifecycle_log> log,
                                 reservation_id id) {
  auto note = [log](std::string what) {
    std::lock_guard<std::mutex> guard{log->mtx};
    log->events.push_back(std::move(what));
  };
  return {
    [=](const reconcile_needed& x) {
      if (x.reservation == id)
        note("reconcile_needed " + x.provider_ref);
    },
    [=](const reservation_released& x) {
      if (x.reservation == id)
        note("reservation_released " + x.reason);
    },
    [](const queue_notice&) {},
    [](const cancel_requested&) {},
    [](const limits_refilled&) {},
  };
}

/// The counter's value in the metrics text, 0 when absent.
double counter(const std::string& series) {
  auto text = metrics::render();
  auto at = text.find("\n" + series + " ");
  if (at == std::string::npos)
    return 0;
  return std::stod(text.substr(at + series.size() + 2));
}

} // namespace

TEST_SUITE("actors.sweep") {

  TEST_CASE("a job of unknown outcome through the real actors: "
            "reconcile_needed, its slot free at once, and released "
            "unresolved by the sweep past reconcile-timeout, counted") {
    auto opts = options();
    opts.reconcile_timeout = 1s;
    test::threaded_server server{opts};
    auto chat = test::fresh_chat();
    REQUIRE(server.ask<chat_status>(
      atom::create_v, chat_spec{chat, {0, 0, 2}, caf::none, caf::none}));
    auto r = server.ask<reservation>(atom::reserve_v, chat, kind::image,
                                     std::string{"job-1"});
    REQUIRE(r);
    auto log = std::make_shared<lifecycle_log>();
    auto recorder = server.sys.spawn(lifecycle_recorder, log, r->id);
    REQUIRE(server.ask<bool>(atom::subscribe_v, recorder));
    REQUIRE(server.ask<reservation>(atom::start_v, chat, r->id));
    auto u = server.ask<reservation>(atom::uncertain_v, chat, r->id,
                                     std::string{"prov-1"});
    REQUIRE(u);
    CHECK(u->status == reservation_status::outcome_unknown);
    // A retry answers the same and tells the reconcilers nothing new.
    REQUIRE(server.ask<reservation>(atom::uncertain_v, chat, r->id,
                                    std::string{"prov-1"}));
    // One job at a time, yet the next one starts: the slot is free.
    auto next = server.ask<reservation>(atom::reserve_v, chat, kind::image,
                                        std::string{"job-2"});
    REQUIRE(next);
    REQUIRE(server.ask<reservation>(atom::fail_v, chat, next->id));
    auto page = server.ask<unresolved_page>(
      atom::unresolved_v, reservation_id{r->id - 1}, uint32_t{10});
    REQUIRE(page);
    REQUIRE_FALSE(page->jobs.empty());
    CHECK(page->jobs.front().id == r->id);
    auto before = counter("chargeonce_releases_total{reason=\"unresolved\"}");
    // Due by Postgres's clock, the one the sweep reads (1 s after the
    // uncertain report): waited for rather than slept through.
    auto due = test::wait_until(
      [&] {
        return test::sql_int(
                 "SELECT count(*) FROM uncertain_reservations WHERE id = "
                 + std::to_string(r->id)
                 + " AND uncertain_at < now() - interval '1 second'")
               == 1;
      },
      trailing_wait_max);
    REQUIRE(due.held);
    auto released = server.sweep();
    REQUIRE(released);
    CHECK(*released >= 1);
    CHECK(
      server
        .ask<resolution>(atom::resolve_v, chat, r->id, std::string{"succeeded"})
        .error()
      == ec::expired);
    auto st = server.ask<chat_status>(atom::status_v, chat);
    REQUIRE(st);
    CHECK(st->amounts == pockets{0, 0, 2});
    CHECK(st->held == pockets{});
    auto delivered = test::wait_until( // events trail the writes
      [&] {
        std::lock_guard<std::mutex> guard{log->mtx};
        return log->events.size() >= 2;
      },
      trailing_wait_max);
    MESSAGE("due after " << due.ms() << " ms, events delivered "
                         << delivered.ms() << " ms after the sweep");
    {
      std::lock_guard<std::mutex> guard{log->mtx};
      CHECK(log->events
            == std::vector<std::string>{"reconcile_needed prov-1",
                                        "reservation_released unresolved"});
    }
    // At least this one (the database is shared with other suites' jobs).
    CHECK(counter("chargeonce_releases_total{reason=\"unresolved\"}")
          >= before + 1);
    caf::anon_send_exit(recorder, caf::exit_reason::user_shutdown);
  }

  // How fast the sweep releases is chargeonce-bench --sweep's to measure;
  // this case only waits, with a liveness bound, for all of them to go.
  TEST_CASE("10,000 stuck reservations are all released by the periodic "
            "sweep, each with its event and its released_reservations row, "
            "with bounded memory") {
    constexpr int64_t n = 10'000;
    auto base = test::fresh_chat_block(n);
    make_stuck(base, n);
    REQUIRE(remaining(base, n) == n);
    supervisor_options sup;
    sup.sweep_interval = 10s;
    sup.connections = 4; // releases of different chats in parallel
    auto rss_before = peak_rss_kib();
    test::threaded_server server{options(), sup};
    auto count = std::make_shared<std::atomic<int64_t>>(0);
    auto counter = server.sys.spawn(release_counter, count, base, n);
    REQUIRE(server.ask<bool>(atom::subscribe_v, counter));
    auto left = [&] {
      return remaining(base, n);
    };
    auto released = test::wait_while_progressing([&] { return left() == 0; },
                                                 left, release_stall_max);
    auto delivered = test::wait_while_progressing([&] { return *count >= n; },
                                                  [&] { return count->load(); },
                                                  trailing_wait_max);
    auto rss_after = peak_rss_kib();
    MESSAGE("all " << n << " released " << released.ms()
                   << " ms after the server started (sweep-interval 10 s), "
                      "their events "
                   << delivered.ms() << " ms after that; peak RSS "
                   << rss_before / 1024 << " MiB -> " << rss_after / 1024
                   << " MiB");
    CHECK(remaining(base, n) == 0);
    CHECK(count->load() == n);
    CHECK(test::sql_int("SELECT count(*) FROM released_reservations WHERE "
                        "reason = 'sweep_timeout' AND chat_id BETWEEN "
                        + std::to_string(base) + " AND "
                        + std::to_string(base + n - 1))
          == n);
    CHECK(rss_after - rss_before < rss_growth_max_kib);
    caf::anon_send_exit(counter, caf::exit_reason::user_shutdown);
  }

  TEST_CASE("a failing subscriber keeps no chat locked") {
    test::threaded_server server{options()};
    auto broken = server.sys.spawn(failing_subscriber);
    REQUIRE(server.ask<bool>(atom::subscribe_v, broken));
    auto base = test::fresh_chat_block(3);
    make_stuck(base, 3);
    auto released = server.sweep();
    REQUIRE(released);
    CHECK(*released >= 3);
    CHECK(remaining(base, 3) == 0);
    for (chat_id chat = base; chat < base + 3; ++chat)
      CHECK(server.ask<reservation>(atom::reserve_v, chat, kind::image,
                                    std::string{}));
  }

  TEST_CASE("after a sweep the active-reservations gauge shows what Postgres "
            "holds") {
    test::threaded_server server{options()};
    make_stuck(test::fresh_chat_block(2), 2);
    test::insert_stuck_reservations(test::fresh_chat_block(3), 3, "1 second");
    REQUIRE(server.sweep());
    auto expected = test::sql_int("SELECT count(*) FROM reservations");
    CHECK(expected >= 3); // the young ones stay
    auto gauge = [] {
      auto text = metrics::render();
      auto at = text.find("\nchargeonce_active_reservations ");
      if (at == std::string::npos)
        return -1.0;
      return std::stod(text.substr(text.find(' ', at + 1) + 1));
    };
    // Counted right after the sweep answered.
    auto shown =
      test::wait_until([&] { return gauge() == expected; }, trailing_wait_max);
    MESSAGE("the gauge showed it " << shown.ms() << " ms after the sweep");
    CHECK(gauge() == expected);
  }

  TEST_CASE("the supervisor's scan expires a grant past its expiry once, "
            "with its ledger row and event, and tells a grant about to "
            "expire once") {
    test::threaded_server server{options()}; // expiry-notice 24 h
    auto chat = test::fresh_chat();
    REQUIRE(server.ask<chat_status>(atom::create_v,
                                    chat_spec{chat, {}, caf::none, caf::none}));
    auto pay = "scan-" + std::to_string(chat);
    grant_terms soon;
    soon.expires_in_ms = 2 * 3'600'000; // inside the notice: told
    soon.source = "promo";
    auto due = server.ask<top_up_receipt>(atom::top_up_v, chat, int64_t{4},
                                          pay + "-due", soon);
    auto told = server.ask<top_up_receipt>(atom::top_up_v, chat, int64_t{3},
                                           pay + "-told", soon);
    auto kept = server.ask<top_up_receipt>(atom::top_up_v, chat, int64_t{5},
                                           pay + "-kept");
    REQUIRE(due);
    REQUIRE(told);
    REQUIRE(kept);
    // The first one's time has come, and no writer of the chat comes by.
    auto id = std::to_string(due->grant_id);
    test::sql("UPDATE grants SET expires_at = now() - interval '1 second' "
              "WHERE grant_id = "
              + id);
    auto where = " WHERE chat_id = " + std::to_string(chat);
    auto expired = [&] {
      return test::sql_int("SELECT count(*) FROM grants WHERE expired_at IS "
                           "NOT NULL AND grant_id = "
                           + id)
             == 1;
    };
    // Both grants that expire inside the notice were told by their own
    // top-ups, at once; the scan tells neither again.
    auto notices = [&] {
      return test::sql_int("SELECT count(*) FROM events" + where
                           + " AND event = 'credits_expiring'");
    };
    CHECK(notices() == 2);
    REQUIRE(server.sweep());
    // The scan runs when the sweep is done.
    auto waited =
      test::wait_until([&] { return expired(); }, trailing_wait_max);
    MESSAGE("expired " << waited.ms() << " ms after the sweep");
    // Scanned again: the sweeper's connection answers in order, so the
    // third sweep's answer comes after the second sweep's scan.
    REQUIRE(server.sweep());
    REQUIRE(server.sweep());
    CHECK(expired());
    CHECK(test::sql_int("SELECT count(*) FROM ledger" + where
                        + " AND entry = 'expire'")
          == 1);
    CHECK(test::sql_int("SELECT count(*) FROM events" + where
                        + " AND event = 'credits_expired'")
          == 1);
    CHECK(notices() == 2);
    CHECK(test::sql_int("SELECT count(*) FROM events" + where
                        + " AND event = 'credits_expiring' AND grant_id = "
                        + std::to_string(told->grant_id))
          == 1);
    auto status = server.ask<chat_status>(atom::status_v, chat);
    REQUIRE(status);
    CHECK(status->amounts.get(pocket::balance) == 3 + 5);
  }

  TEST_CASE("a commit racing its sweep is charged exactly once, never both "
            "charged and released") {
    test::threaded_server server{options()};
    auto chat = test::fresh_chat();
    persistence::store setup{options()};
    REQUIRE(setup.create_chat({chat, {0, 0, 100}, caf::none, caf::none}));
    int charged = 0;
    for (int i = 0; i < 100; ++i) {
      auto r = server.ask<reservation>(atom::reserve_v, chat, kind::image,
                                       std::string{});
      REQUIRE(r);
      REQUIRE(server.ask<reservation>(atom::start_v, chat, r->id));
      REQUIRE(server.ask<reservation>(atom::heartbeat_v, chat, r->id));
      test::sql("UPDATE reservations SET lease_expires_at = now() - interval "
                "'1 second' WHERE id = "
                + std::to_string(r->id));
      // Staggered, so that both orders happen: the sweep's scan takes time.
      auto commit = std::async(std::launch::async, [&, i] {
        std::this_thread::sleep_for(std::chrono::microseconds((i % 10) * 400));
        return server.ask<receipt>(atom::commit_v, chat, r->id);
      });
      auto sweep =
        std::async(std::launch::async, [&] { return server.sweep(); });
      auto c = commit.get();
      REQUIRE(sweep.get());
      auto ledger = test::sql_int("SELECT count(*) FROM ledger WHERE "
                                  "reservation_id = "
                                  + std::to_string(r->id));
      auto tomb = test::sql_int("SELECT count(*) FROM released_reservations "
                                "WHERE id = "
                                + std::to_string(r->id));
      REQUIRE(ledger + tomb == 1);
      if (c) {
        REQUIRE(ledger == 1);
        ++charged;
      } else {
        REQUIRE(c.error() == ec::expired);
      }
    }
    MESSAGE("committed before the sweep: " << charged << " of 100");
    CHECK(setup.status(chat)->amounts.get(pocket::balance) == 100 - charged);
  }

  TEST_CASE("1,000,000 quiet chats: the reactivation scan refills them page "
            "by page with bounded memory, and a failing subscriber does not "
            "stop it") {
    constexpr int64_t n = 1'000'000;
    auto base = test::fresh_chat_block(n);
    auto range = std::to_string(base) + " AND " + std::to_string(base + n - 1);
    test::sql("INSERT INTO chats (chat_id, started, last_activity_at, "
              "window_started_at) SELECT g, true, now() - interval '48 hours', "
              "now() - interval '48 hours' FROM generate_series("
              + std::to_string(base) + ", " + std::to_string(base + n - 1)
              + ") g");
    test::sql("ANALYZE chats");
    test::threaded_server server{options()};
    auto broken = server.sys.spawn(failing_subscriber);
    REQUIRE(server.ask<bool>(atom::subscribe_v, broken));
    auto count = std::make_shared<std::atomic<int64_t>>(0);
    auto counter = server.sys.spawn(refill_counter, count, base, n);
    REQUIRE(server.ask<bool>(atom::subscribe_v, counter));
    auto rss_before = peak_rss_kib();
    auto t0 = std::chrono::steady_clock::now();
    // Asked with a bound of its own: the server helper's 60 s request
    // timeout is too close to the time the scan takes on a busy machine.
    caf::expected<uint64_t> refilled{caf::sec::none};
    {
      caf::scoped_actor self{server.sys};
      self->request(server.root, reactivation_wait_max, atom::reactivate_v)
        .receive([&](uint64_t x) { refilled = x; },
                 [&](caf::error& err) { refilled = std::move(err); });
    }
    auto elapsed = std::chrono::steady_clock::now() - t0;
    INFO(
      "the scan answered after "
      << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()
      << " ms");
    REQUIRE(refilled);
    CHECK(*refilled >= static_cast<uint64_t>(n));
    CHECK(test::sql_int("SELECT count(*) FROM chats WHERE chat_id BETWEEN "
                        + range
                        + " AND reactivated_at IS NOT NULL"
                          " AND chargeonce_amount(pockets, 'daily_images') = 3 "
                          "AND window_started_at IS NULL")
          == n);
    // Events trail the refills.
    auto delivered = test::wait_while_progressing([&] { return *count >= n; },
                                                  [&] { return count->load(); },
                                                  trailing_wait_max);
    CHECK(count->load() == n);
    auto rss_after = peak_rss_kib();
    MESSAGE(
      "reactivated "
      << n << " chats in "
      << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()
      << " ms, their events " << delivered.ms() << " ms after that; peak RSS "
      << rss_before / 1024 << " MiB -> " << rss_after / 1024 << " MiB");
    CHECK(rss_after - rss_before < rss_growth_max_kib);
    // Each refill wrote its ledger row, which must go first.
    CHECK(test::sql_int("SELECT count(*) FROM ledger WHERE entry = 'refill' "
                        "AND detail = 'reactivation' AND chat_id BETWEEN "
                        + range)
          == n);
    test::sql("DELETE FROM ledger WHERE chat_id BETWEEN " + range);
    test::sql("DELETE FROM events WHERE chat_id BETWEEN " + range);
    test::sql("DELETE FROM chats WHERE chat_id BETWEEN " + range);
    caf::anon_send_exit(counter, caf::exit_reason::user_shutdown);
  }

} // TEST_SUITE
