// SPDX-License-Identifier: Apache-2.0
// Batches in flight together (store::send, await_rows, receive: libpq's
// pipeline mode) against a real Postgres: a batch's rows count only once it
// committed, batches behind a failed one keep their answers, a lost
// connection fails everything in flight and writes nothing half.
#include "persistence/migrations.hpp"
#include "persistence/store.hpp"
#include "protocol/errors.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>
#include <pqxx/pqxx>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

using namespace chargeonce;
using persistence::batch_result;
using persistence::store;

namespace {

chat_id make_chat(store& db) {
  auto chat = test::fresh_chat();
  REQUIRE(
    db.create_chat(chat_spec{chat, pockets{1, 0, 0}, caf::none, caf::none}));
  return chat;
}

operation reserve_op(chat_id chat) {
  return {operation_type::reserve, chat, 0, kind::text, {}};
}

operation op_on(operation_type type, chat_id chat, reservation_id id = 0) {
  return {type, chat, id, kind::text, {}};
}

caf::error error_of(const batch_result& x) {
  if (auto err = std::get_if<caf::error>(&x))
    return *err;
  return caf::none;
}

/// "reservation", "receipt", "status", or the error's name and message.
std::string describe(const batch_result& x) {
  if (auto err = std::get_if<caf::error>(&x))
    return *err ? error_name(*err) + ": " + error_message(*err) : "no error";
  if (std::holds_alternative<reservation>(x))
    return "reservation";
  return std::holds_alternative<receipt>(x) ? "receipt" : "status";
}

long long reservations_of(chat_id chat) {
  return test::sql_int("SELECT count(*) FROM reservations WHERE chat_id = "
                       + std::to_string(chat));
}

/// A deferred constraint trigger that fails the commit of any transaction
/// that inserted a reservation of `chat`, as a serialization failure at
/// commit would; dropped again at the end of the test.
struct commit_refused {
  explicit commit_refused(chat_id chat) {
    test::sql("CREATE FUNCTION test_refuse_commit() RETURNS trigger "
              "LANGUAGE plpgsql AS $$ BEGIN IF NEW.chat_id = "
              + std::to_string(chat)
              + " THEN RAISE EXCEPTION 'commit refused by the test' USING "
                "ERRCODE = 'serialization_failure'; END IF; RETURN NULL; "
                "END $$");
    test::sql("CREATE CONSTRAINT TRIGGER test_refuse_commit AFTER INSERT ON "
              "reservations DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
              "EXECUTE FUNCTION test_refuse_commit()");
  }
  ~commit_refused() {
    test::sql("DROP TRIGGER test_refuse_commit ON reservations");
    test::sql("DROP FUNCTION test_refuse_commit()");
  }
};

/// A deferred constraint trigger that makes the commit of any transaction
/// that inserted a reservation of `chat` wait for advisory lock `key`,
/// which the test holds on a connection of its own until release().
struct commit_held {
  static constexpr int key = 424242;
  pqxx::connection holder{test::dsn()};

  explicit commit_held(chat_id chat) {
    test::sql("CREATE FUNCTION test_hold_commit() RETURNS trigger "
              "LANGUAGE plpgsql AS $$ BEGIN IF NEW.chat_id = "
              + std::to_string(chat) + " THEN PERFORM pg_advisory_xact_lock("
              + std::to_string(key)
              + "); END IF; RETURN NULL; "
                "END $$");
    test::sql("CREATE CONSTRAINT TRIGGER test_hold_commit AFTER INSERT ON "
              "reservations DEFERRABLE INITIALLY DEFERRED FOR EACH ROW "
              "EXECUTE FUNCTION test_hold_commit()");
    pqxx::nontransaction{holder}.exec("SELECT pg_advisory_lock("
                                      + std::to_string(key) + ")");
  }
  void release() {
    pqxx::nontransaction{holder}.exec("SELECT pg_advisory_unlock_all()");
  }
  ~commit_held() {
    release();
    test::sql("DROP TRIGGER test_hold_commit ON reservations");
    test::sql("DROP FUNCTION test_hold_commit()");
  }
};

/// The value of an SQL query's first field on a connection to `dsn` (a
/// scratch database; test::sql is on the test database).
long long sql_int_on(const std::string& dsn, const std::string& query) {
  pqxx::connection c{dsn};
  pqxx::nontransaction tx{c};
  return tx.exec1(query)[0].as<long long>();
}

/// Waits until no backend of database `name` is left: each has flushed its
/// statistics (sessions, function calls) when it leaves pg_stat_activity.
void await_no_backend(const std::string& name) {
  auto gone = test::wait_until(
    [&] {
      return test::sql_int("SELECT count(*) FROM pg_stat_activity WHERE "
                           "datname = "
                           + test::sql_literal(name))
             == 0;
    },
    std::chrono::seconds{60}, std::chrono::milliseconds{20});
  MESSAGE("the backends of " << name << " were gone after " << gone.ms()
                             << " ms");
  REQUIRE(gone);
}

/// Sessions ever opened on database `name`, as pg_stat_database counts
/// them.
long long sessions_of(const std::string& name) {
  return test::sql_int("SELECT sessions FROM pg_stat_database WHERE datname = "
                       + test::sql_literal(name));
}

} // namespace

