// SPDX-License-Identifier: Apache-2.0
// Chat actors and the registry on the deterministic scheduler: operations of
// one chat are serialized; passivation never loses or doubles a chat.
#include "actors/chat_actor.hpp"
#include "actors/events_actor.hpp"
#include "actors/facade_actor.hpp"
#include "actors/registry_actor.hpp"
#include "protocol/errors.hpp"
#include "tests/support/fixture.hpp"

#include <doctest/doctest.h>

using namespace chargeonce;
using namespace std::chrono_literals;
using test::deterministic_fixture;

namespace {

struct registry_fixture : deterministic_fixture {
  chat_options options{5s, 60s, 5s};
  events_actor events =
    sys.spawn(make_events, persistence_actor{fake}, events_options{});
  registry_actor registry = sys.spawn(
    make_registry, std::vector<persistence_actor>{fake}, events, options);
  /// Clients' messages reach the registry as a facade converts them.
  api_facade_actor api = sys.spawn(make_api_facade, core_actor{registry});

  registry_fixture() {
    log->store_timeout = options.store_timeout;
    // The registry starts its notice timer when it first runs: counted in
    // running() from here on.
    sched.run();
  }

  ~registry_fixture() {
    caf::anon_send_exit(api, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(registry, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(events, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(fake, caf::exit_reason::user_shutdown);
    sched.run();
  }

  auto status(chat_id chat) {
    return self->request(api, caf::infinite, atom::status_v, chat);
  }

  size_t running() { return sys.registry().running(); }

  /// Runs the request to its answer without advancing time.
  template <class Request>
  bool receive_now(Request req) {
    sched.run();
    return static_cast<bool>(receive<chat_status>(req));
  }
};

} // namespace

TEST_SUITE("chat") {

  TEST_CASE_FIXTURE(registry_fixture,
                    "an operation waits until Postgres answered the previous "
                    "one of the same chat") {
    log->hold = true;
    auto reserve = self->request(api, caf::infinite, atom::reserve_v,
                                 chat_id{42}, kind::text, std::string{"a"});
    auto cancel =
      self->request(api, caf::infinite, atom::cancel_v, chat_id{42});
    sched.run();
    CHECK(log->calls == std::vector<std::string>{"reserve 42"});
    REQUIRE(log->owed.size() == 1);
    release();
    CHECK(log->calls == std::vector<std::string>{"reserve 42", "cancel 42"});
    release();
    CHECK(receive<reservation>(reserve));
    CHECK(receive<reservation>(cancel));
  }

  TEST_CASE_FIXTURE(registry_fixture,
                    "different chats do not wait for each other") {
    log->hold = true;
    self->request(api, caf::infinite, atom::status_v, chat_id{1});
    self->request(api, caf::infinite, atom::status_v, chat_id{2});
    sched.run();
    CHECK(log->calls.size() == 2);
    release();
    release();
  }

  TEST_CASE_FIXTURE(
    registry_fixture,
    "an idle chat actor is passivated and respawned on demand") {
    auto before = running();
    auto first = status(7);
    sched.run();
    CHECK(receive<chat_status>(first));
    CHECK(running() == before + 1);
    sched.advance_time(options.idle_timeout);
    sched.run();
    CHECK(running() == before); // passivated: nothing lives in memory
    auto second = status(7);
    sched.run();
    CHECK(receive<chat_status>(second));
    CHECK(running() == before + 1);
    CHECK(log->calls == std::vector<std::string>{"status 7", "status 7"});
  }

  TEST_CASE_FIXTURE(registry_fixture,
                    "a busy chat actor is passivated one idle timeout after "
                    "its last operation, not its first") {
    auto before = running();
    CHECK(receive_now(status(7)));
    sched.advance_time(40s);
    CHECK(receive_now(status(7)));
    sched.advance_time(20s); // the first timer fires: 20 s quiet, re-armed
    sched.run();
    CHECK(running() == before + 1);
    sched.advance_time(39s);
    sched.run();
    CHECK(running() == before + 1);
    sched.advance_time(1s); // 60 s after the last operation
    sched.run();
    CHECK(running() == before);
  }

  TEST_CASE_FIXTURE(registry_fixture,
                    "1,000 operations of one chat leave one idle timer "
                    "pending and no timer per store request") {
    CHECK(receive_now(status(7)));
    auto pending = sched.clock().schedule().size();
    for (int i = 0; i < 1000; ++i)
      REQUIRE(receive_now(status(7)));
    // No time passes: CAF 0.17 would still hold a request timeout per
    // operation (answered or not) if the chat actor set one.
    CHECK(sched.clock().schedule().size() <= pending);
  }

  TEST_CASE_FIXTURE(registry_fixture,
                    "a message racing the passivation is served by the same "
                    "actor and not lost") {
    auto first = status(7);
    sched.run();
    REQUIRE(receive<chat_status>(first));
    auto chat = caf::actor_cast<caf::actor>(log->last_sender);
    REQUIRE(chat);
    auto before = running();
    // The idle timer fires (its message is now in the chat's mailbox) ...
    sched.advance_time(options.idle_timeout);
    // ... while a client's message reaches the registry and is routed to the
    // chat actor before the chat's idle report reaches the registry.
    auto racing = status(7);
    REQUIRE(sched.prioritize(api));
    sched.run_once(); // the facade relays `racing` to the registry
    REQUIRE(sched.prioritize(registry));
    sched.run_once(); // registry routes `racing` to the chat
    REQUIRE(sched.prioritize(chat));
    sched.run_once(); // chat handles the timer: reports idle with 1 received
    sched.run();      // registry refuses (2 routed), chat serves `racing`
    auto reply = receive<chat_status>(racing);
    REQUIRE(reply);
    CHECK(running() == before); // the same actor is still alive
    CHECK(log->last_sender == caf::actor_cast<caf::strong_actor_ptr>(chat));
    sched.advance_time(options.idle_timeout); // really idle now
    sched.run();
    CHECK(running() == before - 1);
  }

  TEST_CASE_FIXTURE(registry_fixture,
                    "Postgres not answering in time (the persistence actor's "
                    "storage_unavailable) reaches the caller and the chat "
                    "moves on") {
    log->hold = true;
    auto slow = status(9);
    auto next = status(9);
    sched.run();
    sched.advance_time(options.store_timeout);
    sched.run();
    auto r = receive<chat_status>(slow);
    REQUIRE_FALSE(r);
    CHECK(r.error() == ec::storage_unavailable);
    CHECK(log->calls.size() == 2); // the next operation went ahead
    release();
    CHECK(receive<chat_status>(next));
  }

  TEST_CASE_FIXTURE(registry_fixture,
                    "bad input is refused by the registry before anything "
                    "spawns") {
    auto before = running();
    auto zero = status(0);
    auto bad_kind =
      self->request(api, caf::infinite, atom::reserve_v, chat_id{5},
                    kind{"no such kind"}, std::string{});
    auto bad_id = self->request(api, caf::infinite, atom::commit_v, chat_id{5},
                                reservation_id{-1});
    auto negative =
      self->request(api, caf::infinite, atom::create_v,
                    chat_spec{5, {0, -2, 0}, caf::none, caf::none});
    sched.run();
    CHECK(receive<chat_status>(zero).error() == ec::invalid_argument);
    CHECK(receive<reservation>(bad_kind).error() == ec::invalid_argument);
    CHECK(receive<receipt>(bad_id).error() == ec::invalid_argument);
    CHECK(receive<chat_status>(negative).error() == ec::invalid_argument);
    CHECK(running() == before);
    CHECK(log->calls.empty());
  }

  TEST_CASE_FIXTURE(registry_fixture,
                    "inside the server an operation travels as one apply "
                    "message: the registry refuses one no batch carries, "
                    "before anything spawns") {
    auto before = running();
    auto create = self->request(registry, caf::infinite, atom::apply_v,
                                operation_on(operation_type::create, 5));
    auto beyond = self->request(registry, caf::infinite, atom::apply_v,
                                operation_on(operation_type::count_, 5));
    sched.run();
    CHECK(receive<outcome>(create).error() == ec::invalid_argument);
    CHECK(receive<outcome>(beyond).error() == ec::invalid_argument);
    CHECK(running() == before);
    CHECK(log->calls.empty());
    auto status = self->request(registry, caf::infinite, atom::apply_v,
                                operation_on(operation_type::status, 5));
    sched.run();
    auto answer = receive<outcome>(status);
    REQUIRE(answer);
    CHECK_FALSE(answer->error);
    REQUIRE(answer->status);
    CHECK(answer->status->chat == 5);
    CHECK(log->calls == std::vector<std::string>{"status 5"});
  }

  TEST_CASE_FIXTURE(registry_fixture,
                    "a chat actor stopped while Postgres works still answers "
                    "its caller within store-timeout") {
    log->hold = true;
    auto pending = status(11);
    sched.run();
    auto chat = caf::actor_cast<caf::actor>(log->last_sender);
    REQUIRE(chat);
    // While it awaits Postgres even an exit waits (CAF 0.17 handles only the
    // awaited response then); the store timeout bounds that wait.
    caf::anon_send_exit(chat, caf::exit_reason::user_shutdown);
    sched.run();
    sched.advance_time(options.store_timeout);
    sched.run();
    auto r = receive<chat_status>(pending);
    REQUIRE_FALSE(r);
    CHECK(r.error() == ec::storage_unavailable);
    auto after = status(11); // the registry noticed and spawns a new one
    log->hold = false;
    sched.run();
    CHECK(receive<chat_status>(after));
    log->owed.clear();
  }

} // TEST_SUITE

TEST_SUITE("chat") {

  TEST_CASE_FIXTURE(registry_fixture,
                    "a dead persistence actor is storage_unavailable, never "
                    "busy or silence") {
    caf::anon_send_exit(fake_actor, caf::exit_reason::kill);
    sched.run();
    auto r = status(13);
    sched.run();
    auto reply = receive<chat_status>(r);
    REQUIRE_FALSE(reply);
    CHECK(reply.error() == ec::storage_unavailable);
  }

} // TEST_SUITE
