// SPDX-License-Identifier: Apache-2.0
// The supervisor and the chat actor's timers on the deterministic scheduler:
// sweeps walk pages and release through chat actors; dead persistence
// actors come back with backoff; queue notices are sent once, or not at all.
#include "actors/events_actor.hpp"
#include "actors/notice_timer_actor.hpp"
#include "actors/supervisor_actor.hpp"
#include "protocol/errors.hpp"
#include "tests/support/fixture.hpp"

#include <doctest/doctest.h>

using namespace chargeonce;
using namespace std::chrono_literals;
using test::deterministic_fixture;

namespace {

sweep_candidate candidate(chat_id chat, sweep_phase phase, int64_t at) {
  return {chat, sweep_cursor{phase, at, chat * 10}};
}

struct supervisor_fixture : deterministic_fixture {
  supervisor_options options = [] {
    supervisor_options x;
    x.connections = 1;
    x.sweep_chunk_rows = 2;
    x.sweep_interval = 60s;
    x.chat = chat_options{5s, 600s, 5s};
    return x;
  }();
  supervisor_actor root;
  api_actor api;
  caf::actor recorder = sys.spawn(test::event_recorder, log);

  supervisor_fixture() {
    auto factory = [this] {
      return caf::actor_cast<persistence_actor>(
        sys.spawn(test::fake_persistence, log));
    };
    root = sys.spawn(make_supervisor, factory, options);
    sched.run();
    auto rh = self->request(root, caf::infinite, atom::api_v);
    sched.run();
    api = *receive<api_actor>(rh);
    auto sub = self->request(api, caf::infinite, atom::subscribe_v, recorder);
    sched.run();
    REQUIRE(*receive<bool>(sub));
  }

  ~supervisor_fixture() {
    caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(recorder, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(fake_actor, caf::exit_reason::user_shutdown);
    sched.run();
  }

  caf::expected<uint64_t> sweep() {
    auto rh = self->request(root, caf::infinite, atom::sweep_v);
    sched.run();
    return receive<uint64_t>(rh);
  }

  template <class T, class... Ts>
  caf::expected<T> ask(Ts... xs) {
    auto rh = self->request(api, caf::infinite, xs...);
    sched.run();
    return receive<T>(rh);
  }
};

/// Takes every request and never answers: a scan started on it hangs until
/// the supervisor stops.
caf::behavior
silent_persistence(caf::event_based_actor* self,
                   std::shared_ptr<std::vector<caf::response_promise>> held) {
  self->set_default_handler(
    [self, held](caf::scheduled_actor*,
                 caf::message_view&) -> caf::result<caf::message> {
      held->push_back(self->make_response_promise());
      return held->back();
    });
  return {[](caf::ok_atom) {
  }}; // never sent; an empty behavior would quit
}

struct hanging_scan_fixture : deterministic_fixture {
  std::shared_ptr<std::vector<caf::response_promise>> held =
    std::make_shared<std::vector<caf::response_promise>>();
  supervisor_actor root;

  hanging_scan_fixture() {
    auto factory = [this] {
      return caf::actor_cast<persistence_actor>(
        sys.spawn(silent_persistence, held));
    };
    root = sys.spawn(make_supervisor, factory, supervisor_options{});
    sched.run();
  }

  ~hanging_scan_fixture() {
    caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(fake_actor, caf::exit_reason::user_shutdown);
    sched.run();
  }

