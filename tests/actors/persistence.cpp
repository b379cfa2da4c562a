// SPDX-License-Identifier: Apache-2.0
// The persistence actor over a real Postgres: operations of different chats
// that arrive together share one transaction (group commit), each is
// answered on its own, a full queue answers `overloaded` at once, and a
// caller waits for Postgres at most store-timeout.
#include "actors/metrics/rendering.hpp"
#include "actors/persistence_actor.hpp"
#include "persistence/migrations.hpp"
#include "protocol/errors.hpp"
#include "tests/actors/metrics/exposition.hpp"
#include "tests/support/test_db.hpp"
#include "tests/support/threaded_server.hpp"
#include "tests/support/wait.hpp"

#include <caf/all.hpp>
#include <doctest/doctest.h>
#include <pqxx/pqxx>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace chargeonce;
using namespace std::chrono_literals;

namespace {

/// The value an outcome of type T carries.
caf::optional<reservation>& value_in(outcome& x, const reservation*) {
  return x.reservation;
}

caf::optional<chat_status>& value_in(outcome& x, const chat_status*) {
  return x.status;
}

/// A request of an operation, received as the value or the error its
/// outcome carries (as a facade answers it).
template <class T, class Handle>
struct asked {
  Handle handle;

  template <class OnValue, class OnError>
  void receive(OnValue on_value, OnError on_error) {
    handle.receive(
      [&](outcome& x) {
        if (x.error)
          return on_error(x.error);
        auto& value = value_in(x, static_cast<const T*>(nullptr));
        REQUIRE(value);
        on_value(*value);
      },
      [&](caf::error& err) { on_error(err); });
  }
};

template <class T>
auto ask(caf::scoped_actor& self, const persistence_actor& db, operation op) {
  auto handle = self->request(db, 20s, atom::apply_v, std::move(op));
  return asked<T, decltype(handle)>{std::move(handle)};
}

operation reserve_of(chat_id chat) {
  return operation_on(operation_type::reserve, chat);
}

struct fixture {
  test::threaded_config cfg;
  caf::actor_system sys{cfg};
  persistence::store setup{test::store_options()};

  persistence_actor spawn(persistence_limits limits = {}) {
    return make_persistence_factory(sys, test::store_options(), limits)();
  }

  std::vector<chat_id> make_chats(int n) {
    std::vector<chat_id> out;
    for (int i = 0; i < n; ++i) {
      out.push_back(test::fresh_chat());
      REQUIRE(setup.create_chat({out.back(), {1, 0, 0}, caf::none, caf::none}));
    }
    return out;
  }

  /// A reserve of `chat` through the actor, answered within 20 s.
  static auto reserve(caf::scoped_actor& self, const persistence_actor& db,
                      chat_id chat) {
    return ask<reservation>(self, db, reserve_of(chat));
  }

  int64_t reservations_of(const std::vector<chat_id>& chats) {
    return test::sql_int("SELECT count(*) FROM reservations WHERE chat_id IN "
                         + in_list(chats));
  }

  /// Waits for `chat`'s reservation (a transaction that was stuck on a row
  /// lock commits: milliseconds; 60 s means it never will); how many it has
  /// then.
  int64_t await_reservation(chat_id chat) {
    auto w = test::wait_until([&] { return reservations_of({chat}) > 0; }, 60s);
    MESSAGE("reservation of chat " << chat << " after " << w.ms() << " ms");
    return reservations_of({chat});
  }

  /// Waits until the actor holds `n` operations that wait for Postgres
  /// (queued or staged for the connection's next batch): what the test sent
  /// it has arrived. The process' only persistence actor is the test's.
  static void await_depth(int64_t n) {
    auto w = test::wait_until(
      [&] {
        return test::value_of(metrics::render(),
                              "chargeonce_persistence_queue_depth")
               == static_cast<double>(n);
      },
      60s, 1ms);
    REQUIRE_MESSAGE(w,
                    "the persistence actor never held " << n << " operations");
    MESSAGE(n << " operations waiting in the actor after " << w.ms() << " ms");
  }

  static std::string in_list(const std::vector<chat_id>& chats) {
    std::string out;
    for (auto chat : chats)
      out += (out.empty() ? "" : ",") + std::to_string(chat);
    return "(" + out + ")";
  }

