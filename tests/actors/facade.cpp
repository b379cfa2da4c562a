// SPDX-License-Identifier: Apache-2.0
// Role facades are a real boundary: an untyped client that sends another
// role's message gets an error and nothing reaches Postgres.
#include "actors/events_actor.hpp"
#include "actors/facade_actor.hpp"
#include "actors/registry_actor.hpp"
#include "protocol/errors.hpp"
#include "tests/support/fixture.hpp"

#include <doctest/doctest.h>

using namespace chargeonce;
using namespace std::chrono_literals;

namespace {

struct facade_fixture : test::deterministic_fixture {
  events_actor events =
    sys.spawn(make_events, persistence_actor{fake}, events_options{});
  registry_actor registry =
    sys.spawn(make_registry, std::vector<persistence_actor>{fake}, events,
              chat_options{5s, 60s, 5s});
  caf::actor gateway =
    caf::actor_cast<caf::actor>(sys.spawn(make_gateway, core_actor{registry}));
  caf::actor worker =
    caf::actor_cast<caf::actor>(sys.spawn(make_worker, core_actor{registry}));
  caf::actor admin =
    caf::actor_cast<caf::actor>(sys.spawn(make_admin, core_actor{registry}));

  ~facade_fixture() {
    for (auto& x : {gateway, worker, admin})
      caf::anon_send_exit(x, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(registry, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(events, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(fake, caf::exit_reason::user_shutdown);
    sched.run();
  }

  /// Sends untyped, as a hostile or confused remote client could.
  template <class T, class... Ts>
  caf::expected<T> ask(const caf::actor& dst, Ts... xs) {
    auto rh = self->request(dst, caf::infinite, xs...);
    sched.run();
    return receive<T>(rh);
  }
};

} // namespace

TEST_SUITE("facade") {

  TEST_CASE_FIXTURE(facade_fixture, "each role's own operations pass through") {
    CHECK(ask<chat_status>(gateway, atom::status_v, chat_id{1}));
    CHECK(
      ask<reservation>(worker, atom::start_v, chat_id{1}, reservation_id{1}));
    CHECK(ask<chat_status>(admin, atom::create_v,
                           chat_spec{1, {}, caf::none, caf::none}));
    CHECK(log->calls
          == std::vector<std::string>{"status 1", "start 1", "create 1"});
  }

  TEST_CASE_FIXTURE(facade_fixture,
                    "a gateway cancels a named job; only an admin sets a "
                    "chat's limit, and a limit outside 1..64 never reaches "
                    "the store") {
    auto named = ask<reservation>(gateway, atom::cancel_v, chat_id{1},
                                  reservation_id{7}, std::string{});
    REQUIRE(named);
    CHECK(named->id == 7);
    CHECK(ask<reservation>(gateway, atom::cancel_v, chat_id{1},
                           reservation_id{0}, std::string{"tap"}));
    auto limit = ask<chat_status>(admin, atom::limits_v, chat_id{1},
                                  limits_update{3, true, caf::none, false});
    REQUIRE(limit);
    CHECK(limit->own_max_active_jobs == caf::optional<int32_t>{3});
    CHECK(ask<chat_status>(gateway, atom::limits_v, chat_id{1},
                           limits_update{3, true, caf::none, false})
            .error()
          == caf::sec::unexpected_message);
    CHECK(ask<chat_status>(admin, atom::limits_v, chat_id{1},
                           limits_update{0, true, caf::none, false})
            .error()
          == ec::invalid_argument);
    // A negative balance-low threshold, or a set-limits that sets nothing,
    // is refused before it reaches the chat.
    CHECK(ask<chat_status>(admin, atom::limits_v, chat_id{1},
                           limits_update{caf::none, false, -1, true})
            .error()
          == ec::invalid_argument);
    CHECK(ask<chat_status>(admin, atom::limits_v, chat_id{1},
                           limits_update{caf::none, false, caf::none, false})
            .error()
          == ec::invalid_argument);
    CHECK(ask<reservation>(gateway, atom::cancel_v, chat_id{1},
                           reservation_id{7}, std::string{"tap"})
            .error()
          == ec::invalid_argument);
    CHECK(log->calls
          == std::vector<std::string>{"cancel 1", "cancel 1", "limits 1"});
  }

  TEST_CASE_FIXTURE(facade_fixture,
                    "a worker cannot top up and a gateway cannot commit") {
    auto top_up = ask<top_up_receipt>(worker, atom::top_up_v, chat_id{1},
                                      int64_t{100}, std::string{"p"});
    REQUIRE_FALSE(top_up);
    CHECK(top_up.error() == caf::sec::unexpected_message);
    auto commit =
      ask<receipt>(gateway, atom::commit_v, chat_id{1}, reservation_id{1});
    REQUIRE_FALSE(commit);
    CHECK(commit.error() == caf::sec::unexpected_message);
    auto reserve = ask<reservation>(admin, atom::reserve_v, chat_id{1},
                                    kind::text, std::string{});
    REQUIRE_FALSE(reserve);
    CHECK(reserve.error() == caf::sec::unexpected_message);
    auto garbage = ask<int>(gateway, std::string{"hello"}, 42);
    REQUIRE_FALSE(garbage);
    CHECK(garbage.error() == caf::sec::unexpected_message);
    CHECK(log->calls.empty()); // nothing reached the store
    CHECK(ask<chat_status>(gateway, atom::status_v, chat_id{1})); // still alive
  }

  TEST_CASE_FIXTURE(facade_fixture,
                    "answers come from the facade, never from an internal "
                    "actor whose handle a client could then call directly") {
    for (auto& [facade, call] :
         {std::pair{gateway, caf::make_message(atom::status_v, chat_id{3})},
          std::pair{gateway, caf::make_message(atom::status_v, chat_id{0})},
          std::pair{worker, caf::make_message(atom::commit_v, chat_id{3},
                                              reservation_id{4})}}) {
      auto rh = self->request(facade, caf::infinite, call);
      sched.run();
      caf::strong_actor_ptr answered_by;
      rh.receive([&](caf::message&) { answered_by = self->current_sender(); },
                 [&](caf::error&) { answered_by = self->current_sender(); });
      REQUIRE(answered_by);
      CHECK(answered_by->address() == facade.address());
    }
  }

  TEST_CASE_FIXTURE(facade_fixture,
                    "a batch is answered in order; an operation of another "
                    "role in it is refused and never reaches the store") {
    std::vector<operation> ops{
      {operation_type::status, 1, 0, kind::text, {}},
      {operation_type::commit, 2, 9, kind::text, {}}, // a worker's
      {operation_type::reserve, 3, 0, kind::image, "tap"},
      {operation_type::status, 0, 0, kind::text, {}}, // invalid chat
    };
    auto answers = ask<std::vector<outcome>>(gateway, atom::batch_v, ops);
    REQUIRE(answers);
    REQUIRE(answers->size() == 4);
    CHECK((*answers)[0].status);
    CHECK((*answers)[1].error == ec::invalid_argument);
    CHECK((*answers)[2].reservation);
    CHECK((*answers)[3].error == ec::invalid_argument);
    CHECK(log->calls == std::vector<std::string>{"status 1", "reserve 3"});
    auto worker_side = ask<std::vector<outcome>>(
      worker, atom::batch_v,
      std::vector<operation>{{operation_type::touch, 1, 0, kind::text, {}},
                             {operation_type::start, 1, 5, kind::text, {}}});
    REQUIRE(worker_side);
    CHECK((*worker_side)[0].error == ec::invalid_argument);
    CHECK((*worker_side)[1].reservation);
  }

  TEST_CASE_FIXTURE(facade_fixture,
                    "an operation reaches the store as the client sent it: a "
                    "message converted once at its facade, a batch's "
                    "operation as it came") {
    REQUIRE(ask<reservation>(gateway, atom::reserve_v, chat_id{4}, kind::image,
                             std::string{"r1"}, int32_t{3}));
    REQUIRE(ask<receipt>(worker, atom::commit_v, chat_id{4}, reservation_id{9},
                         int32_t{2}, std::string{"w1"}));
    REQUIRE(ask<reservation>(worker, atom::heartbeat_v, chat_id{4},
                             reservation_id{9}, std::string{"w1"}));
    REQUIRE(ask<reservation>(gateway, atom::cancel_v, chat_id{4},
                             reservation_id{0}, std::string{"r1"}));
    REQUIRE(ask<chat_status>(gateway, atom::touch_v, chat_id{4}));
    REQUIRE(ask<std::vector<outcome>>(
      worker, atom::batch_v,
      std::vector<operation>{
        {operation_type::fail, 5, 8, kind::text, {}, 0, "w2"},
        {operation_type::start, 5, 8, kind::text, {}}}));
    REQUIRE(ask<std::vector<outcome>>(
      gateway, atom::batch_v,
      std::vector<operation>{
        {operation_type::reserve, 6, 0, kind::image, "b", 2, {}}}));
    std::vector<std::string> seen;
    for (const auto& x : log->applied)
      seen.push_back(
        std::string{to_string(x.type)} + " " + std::to_string(x.chat) + " "
        + std::to_string(x.reservation) + " " + x.kind.name() + " "
        + x.request_id + " " + std::to_string(x.units) + " " + x.worker);
    CHECK(seen
          == std::vector<std::string>{
            "reserve 4 0 image r1 3 ", "commit 4 9 text  2 w1",
            "heartbeat 4 9 text  0 w1", "cancel 4 0 text r1 0 ",
            "touch 4 0 text  0 ", "fail 5 8 text  0 w2", "start 5 8 text  0 ",
            "reserve 6 0 image b 2 "});
  }

  TEST_CASE_FIXTURE(facade_fixture,
                    "units a message names must be 1 or more, refused at the "
                    "facade; in a batch's operation 0 means none named") {
    CHECK(ask<reservation>(gateway, atom::reserve_v, chat_id{4}, kind::text,
                           std::string{"r"}, int32_t{0})
            .error()
          == ec::invalid_argument);
    CHECK(ask<receipt>(worker, atom::commit_v, chat_id{4}, reservation_id{9},
                       int32_t{0})
            .error()
          == ec::invalid_argument);
    CHECK(ask<receipt>(worker, atom::commit_v, chat_id{4}, reservation_id{9},
                       int32_t{-1}, std::string{"w"})
            .error()
          == ec::invalid_argument);
    CHECK(log->calls.empty());
    auto answers = ask<std::vector<outcome>>(
      gateway, atom::batch_v,
      std::vector<operation>{
        {operation_type::reserve, 4, 0, kind::text, "r"},
        {operation_type::reserve, 5, 0, kind::text, "r", -2, {}}});
    REQUIRE(answers);
    CHECK((*answers)[0].reservation);
    CHECK((*answers)[1].error == ec::invalid_argument);
    CHECK(log->calls == std::vector<std::string>{"reserve 4"});
  }

  TEST_CASE_FIXTURE(facade_fixture,
                    "an oversized batch is refused whole, nothing runs") {
    std::vector<operation> ops(batch_message_operations_max + 1,
                               {operation_type::status, 1, 0, kind::text, {}});
    auto answers = ask<std::vector<outcome>>(gateway, atom::batch_v, ops);
    REQUIRE_FALSE(answers);
    CHECK(answers.error() == ec::invalid_argument);
    CHECK(log->calls.empty());
  }

  TEST_CASE_FIXTURE(facade_fixture,
                    "answered batches leave no timer behind: 100 batches of "
                    "10 operations, one idle timer per chat actor") {
    auto batch = [] {
      std::vector<operation> ops;
      for (chat_id chat = 1; chat <= 10; ++chat)
        ops.push_back({operation_type::status, chat, 0, kind::text, {}});
      return ops;
    }();
    for (int i = 0; i < 100; ++i)
      REQUIRE(ask<std::vector<outcome>>(gateway, atom::batch_v, batch));
    // The chat actors' store requests keep theirs until they expire.
    sched.advance_time(6s);
    sched.run();
    CHECK(sched.clock().schedule().size() <= 10 + 2);
  }

} // TEST_SUITE