  /// Starts a scan that hangs on Postgres, stops the supervisor with
  /// `reason` and returns what the caller got before any (virtual) time
  /// passed, or else what its own timeout gave it.
  template <class Atom>
  caf::expected<uint64_t> abandoned(Atom scan, caf::exit_reason reason) {
    auto rh = self->request(root, 30s, scan);
    sched.run();
    REQUIRE_FALSE(held->empty()); // the scan's first page: never answered
    caf::anon_send_exit(root, reason);
    sched.run();
    bool answered_at_once = !self->mailbox().empty();
    CHECK(answered_at_once);
    if (!answered_at_once) { // collect the timeout rather than hang
      sched.advance_time(30s);
      sched.run();
    }
    return receive<uint64_t>(rh);
  }
};

} // namespace

TEST_SUITE("supervisor") {

  TEST_CASE_FIXTURE(supervisor_fixture,
                    "a sweep walks its three phases page by page and releases "
                    "each candidate through its chat actor") {
    log->pages = {
      {candidate(1, sweep_phase::lease, 100),
       candidate(2, sweep_phase::lease, 200)},
      {candidate(3, sweep_phase::lease, 300)}, // short page: lease phase done
      {candidate(4, sweep_phase::age, 50), candidate(5, sweep_phase::age, 60)},
      {},                                          // empty page: age phase done
      {candidate(6, sweep_phase::unresolved, 70)}, // short: unresolved done
    };
    auto released = sweep();
    REQUIRE(released);
    CHECK(*released == 6);
    REQUIRE(log->cursors.size() == 5);
    CHECK(log->cursors[0].phase == sweep_phase::lease);
    CHECK(log->cursors[0].reservation == 0);
    CHECK(log->cursors[1].at_us == 200); // continues after the last candidate
    CHECK(log->cursors[1].reservation == 20);
    CHECK(log->cursors[2].phase == sweep_phase::age);
    CHECK(log->cursors[2].reservation == 0);
    CHECK(log->cursors[3].at_us == 60);
    CHECK(log->cursors[4].phase == sweep_phase::unresolved);
    CHECK(log->cursors[4].reservation == 0);
    for (chat_id chat = 1; chat <= 6; ++chat)
      CHECK(std::count(log->calls.begin(), log->calls.end(),
                       "release " + std::to_string(chat))
            == 1);
    CHECK(log->events.size() == 6); // published after each delete
  }

  TEST_CASE_FIXTURE(supervisor_fixture,
                    "at most one page of releases is in flight") {
    log->hold = true; // chat actors wait for their release answers
    log->pages = {
      {candidate(1, sweep_phase::lease, 1),
       candidate(2, sweep_phase::lease, 2)},
      {candidate(3, sweep_phase::lease, 3)},
    };
    self->request(root, caf::infinite, atom::sweep_v);
    sched.run();
    CHECK(log->cursors.size() == 1); // the next page waits for this one
    CHECK(log->owed.size() == 2);
    release();
    CHECK(log->cursors.size() == 1);
    release();
    CHECK(log->cursors.size() == 2);
    log->hold = false;
    while (!log->owed.empty()) // deliver whatever is still owed, then drain
      release();
    sched.run();
  }

  TEST_CASE_FIXTURE(supervisor_fixture,
                    "sweeps also run by themselves every sweep-interval") {
    log->pages = {{candidate(7, sweep_phase::lease, 1)}};
    sched.advance_time(options.sweep_interval);
    sched.run();
    CHECK(std::count(log->calls.begin(), log->calls.end(), "release 7") == 1);
    CHECK(log->events == std::vector<std::string>{"reservation_released 7 70"});
  }

  TEST_CASE_FIXTURE(supervisor_fixture,
                    "a dead persistence actor fails requests fast and comes "
                    "back after an exponential backoff") {
    REQUIRE(ask<chat_status>(atom::status_v, chat_id{5}));
    auto first = log->spawned.size();
    // spawned[0] is the fixture's own fake; [1] serves chats, [2] sweeps,
    // [3] reads events.
    caf::anon_send_exit(log->spawned[1], caf::exit_reason::kill);
    sched.run();
    auto down = ask<chat_status>(atom::status_v, chat_id{5});
    REQUIRE_FALSE(down);
    CHECK(down.error() == ec::storage_unavailable);
    sched.advance_time(options.restart_backoff_min);
    sched.run();
    CHECK(log->spawned.size() == first + 1);
    CHECK(ask<chat_status>(atom::status_v, chat_id{5}));
    // Dying again soon: the next delay doubles.
    caf::anon_send_exit(log->spawned.back(), caf::exit_reason::kill);
    sched.run();
    sched.advance_time(options.restart_backoff_min);
    sched.run();
    CHECK(log->spawned.size() == first + 1);
    CHECK(ask<chat_status>(atom::status_v, chat_id{5}).error()
          == ec::storage_unavailable);
    sched.advance_time(options.restart_backoff_min);
    sched.run();
    CHECK(log->spawned.size() == first + 2);
    CHECK(ask<chat_status>(atom::status_v, chat_id{5}));
  }

  TEST_CASE_FIXTURE(supervisor_fixture,
                    "queue notice: sent once after the delay while the job is "
                    "still active") {
    log->active = 1;
    REQUIRE(
      ask<reservation>(atom::reserve_v, chat_id{9}, kind::text, std::string{}));
    sched.advance_time(options.chat.queue_notice_delay - 1ms);
    sched.run();
    CHECK(log->events.empty());
    sched.advance_time(1ms);
    sched.run();
    CHECK(log->events == std::vector<std::string>{"queue_notice 9 1"});
    // The same reservation answered again (a retried reserve): no second one.
    REQUIRE(
      ask<reservation>(atom::reserve_v, chat_id{9}, kind::text, std::string{}));
    sched.advance_time(options.chat.queue_notice_delay * 2);
    sched.run();
    CHECK(log->events.size() == 1);
  }

  TEST_CASE_FIXTURE(supervisor_fixture,
                    "cancel_requested: published once when a cancel marks a "
                    "started job, never for a job deleted while queued") {
    REQUIRE(ask<reservation>(atom::cancel_v, chat_id{9}));
    sched.run();
    CHECK(log->events.empty());
    log->cancel_requested = true;
    log->reserve_id = 2;
    REQUIRE(ask<reservation>(atom::reserve_v, chat_id{9}, kind::image,
                             std::string{}));
    auto marked = ask<reservation>(atom::cancel_v, chat_id{9},
                                   reservation_id{2}, std::string{});
    REQUIRE(marked);
    CHECK(marked->cancel_requested);
    sched.run();
    CHECK(log->events == std::vector<std::string>{"cancel_requested 9 2"});
    // A repeated cancel answers the same and tells the worker nothing new.
    REQUIRE(ask<reservation>(atom::cancel_v, chat_id{9}, reservation_id{2},
                             std::string{}));
    sched.run();
    CHECK(log->events.size() == 1);
  }

  TEST_CASE_FIXTURE(supervisor_fixture,
                    "queue notice: suppressed when the job finished in time") {
    REQUIRE(
      ask<reservation>(atom::reserve_v, chat_id{9}, kind::text, std::string{}));
    REQUIRE(ask<receipt>(atom::commit_v, chat_id{9}, reservation_id{1}));
    log->active = 0; // Postgres has no active reservation any more
    sched.advance_time(options.chat.queue_notice_delay);
    sched.run();
    CHECK(log->events.empty());
    // The chat actor saw the commit: it did not even ask Postgres.
    CHECK(std::count(log->calls.begin(), log->calls.end(), "status 9") == 0);
  }

  TEST_CASE_FIXTURE(supervisor_fixture,
                    "queue notice: not even asked for when this actor made a "
                    "newer reservation since (the older one has ended)") {
    for (reservation_id id : {1, 2}) {
      log->reserve_id = id;
      REQUIRE(ask<reservation>(atom::reserve_v, chat_id{9}, kind::text,
                               std::string{}));
      REQUIRE(ask<receipt>(atom::commit_v, chat_id{9}, id));
      sched.advance_time(1s);
      sched.run();
    }
    sched.advance_time(options.chat.queue_notice_delay);
    sched.run();
    CHECK(log->events.empty());
    CHECK(std::count(log->calls.begin(), log->calls.end(), "status 9") == 0);
  }

  TEST_CASE_FIXTURE(supervisor_fixture,
                    "queue notice: suppressed when another server finished "
                    "the job (Postgres says so)") {
    log->active = 1;
    REQUIRE(
      ask<reservation>(atom::reserve_v, chat_id{9}, kind::text, std::string{}));
    log->active = 0; // committed elsewhere: this actor never saw it
    sched.advance_time(options.chat.queue_notice_delay);
    sched.run();
    CHECK(log->events.empty());
    CHECK(std::count(log->calls.begin(), log->calls.end(), "status 9") == 1);
  }

  TEST_CASE_FIXTURE(supervisor_fixture,
                    "queue notices of 100 chats armed 1 ms apart wake the "
                    "clock a few times, not once per reservation") {
    // One CAF timer per reservation woke the clock thread twice per
    // reserve; at 64 clients that was 16 % of the server's CPU time.
    log->active = 1;
    size_t timeouts = 0;
    for (chat_id chat = 100; chat < 200; ++chat) {
      REQUIRE(
        ask<reservation>(atom::reserve_v, chat, kind::text, std::string{}));
      timeouts += sched.advance_time(1ms);
    }
    sched.run();
    timeouts += sched.advance_time(options.chat.queue_notice_delay - 100ms
                                   + notice_timer_granularity);
    sched.run();
    CHECK(log->events.size() == 100);
    MESSAGE("clock timeouts for 100 notices: " << timeouts);
    CHECK(timeouts <= 3);
  }

  TEST_CASE_FIXTURE(supervisor_fixture,
                    "a chat actor with a notice pending is not passivated "
                    "before it is sent") {
    auto before = sys.registry().running();
    log->active = 1;
    REQUIRE(
      ask<reservation>(atom::reserve_v, chat_id{9}, kind::text, std::string{}));
    CHECK(sys.registry().running() == before + 1);
    sched.advance_time(options.chat.queue_notice_delay);
    sched.run();
    CHECK(log->events.size() == 1);
    sched.advance_time(options.chat.idle_timeout);
    sched.run();
    CHECK(sys.registry().running() == before);
  }

  TEST_CASE_FIXTURE(supervisor_fixture,
                    "a dead subscriber is dropped and never blocks a release") {
    caf::anon_send_exit(recorder, caf::exit_reason::kill);
    sched.run();
    log->pages = {{candidate(3, sweep_phase::lease, 1)}};
    auto released = sweep();
    REQUIRE(released);
    CHECK(*released == 1);
    CHECK(log->events.empty());
  }

  TEST_CASE_FIXTURE(supervisor_fixture,
                    "a reactivation page that fails is tried again from the "
                    "same cursor: a deadlock or a lost connection costs the "
                    "page a try, not the scan") {
    reactivation_page first;
    first.chats = {4, 5};
    first.next = {100, 5};
    first.more = true;
    reactivation_page last;
    last.chats = {6};
    last.next = {200, 6};
    log->reactivations.push_back(first);
    log->reactivations.push_back(
      caf::make_error(ec::storage_unavailable, "deadlock detected"));
    log->reactivations.push_back(last);
    auto rh = self->request(root, caf::infinite, atom::reactivate_v);
    sched.run();
    auto refilled = receive<uint64_t>(rh);
    REQUIRE(refilled);
    CHECK(*refilled == 3);
    REQUIRE(log->reactivation_cursors.size() == 3);
    CHECK(log->reactivation_cursors[1].chat == 5);
    CHECK(log->reactivation_cursors[2].chat == 5); // the same page again
  }

  TEST_CASE_FIXTURE(supervisor_fixture,
                    "a reactivation page that fails 3 times ends the scan "
                    "until its next interval") {
    for (int i = 0; i < 4; ++i)
      log->reactivations.push_back(
        caf::make_error(ec::storage_unavailable, "no primary"));
    auto rh = self->request(root, caf::infinite, atom::reactivate_v);
    sched.run();
    auto refilled = receive<uint64_t>(rh);
    REQUIRE(refilled);
    CHECK(*refilled == 0);
    CHECK(log->reactivation_cursors.size() == 3);
  }

  TEST_CASE_FIXTURE(hanging_scan_fixture,
                    "a sweep still running when the supervisor stops fails "
                    "its caller at once with request_receiver_down") {
    auto r = abandoned(atom::sweep_v, caf::exit_reason::user_shutdown);
    REQUIRE_FALSE(r);
    CHECK(r.error() == caf::sec::request_receiver_down);
    auto text = caf::to_string(r.error());
    CHECK(text.find("before the sweep finished") != std::string::npos);
    CHECK(text.find("user_shutdown") != std::string::npos);
  }

  TEST_CASE_FIXTURE(hanging_scan_fixture,
                    "a reactivation scan still running when the supervisor "
                    "stops fails its caller at once too") {
    auto r = abandoned(atom::reactivate_v, caf::exit_reason::user_shutdown);
    REQUIRE_FALSE(r);
    CHECK(r.error() == caf::sec::request_receiver_down);
    auto text = caf::to_string(r.error());
    CHECK(text.find("before the reactivation finished") != std::string::npos);
  }

  TEST_CASE_FIXTURE(hanging_scan_fixture,
                    "a sweep still running when the supervisor is killed "
                    "(no exit handler runs) fails its caller at once too") {
    auto r = abandoned(atom::sweep_v, caf::exit_reason::kill);
    REQUIRE_FALSE(r);
    CHECK(r.error() == caf::sec::request_receiver_down);
  }

  TEST_CASE_FIXTURE(supervisor_fixture,
                    "ping is answered through the registry, and fails at "
                    "once when the registry is dead") {
    auto alive = self->request(root, 30s, atom::ping_v);
    sched.run();
    CHECK(receive<caf::ok_atom>(alive));
    caf::anon_send_exit(api, caf::exit_reason::kill); // api is the registry
    sched.run();
    auto dead = self->request(root, 30s, atom::ping_v);
    sched.run();
    REQUIRE_FALSE(self->mailbox().empty());
    auto r = receive<caf::ok_atom>(dead);
    REQUIRE_FALSE(r);
    CHECK(r.error() == caf::sec::request_receiver_down);
  }

} // TEST_SUITE