  /// Holds `chat`'s row lock, so the actor's current batch waits on it while
  /// the test queues more operations behind it.
  struct row_lock {
    pqxx::connection conn{test::dsn()};
    pqxx::work tx{conn};
    explicit row_lock(chat_id chat) {
      tx.exec("SELECT 1 FROM chats WHERE chat_id = " + std::to_string(chat)
              + " FOR UPDATE");
    }
  };

  /// Waits until some backend waits for a lock: the actor is stuck.
  static void wait_for_lock_waiter() {
    auto w = test::await_lock_wait("true");
    if (!w)
      FAIL("the persistence actor never waited for the row lock");
    MESSAGE("a backend waited for the row lock after " << w.ms() << " ms");
  }
};

/// Occupies every scheduler thread of `sys` with a spinning actor until
/// released. The spinners share nothing with the test's stack frame (their
/// flags are held by a shared_ptr), and the destructor releases them and
/// waits until they are gone: on every way out of a test, a failed REQUIRE
/// included, no spinner outlives what it reads or keeps a thread busy.
class scheduler_hog {
public:
  explicit scheduler_hog(caf::actor_system& sys) : sys_(sys) {
    auto workers = sys.scheduler().num_workers();
    for (size_t i = 0; i < workers; ++i)
      spinners_.push_back(sys.spawn([flags = flags_] {
        ++flags->occupied;
        while (!flags->release)
          std::this_thread::sleep_for(1ms);
      }));
    while (flags_->occupied < workers)
      std::this_thread::sleep_for(1ms);
  }

  scheduler_hog(const scheduler_hog&) = delete;
  scheduler_hog& operator=(const scheduler_hog&) = delete;

  ~scheduler_hog() {
    release();
    caf::scoped_actor self{sys_};
    self->wait_for(spinners_);
  }

  void release() { flags_->release = true; }

private:
  struct flags {
    std::atomic<size_t> occupied{0};
    std::atomic<bool> release{false};
  };
  caf::actor_system& sys_;
  std::shared_ptr<flags> flags_ = std::make_shared<flags>();
  std::vector<caf::actor> spinners_;
};

/// Stops an actor on every way out of a test: one still running keeps
/// ~actor_system, and with it the suite, waiting forever.
class stopped_on_exit {
public:
  explicit stopped_on_exit(persistence_actor handle)
      : handle_(std::move(handle)) {}
  stopped_on_exit(const stopped_on_exit&) = delete;
  stopped_on_exit& operator=(const stopped_on_exit&) = delete;
  ~stopped_on_exit() {
    caf::anon_send_exit(handle_, caf::exit_reason::user_shutdown);
  }

private:
  persistence_actor handle_;
};

} // namespace