TEST_SUITE("pipeline") {
  TEST_CASE("an outage is not split into single operations: 64 reserves in "
            "8 batches in flight on a read-only Postgres are all "
            "storage_unavailable, in at most 8 new connections") {
    test::scratch_database scratch{"read_only_batches"};
    REQUIRE(persistence::migrate(scratch.dsn));
    auto opts = test::store_options();
    opts.dsn = scratch.dsn;
    store db{opts};
    std::vector<chat_id> chats;
    for (int i = 0; i < 64; ++i)
      chats.push_back(make_chat(db));
    // What a standby, or a primary turned read-only, looks like to every
    // new session; the store's own session is ended.
    test::scratch_database::admin("ALTER DATABASE " + scratch.name
                                  + " SET default_transaction_read_only = on");
    test::sql("SELECT pg_terminate_backend(" + std::to_string(db.backend_pid())
              + ")");
    await_no_backend(scratch.name);
    auto before = sessions_of(scratch.name);
    for (size_t first = 0; first < chats.size(); first += 8) {
      std::vector<operation> batch;
      for (size_t i = first; i < first + 8; ++i)
        batch.push_back(reserve_op(chats[i]));
      db.send(batch);
    }
    int unavailable = 0;
    while (db.batches_in_flight() > 0)
      for (const auto& x : db.receive())
        unavailable += error_of(x) == ec::storage_unavailable ? 1 : 0;
    CHECK(unavailable == 64);
    await_no_backend(scratch.name);
    auto opened = sessions_of(scratch.name) - before;
    MESSAGE("new connections for 64 reserves in 8 batches: " << opened);
    CHECK(opened >= 1);
    CHECK(opened <= 8);
    CHECK(sql_int_on(scratch.dsn, "SELECT count(*) FROM reservations") == 0);
  }

  TEST_CASE("a committed batch is never run again: an answer that names a "
            "pocket this process cannot look up fails alone, the batch "
            "statement ran once, and every other answer says what "
            "happened") {
    test::scratch_database scratch{"unknown_pocket"};
    REQUIRE(persistence::migrate(scratch.dsn));
    // Counts the calls of the batch function (pg_stat_user_functions).
    test::scratch_database::admin("ALTER DATABASE " + scratch.name
                                  + " SET track_functions = 'pl'");
    auto opts = test::store_options();
    opts.dsn = scratch.dsn;
    chat_id unknown = 0;
    chat_id fresh = 0;
    chat_id started = 0;
    reservation_id job = 0;
    {
      store setup{opts};
      unknown = make_chat(setup);
      fresh = make_chat(setup);
      started = make_chat(setup);
      auto r = setup.reserve(started, kind::text, "");
      REQUIRE(r);
      job = r->id;
    }
    await_no_backend(scratch.name);
    auto calls = [&] {
      return sql_int_on(scratch.dsn, "SELECT coalesce(sum(calls), 0) FROM "
                                     "pg_stat_user_functions WHERE funcname = "
                                     "'chargeonce_apply_batch'");
    };
    auto calls_before = calls();
    store db{opts};
    REQUIRE(db.status(fresh)); // connected, its pocket ordinals read
    // Another server registers a pocket and gives the chat some of it.
    scratch.exec("INSERT INTO catalog_pockets (pocket, ordinal) VALUES "
                 "('voice_minutes', 4)");
    scratch.exec("UPDATE chats SET pockets[4] = 5 WHERE chat_id = "
                 + std::to_string(unknown));
    // Looking the ordinal up fails (SQLSTATE 55P03) after the sync point.
    test::scratch_database::admin("ALTER DATABASE " + scratch.name
                                  + " SET lock_timeout = '100ms'");
    std::vector<batch_result> out;
    {
      pqxx::connection locker_conn{scratch.dsn};
      pqxx::work locker{locker_conn};
      locker.exec("LOCK TABLE catalog_pockets IN ACCESS EXCLUSIVE MODE");
      out = db.apply({reserve_op(fresh), op_on(operation_type::status, unknown),
                      op_on(operation_type::fail, started, job)});
    }
    REQUIRE(out.size() == 3);
    CHECK(describe(out[0]) == "reservation");
    CHECK(error_of(out[1]) == ec::storage_unavailable);
    CHECK(error_message(error_of(out[1])).find("took effect")
          != std::string::npos);
    CHECK(describe(out[2]) == "reservation");
    auto held_in_scratch = [&](chat_id chat) {
      return sql_int_on(scratch.dsn,
                        "SELECT count(*) FROM reservations WHERE chat_id = "
                          + std::to_string(chat));
    };
    CHECK(held_in_scratch(fresh) == 1);
    CHECK(held_in_scratch(started) == 0);
    auto pid = db.backend_pid();
    CHECK(pid > 0); // the connection was kept: nothing failed on it
    test::sql("SELECT pg_terminate_backend(" + std::to_string(pid) + ")");
    await_no_backend(scratch.name);
    CHECK(calls() - calls_before == 2); // the status above, and the batch
  }

  TEST_CASE("two batches in flight are answered in order, each from its own "
            "statement, and both commit") {
    store db{test::store_options()};
    for (int round = 0; round < 20; ++round) {
      auto a = make_chat(db);
      auto b = make_chat(db);
      db.send({reserve_op(a)});
      db.await_rows();
      db.send({reserve_op(b), reserve_op(a)});
      CHECK(db.batches_in_flight() == 2);
      auto first = db.receive();
      auto second = db.receive();
      CHECK(db.batches_in_flight() == 0);
      REQUIRE(first.size() == 1);
      REQUIRE(second.size() == 2);
      CHECK(std::get<reservation>(first[0]).chat == a);
      CHECK(std::get<reservation>(second[0]).chat == b);
      // The first batch committed before the second ran: a is busy.
      CHECK(error_of(second[1]) == ec::busy);
      CHECK(reservations_of(a) == 1);
      CHECK(reservations_of(b) == 1);
    }
    // Out of pipeline mode again: a transaction of libpqxx runs.
    CHECK(db.status(make_chat(db)));
  }

  TEST_CASE("rows come before the commit only when asked for: without early "
            "rows, await_rows returns once the batch committed") {
    store db{test::store_options()};
    for (bool early : {true, false}) {
      CAPTURE(early);
      auto chat = make_chat(db);
      commit_held held{chat};
      db.send({reserve_op(chat)}, early);
      std::atomic<bool> rows_in{false};
      std::thread waiter{[&] {
        db.await_rows();
        rows_in = true;
      }};
      if (early) {
        // The statement ran: its rows come while the commit waits.
        auto in = test::wait_until([&] { return rows_in.load(); },
                                   std::chrono::seconds{30});
        MESSAGE("early rows were in after " << in.ms() << " ms");
        CHECK(in);
      } else {
        // Generous: were the rows sent before the commit, they would be
        // in within milliseconds.
        std::this_thread::sleep_for(std::chrono::milliseconds{500});
        CHECK_FALSE(rows_in.load());
      }
      CHECK(reservations_of(chat) == 0); // the commit still waits
      held.release();
      waiter.join();
      auto answers = db.receive();
      REQUIRE(answers.size() == 1);
      CHECK(std::get<reservation>(answers[0]).chat == chat);
      CHECK(reservations_of(chat) == 1);
    }
  }

  TEST_CASE("a batch's rows do not count when its commit fails: the batch "
            "is retried one by one and only the refused operation fails") {
    store db{test::store_options()};
    auto refused = make_chat(db);
    auto fine = make_chat(db);
    auto behind = make_chat(db);
    commit_refused guard{refused};
    db.send({reserve_op(fine), reserve_op(refused)});
    db.await_rows(); // the statement ran; its commit fails at the sync point
    db.send({reserve_op(behind)});
    auto out = db.receive();
    auto next = db.receive();
    REQUIRE(out.size() == 2);
    CHECK_FALSE(error_of(out[0]));
    CHECK(error_of(out[1]) == ec::storage_unavailable);
    CHECK_FALSE(error_of(next[0]));
    CHECK(reservations_of(fine) == 1);
    CHECK(reservations_of(refused) == 0);
    CHECK(reservations_of(behind) == 1);
  }

  TEST_CASE("a batch stuck behind a lock times out with another behind it: "
            "the one behind keeps its answer, the stuck one is split") {
    auto opts = test::store_options();
    opts.statement_timeout = std::chrono::milliseconds{300};
    store db{opts};
    auto locked = make_chat(db);
    auto free_a = make_chat(db);
    auto free_b = make_chat(db);
    pqxx::connection blocker_conn{test::dsn()};
    pqxx::work blocker{blocker_conn};
    blocker.exec("SELECT 1 FROM chats WHERE chat_id = " + std::to_string(locked)
                 + " FOR UPDATE");
    db.send({reserve_op(free_a), reserve_op(locked)});
    db.send({reserve_op(free_b)});
    auto out = db.receive();
    auto next = db.receive();
    blocker.abort();
    CHECK_FALSE(error_of(out[0]));
    CHECK(error_of(out[1]) == ec::storage_unavailable);
    CHECK_FALSE(error_of(next[0]));
    CHECK(reservations_of(locked) == 0);
    CHECK(reservations_of(free_a) == 1);
    CHECK(reservations_of(free_b) == 1);
  }

  TEST_CASE("a batch that fails on its own with another behind it: the "
            "connection is dropped only after the one behind was answered") {
    auto opts = test::store_options();
    opts.statement_timeout = std::chrono::milliseconds{300};
    store db{opts};
    auto locked = make_chat(db);
    auto behind = make_chat(db);
    pqxx::connection blocker_conn{test::dsn()};
    pqxx::work blocker{blocker_conn};
    blocker.exec("SELECT 1 FROM chats WHERE chat_id = " + std::to_string(locked)
                 + " FOR UPDATE");
    db.send({reserve_op(locked)});
    db.send({reserve_op(behind)});
    auto out = db.receive();
    auto next = db.receive();
    blocker.abort();
    CHECK(error_of(out[0]) == ec::storage_unavailable);
    CHECK_FALSE(error_of(next[0]));
    CHECK(reservations_of(locked) == 0);
    CHECK(reservations_of(behind) == 1);
  }

  TEST_CASE("a backend terminated with two batches in flight: both are "
            "storage_unavailable, neither is written, the next reconnects") {
    store db{test::store_options()};
    for (int round = 0; round < 3; ++round) {
      auto locked = make_chat(db);
      auto other = make_chat(db);
      auto pid = db.backend_pid();
      REQUIRE(pid > 0);
      pqxx::connection blocker_conn{test::dsn()};
      pqxx::work blocker{blocker_conn};
      blocker.exec("SELECT 1 FROM chats WHERE chat_id = "
                   + std::to_string(locked) + " FOR UPDATE");
      db.send({reserve_op(locked)});
      db.send({reserve_op(other)});
      auto waiting = test::await_lock_wait("pid = " + std::to_string(pid));
      MESSAGE("the backend waited for the row lock after " << waiting.ms()
                                                           << " ms");
      REQUIRE(waiting);
      test::sql("SELECT pg_terminate_backend(" + std::to_string(pid) + ")");
      auto first = db.receive();
      auto second = db.receive();
      CHECK(error_of(first[0]) == ec::storage_unavailable);
      CHECK(error_of(second[0]) == ec::storage_unavailable);
      blocker.abort();
      CHECK(reservations_of(locked) == 0);
      CHECK(reservations_of(other) == 0);
      auto again = db.apply({reserve_op(other)});
      CHECK_FALSE(error_of(again[0]));
    }
  }
}
