// SPDX-License-Identifier: Apache-2.0
// The numbers must move when real actors work: client operations through a
// facade, sweeps, releases, queue notices, restarts and passivations, on the
// deterministic scheduler with the fake store.
#include "actors/metrics/recording.hpp"

#include "actors/facade_actor.hpp"
#include "actors/metrics/rendering.hpp"
#include "actors/supervisor_actor.hpp"
#include "protocol/errors.hpp"
#include "tests/actors/metrics/exposition.hpp"
#include "tests/support/fixture.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>

using namespace chargeonce;
using namespace std::chrono_literals;
using test::deterministic_fixture;
using test::duration_bucket;
using test::ops;
using test::validate;
using test::value_of;

namespace {

/// Reads a series now and tells how much it moved since; an absent series
/// (an error outcome not seen yet) counts as 0.
struct probe {
  std::string series;
  double before = 0;
  explicit probe(std::string name) : series(std::move(name)) { before = now(); }
  double now() const {
    return std::max(0.0, value_of(metrics::render(), series));
  }
  double moved() const { return now() - before; }
};

// -- a server's actors on the deterministic scheduler -------------------------

struct server_fixture : deterministic_fixture {
  supervisor_options options = [] {
    supervisor_options x;
    x.connections = 1;
    x.chat = chat_options{5s, 600s, 5s};
    return x;
  }();
  supervisor_actor root;
  caf::actor gateway;
  caf::actor worker;
  caf::actor all_roles;

  server_fixture() {
    auto factory = [this] {
      return caf::actor_cast<persistence_actor>(
        sys.spawn(test::fake_persistence, log));
    };
    root = sys.spawn(make_supervisor, factory, options);
    sched.run();
    auto rh = self->request(root, caf::infinite, atom::core_v);
    sched.run();
    auto api = *receive<core_actor>(rh);
    gateway = caf::actor_cast<caf::actor>(sys.spawn(make_gateway, api));
    worker = caf::actor_cast<caf::actor>(sys.spawn(make_worker, api));
    all_roles = caf::actor_cast<caf::actor>(sys.spawn(make_api_facade, api));
  }

  ~server_fixture() {
    for (auto& x : {gateway, worker, all_roles})
      caf::anon_send_exit(x, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(fake_actor, caf::exit_reason::user_shutdown);
    sched.run();
  }

  template <class T, class... Ts>
  caf::expected<T> ask(const caf::actor& dst, Ts... xs) {
    auto rh = self->request(dst, caf::infinite, xs...);
    sched.run();
    return receive<T>(rh);
  }
};

} // namespace

TEST_SUITE("metrics") {

  TEST_CASE_FIXTURE(server_fixture,
                    "operations through a facade count by outcome and time "
                    "their latency") {
    probe reserved{ops("reserve", "ok")};
    probe committed{ops("commit", "ok")};
    probe refused{ops("reserve", "invalid_argument")};
    probe created{ops("create", "ok")};
    probe reserve_timed{
      "chargeonce_operation_duration_seconds_count{operation=\"reserve\"}"};
    probe actors{"chargeonce_chat_actors"};
    auto r = ask<reservation>(gateway, atom::reserve_v, chat_id{21}, kind::text,
                              std::string{"job"});
    REQUIRE(r);
    REQUIRE(ask<receipt>(worker, atom::commit_v, chat_id{21}, r->id));
    CHECK_FALSE(ask<reservation>(gateway, atom::reserve_v, chat_id{0},
                                 kind::text, std::string{}));
    REQUIRE(ask<chat_status>(all_roles, atom::create_v,
                             chat_spec{22, {}, caf::none, caf::none}));
    CHECK(reserved.moved() == 1);
    CHECK(committed.moved() == 1);
    CHECK(refused.moved() == 1);
    CHECK(created.moved() == 1);
    CHECK(reserve_timed.moved() == 2); // refusals are timed too
    CHECK(actors.moved() == 2);        // chats 21 and 22; 0 never spawns
    CHECK(validate(metrics::render()) == "");
  }

  TEST_CASE_FIXTURE(server_fixture,
                    "latency is measured from arrival to answer") {
    probe fast{duration_bucket("status", "0.25")};
    probe slow{duration_bucket("status", "0.5")};
    log->hold = true;
    auto rh =
      self->request(gateway, caf::infinite, atom::status_v, chat_id{23});
    sched.run();
    sched.advance_time(300ms); // Postgres takes its time
    release();
    REQUIRE(receive<chat_status>(rh));
    CHECK(fast.moved() == 0);
    CHECK(slow.moved() == 1);
  }

  TEST_CASE_FIXTURE(server_fixture,
                    "a sweep, its releases and a queue notice are counted") {
    probe sweeps{"chargeonce_sweeps_total"};
    probe released{"chargeonce_releases_total{reason=\"sweep_timeout\"}"};
    probe notices{"chargeonce_queue_notices_total"};
    log->pages.push_back(
      {sweep_candidate{24, sweep_cursor{sweep_phase::lease, 1, 240}}});
    auto rh = self->request(root, caf::infinite, atom::sweep_v);
    sched.run();
    auto released_now = receive<uint64_t>(rh);
    REQUIRE(released_now);
    CHECK(*released_now == 1);
    CHECK(sweeps.moved() == 1);
    CHECK(released.moved() == 1); // the fake store's reason
    log->active = 1;
    REQUIRE(ask<reservation>(gateway, atom::reserve_v, chat_id{25}, kind::text,
                             std::string{}));
    sched.advance_time(options.chat.queue_notice_delay);
    sched.run();
    CHECK(notices.moved() == 1);
  }

  TEST_CASE_FIXTURE(server_fixture,
                    "passivation and persistence restarts are counted") {
    probe passivated{"chargeonce_passivations_total"};
    probe actors{"chargeonce_chat_actors"};
    probe restarts{"chargeonce_persistence_restarts_total"};
    REQUIRE(ask<chat_status>(gateway, atom::status_v, chat_id{26}));
    CHECK(actors.moved() == 1);
    sched.advance_time(options.chat.idle_timeout);
    sched.run();
    CHECK(passivated.moved() == 1);
    CHECK(actors.moved() == 0); // the actor really terminated
    // spawned[0] is the fixture's own fake; [1] serves chats, [2] sweeps.
    caf::anon_send_exit(log->spawned[1], caf::exit_reason::kill);
    sched.run();
    CHECK(restarts.moved() == 1);
    sched.advance_time(options.restart_backoff_min);
    sched.run();
  }
}