TEST_SUITE("actors.persistence") {

  TEST_CASE_FIXTURE(fixture, "operations that arrive together commit in one "
                             "transaction and are each answered") {
    auto db = spawn();
    auto chats = make_chats(101);
    auto blocker_chat = chats.back();
    chats.pop_back();
    caf::scoped_actor self{sys};
    auto lock = std::make_unique<row_lock>(blocker_chat);
    self->send(db, atom::apply_v, reserve_of(blocker_chat));
    wait_for_lock_waiter();
    for (auto chat : chats)
      self->send(db, atom::apply_v, reserve_of(chat));
    // All staged before the stuck batch ends: the connection takes what is
    // staged when it finishes, so a late arrival would be a second batch.
    await_depth(100);
    lock.reset(); // the stuck batch ends; the 100 staged ones go together
    int answered = 0;
    self->receive_for(answered, 101)(
      [](outcome& x) {
        if (x.error)
          FAIL("unexpected error: ", error_name(x.error));
        CHECK(x.reservation);
      },
      [](caf::error& err) { FAIL("unexpected error: ", error_name(err)); });
    CHECK(answered == 101);
    // xmin is the inserting transaction: one for all 100 reservations.
    CHECK(test::sql_int("SELECT count(DISTINCT xmin::text) FROM reservations "
                        "WHERE chat_id IN "
                        + in_list(chats))
          == 1);
    CHECK(reservations_of(chats) == 100);
    caf::anon_send_exit(db, caf::exit_reason::user_shutdown);
  }

  TEST_CASE_FIXTURE(fixture, "operations staged while the connection works "
                             "run next; one that runs alone keeps its place "
                             "behind them and ahead of later ones") {
    for (int round = 0; round < 5; ++round) {
      auto db = spawn();
      auto chats = make_chats(4); // stuck, staged, staged, behind
      auto created = test::fresh_chat();
      caf::scoped_actor self{sys};
      auto lock = std::make_unique<row_lock>(chats[0]);
      auto stuck = reserve(self, db, chats[0]);
      wait_for_lock_waiter();
      auto first = reserve(self, db, chats[1]);
      auto second = reserve(self, db, chats[2]);
      auto alone =
        self->request(db, 20s, atom::create_v,
                      chat_spec{created, {1, 0, 0}, caf::none, caf::none});
      auto behind = reserve(self, db, chats[3]);
      await_depth(4); // two staged, the one alone and the one behind queued
      lock.reset();
      for (auto* handle : {&stuck, &first, &second, &behind})
        handle->receive([](reservation&) {},
                        [](caf::error& err) { FAIL(error_name(err)); });
      alone.receive([](chat_status&) {},
                    [](caf::error& err) { FAIL(error_name(err)); });
      // xmin is the writing transaction; xids grow in the order the
      // transactions began.
      auto xid = [](const std::string& table, chat_id chat) {
        return test::sql_int("SELECT xmin::text::bigint FROM " + table
                             + " WHERE chat_id = " + std::to_string(chat));
      };
      CHECK(xid("reservations", chats[1]) == xid("reservations", chats[2]));
      CHECK(xid("reservations", chats[0]) < xid("reservations", chats[1]));
      CHECK(xid("reservations", chats[2]) < xid("chats", created));
      CHECK(xid("chats", created) < xid("reservations", chats[3]));
      caf::anon_send_exit(db, caf::exit_reason::user_shutdown);
    }
  }

  TEST_CASE_FIXTURE(fixture, "a busy operation in a shared batch fails "
                             "alone; one chat's operations keep their order") {
    auto db = spawn();
    auto chats = make_chats(3);
    REQUIRE(setup.reserve(chats[1], kind::text, ""));
    caf::scoped_actor self{sys};
    auto lock = std::make_unique<row_lock>(chats[2]);
    auto stuck = reserve(self, db, chats[2]);
    wait_for_lock_waiter();
    auto fresh = reserve(self, db, chats[0]);
    auto busy = reserve(self, db, chats[1]);
    auto seen = ask<chat_status>(
      self, db, operation_on(operation_type::status, chats[0]));
    lock.reset();
    auto expect_ok = [](auto& handle) {
      handle.receive([](reservation&) {},
                     [](caf::error& err) { FAIL(error_name(err)); });
    };
    expect_ok(stuck);
    expect_ok(fresh);
    busy.receive([](reservation&) { FAIL("a second reservation"); },
                 [](caf::error& err) { CHECK(err == ec::busy); });
    seen.receive([](chat_status& st) { CHECK(st.active); },
                 [](caf::error& err) { FAIL(error_name(err)); });
    caf::anon_send_exit(db, caf::exit_reason::user_shutdown);
  }

  TEST_CASE_FIXTURE(fixture, "a full queue answers overloaded at once and "
                             "writes nothing for those operations") {
    persistence_limits limits;
    limits.queue_operations_max = 10;
    auto db = spawn(limits);
    auto chats = make_chats(31);
    auto blocker_chat = chats.back();
    chats.pop_back();
    caf::scoped_actor self{sys};
    auto lock = std::make_unique<row_lock>(blocker_chat);
    self->send(db, atom::apply_v, reserve_of(blocker_chat));
    wait_for_lock_waiter();
    std::vector<chat_id> refused;
    std::vector<std::pair<chat_id, decltype(reserve(self, db, chat_id{}))>>
      pending;
    for (auto chat : chats)
      pending.emplace_back(chat, reserve(self, db, chat));
    lock.reset();
    int ok = 0;
    for (auto& [chat, handle] : pending)
      handle.receive([&](reservation&) { ++ok; },
                     [&, chat = chat](caf::error& err) {
                       CHECK(err == ec::overloaded);
                       refused.push_back(chat);
                     });
    CHECK(ok == 10);
    CHECK(refused.size() == 20);
    CHECK(reservations_of(refused) == 0);
    caf::anon_send_exit(db, caf::exit_reason::user_shutdown);
  }

  TEST_CASE_FIXTURE(fixture, "Postgres not answering within store-timeout is "
                             "storage_unavailable; what waited behind it is "
                             "not written and later operations go ahead") {
    persistence_limits limits;
    limits.store_timeout = 300ms;
    auto db = spawn(limits);
    auto chats = make_chats(4);
    std::vector<chat_id> behind{chats[1], chats[2]};
    caf::scoped_actor self{sys};
    auto lock = std::make_unique<row_lock>(chats[0]);
    auto t0 = std::chrono::steady_clock::now();
    auto stuck = reserve(self, db, chats[0]);
    wait_for_lock_waiter();
    std::vector<decltype(stuck)> waiting;
    for (auto chat : behind)
      waiting.push_back(reserve(self, db, chat));
    // The store-timeout's own answer: not the row lock's end (held until
    // after the answers) nor statement_timeout cancelling the statement.
    auto expect_timed_out = [](auto& handle) {
      handle.receive(
        [](reservation&) { FAIL("Postgres answered"); },
        [](caf::error& err) {
          CHECK(err == ec::storage_unavailable);
          CHECK(error_message(err).find("Postgres did not answer in time")
                != std::string::npos);
        });
    };
    expect_timed_out(stuck);
    for (auto& handle : waiting)
      expect_timed_out(handle);
    MESSAGE("answered after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now() - t0)
                 .count()
            << " ms (store-timeout 300 ms)");
    CHECK(reservations_of(behind) == 0);
    lock.reset();
    // The stuck transaction was not cancelled: it may still commit.
    CHECK(await_reservation(chats[0]) == 1);
    reserve(self, db, chats[3])
      .receive([](reservation&) {},
               [](caf::error& err) { FAIL(error_name(err)); });
    CHECK(reservations_of(behind) == 0);
    caf::anon_send_exit(db, caf::exit_reason::user_shutdown);
  }

  TEST_CASE_FIXTURE(fixture, "an operation the connection took as its next "
                             "batch, past store-timeout, is answered 'may "
                             "still commit', never 'nothing was written'") {
    // The window: the connection finished a batch and took the staged
    // operation, but the persistence actor has not handled its `done` when
    // the deadline passes. Occupying every scheduler thread holds the
    // actor there: its expire message is queued before that `done`.
    persistence_limits limits;
    // The hog must be in place before the staged operation's deadline:
    // milliseconds after it was staged on a quiet machine.
    limits.store_timeout = 1s;
    auto db = spawn(limits);
    stopped_on_exit db_stopped{db};
    auto chats = make_chats(2); // stuck, taken
    caf::scoped_actor self{sys};
    auto first_lock = std::make_unique<row_lock>(chats[0]);
    auto second_lock = std::make_unique<row_lock>(chats[1]);
    auto stuck = reserve(self, db, chats[0]);
    wait_for_lock_waiter();
    auto t_taken = std::chrono::steady_clock::now();
    auto taken = reserve(self, db, chats[1]);
    await_depth(1); // the actor staged it
    // Every scheduler thread, or the actor handles `done` first and this
    // passes without reaching the window.
    scheduler_hog hog{sys};
    MESSAGE("scheduler held "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now() - t_taken)
                 .count()
            << " ms after the reserve was sent (store-timeout 1 s)");
    // Past both deadlines, and the actor's expire message is in its mailbox
    // before the connection's `done` can be: the clock thread delivers in
    // the order of due times, and this tick is due after both deadlines.
    caf::scoped_actor timer{sys};
    timer->delayed_send(timer, limits.store_timeout, caf::tick_atom_v);
    timer->receive([](caf::tick_atom) {},
                   caf::after(std::chrono::seconds(60)) >>
                     [] { FAIL("the actor clock never delivered"); });
    first_lock.reset();
    // The first batch commits; the connection takes the staged reserve and
    // waits for the second lock.
    REQUIRE(await_reservation(chats[0]) == 1);
    wait_for_lock_waiter();
    hog.release();
    auto may_still_commit = [](auto& handle) {
      handle.receive(
        [](reservation&) { FAIL("answered after its store-timeout"); },
        [](caf::error& err) {
          CHECK(err == ec::storage_unavailable);
          CHECK(error_message(err).find("it may still commit")
                != std::string::npos);
        });
    };
    may_still_commit(stuck);
    may_still_commit(taken);
    second_lock.reset();
    // It did commit: "nothing was written" would have been a lie.
    CHECK(await_reservation(chats[1]) == 1);
  }

  TEST_CASE_FIXTURE(fixture, "a persistence actor stopped while Postgres "
                             "works answers every caller at once") {
    auto db = spawn();
    auto chats = make_chats(2);
    caf::scoped_actor self{sys};
    auto lock = std::make_unique<row_lock>(chats[0]);
    auto stuck = reserve(self, db, chats[0]);
    wait_for_lock_waiter();
    auto queued = reserve(self, db, chats[1]);
    auto t0 = std::chrono::steady_clock::now();
    caf::anon_send_exit(db, caf::exit_reason::user_shutdown);
    // Answered by the stop itself: not after the row lock (held to the
    // end) nor by the store-timeout, whose answer says so.
    for (auto* handle : {&stuck, &queued})
      handle->receive([](reservation&) { FAIL("Postgres answered"); },
                      [](caf::error& err) {
                        CHECK(err == ec::storage_unavailable);
                        CHECK(
                          error_message(err).find("persistence actor stopped")
                          != std::string::npos);
                      });
    MESSAGE(
      "answered " << std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now() - t0)
                       .count()
                  << " ms after the stop");
    CHECK(reservations_of({chats[1]}) == 0);
  }

  TEST_CASE_FIXTURE(fixture,
                    "after Postgres went away, the actor probes on its own "
                    "until it is back: it reconnects, the gauge of "
                    "connections without a primary returns to 0, and time "
                    "without a primary is counted once") {
    test::scratch_database scratch{"probe"};
    REQUIRE(persistence::migrate(scratch.dsn));
    auto opts = test::store_options();
    opts.dsn = scratch.dsn;
    auto db = make_persistence_factory(sys, opts, {})();
    stopped_on_exit stop{db};
    caf::scoped_actor self{sys};
    auto chat = test::fresh_chat();
    auto touch = [&] {
      caf::expected<chat_status> out{caf::sec::none};
      ask<chat_status>(self, db, operation_on(operation_type::touch, chat))
        .receive([&](chat_status& x) { out = std::move(x); },
                 [&](caf::error& err) { out = err; });
      return out;
    };
    auto metric = [](const char* name) {
      return test::value_of(metrics::render(), name);
    };
    REQUIRE(touch());
    auto reconnects = metric("chargeonce_persistence_reconnects_total");
    auto t_before = std::chrono::steady_clock::now();
    auto seconds = metric("chargeonce_storage_unavailable_seconds_total");
    // Gone: new connections refused, the session killed.
    test::scratch_database::admin("ALTER DATABASE " + scratch.name
                                  + " ALLOW_CONNECTIONS false");
    test::scratch_database::admin(
      "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname "
      "= '"
      + scratch.name + "'");
    auto refused = touch();
    REQUIRE_FALSE(refused);
    CHECK(refused.error() == ec::storage_unavailable);
    CHECK(metric("chargeonce_storage_unavailable") == 1);
    // Probes fail meanwhile: a slow machine only probes less often.
    std::this_thread::sleep_for(1s);
    CHECK(metric("chargeonce_storage_unavailable") == 1);
    test::scratch_database::admin("ALTER DATABASE " + scratch.name
                                  + " ALLOW_CONNECTIONS true");
    // No client operation: the probe finds it (its wait is at most 5 s).
    auto back = test::wait_until(
      [&] { return metric("chargeonce_storage_unavailable") == 0; }, 60s);
    MESSAGE("the probe reconnected " << back.ms()
                                     << " ms after Postgres was back");
    CHECK(back);
    CHECK(metric("chargeonce_persistence_reconnects_total") == reconnects + 1);
    auto spell =
      metric("chargeonce_storage_unavailable_seconds_total") - seconds;
    std::chrono::duration<double> window =
      std::chrono::steady_clock::now() - t_before;
    MESSAGE("time without a primary " << spell << " s, within "
                                      << window.count() << " s watched");
    CHECK(spell >= 1.0);
    // Once: no more than the time the test watched it (counted twice, the
    // spell would be about twice as long).
    CHECK(spell <= window.count() + 1e-6);
    CHECK(touch());
  }
}
