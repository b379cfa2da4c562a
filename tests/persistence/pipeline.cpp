// SPDX-License-Identifier: Apache-2.0
// Batches in flight together (store::send, await_rows, receive: libpq's
// pipeline mode) against a real Postgres: a batch's rows count only once it
// committed, batches behind a failed one keep their answers, a lost
// connection fails everything in flight and writes nothing half.
#include "persistence/store.hpp"
#include "protocol/errors.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>
#include <pqxx/pqxx>

#include <chrono>
#include <vector>

using namespace chargeonce;
using persistence::batch_op;
using persistence::batch_operation;
using persistence::batch_result;
using persistence::store;

namespace {

chat_id make_chat(store& db) {
  auto chat = test::fresh_chat();
  REQUIRE(
    db.create_chat(chat_spec{chat, pockets{1, 0, 0}, caf::none, caf::none}));
  return chat;
}

batch_operation reserve_op(chat_id chat) {
  return {batch_op::reserve, chat, 0, kind::text, {}};
}

caf::error error_of(const batch_result& x) {
  if (auto err = std::get_if<caf::error>(&x))
    return *err;
  return caf::none;
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

} // namespace

TEST_SUITE("pipeline") {
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
