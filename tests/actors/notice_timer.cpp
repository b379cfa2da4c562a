// SPDX-License-Identifier: Apache-2.0
// The notice timer hands every armed queue notice back to the actor that
// armed it: never before its delay, at most one granularity after, and with
// one clock timer per granularity at most however many are armed.
#include "actors/notice_timer_actor.hpp"
#include "tests/support/fixture.hpp"

#include <caf/all.hpp>
#include <doctest/doctest.h>

#include <map>
#include <memory>

using namespace chargeonce;
using namespace std::chrono_literals;

namespace {

using time_point = caf::actor_clock::time_point;

/// Stands in for a chat actor: a reservation_id arms its notice, and the
/// notice coming back is recorded with the time it arrived.
struct probe_log {
  std::map<reservation_id, time_point> armed;
  std::map<reservation_id, time_point> back;
  size_t duplicates = 0;
};

caf::behavior probe(caf::event_based_actor* self, notice_timer_actor timer,
                    std::shared_ptr<probe_log> log) {
  return {
    [=](reservation_id id) {
      log->armed[id] = self->clock().now();
      self->send(timer, atom::notice_v, id);
    },
    [=](atom::notice, reservation_id id) {
      if (!log->back.emplace(id, self->clock().now()).second)
        ++log->duplicates;
    },
  };
}

struct notice_timer_fixture : test::deterministic_fixture {
  caf::timespan delay = 5s;
  notice_timer_actor timer =
    caf::actor_cast<notice_timer_actor>(sys.spawn(make_notice_timer, delay));
  std::shared_ptr<probe_log> probe_log_ = std::make_shared<probe_log>();
  caf::actor chat = sys.spawn(probe, timer, probe_log_);

  ~notice_timer_fixture() {
    caf::anon_send_exit(chat, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(timer, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(fake_actor, caf::exit_reason::user_shutdown);
    sched.run();
  }

  void arm(reservation_id id) {
    caf::anon_send(chat, id);
    sched.run();
  }
};

} // namespace

TEST_SUITE("actors.notice_timer") {

  TEST_CASE_FIXTURE(notice_timer_fixture,
                    "a lone notice comes back exactly after its delay") {
    arm(1);
    sched.advance_time(delay - 1ms);
    sched.run();
    CHECK(probe_log_->back.empty());
    sched.advance_time(1ms);
    sched.run();
    REQUIRE(probe_log_->back.count(1) == 1);
    CHECK(probe_log_->back[1] - probe_log_->armed[1] == delay);
  }

  TEST_CASE_FIXTURE(notice_timer_fixture,
                    "1,000 notices armed over 1 s each come back once, "
                    "between their delay and one granularity later, on at "
                    "most 12 clock timeouts") {
    size_t timeouts = 0;
    for (reservation_id id = 1; id <= 1000; ++id) {
      arm(id);
      timeouts += sched.advance_time(1ms);
      sched.run();
    }
    // Step through the delay and beyond in small steps, as a real clock.
    for (int step = 0; step < 6000 && probe_log_->back.size() < 1000; ++step) {
      timeouts += sched.advance_time(1ms);
      sched.run();
    }
    REQUIRE(probe_log_->back.size() == 1000);
    CHECK(probe_log_->duplicates == 0);
    size_t early = 0;
    size_t late = 0;
    for (auto& [id, at] : probe_log_->back) {
      auto waited = at - probe_log_->armed[id];
      early += waited < delay;
      late += waited > delay + notice_timer_granularity;
    }
    CHECK(early == 0);
    CHECK(late == 0);
    // One timer per notice would be 1,000; 1 s / 100 ms + the first + slack.
    MESSAGE("clock timeouts for 1,000 notices: " << timeouts);
    CHECK(timeouts <= 12);
  }

  TEST_CASE_FIXTURE(notice_timer_fixture,
                    "a notice armed after a quiet spell comes back on time "
                    "(the timer is re-armed from empty)") {
    arm(1);
    sched.advance_time(delay);
    sched.run();
    sched.advance_time(1h);
    sched.run();
    arm(2);
    sched.advance_time(delay);
    sched.run();
    REQUIRE(probe_log_->back.count(2) == 1);
    CHECK(probe_log_->back[2] - probe_log_->armed[2] == delay);
  }
}
