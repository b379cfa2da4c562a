// SPDX-License-Identifier: Apache-2.0
// References to chats (the triggers of 001_schema.sql): every writer outside
// the batch function is checked as a foreign key would check it, with the
// same SQLSTATE and constraint names; the batch function, which skips the
// per-row check, never writes a row for a chat that does not exist.
#include "persistence/pocket_ordinals.hpp"
#include "persistence/store.hpp"
#include "protocol/errors.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>
#include <pqxx/pqxx>

#include <algorithm>
#include <chrono>
#include <future>
#include <string>

using namespace chargeonce;
using namespace std::chrono_literals;
using persistence::store;

namespace {

std::string str(chat_id chat) {
  return std::to_string(chat);
}

/// A chat nothing references yet: inserted directly, since create_chat
/// opens the chat's ledger with a row (and a chat with ledger rows cannot
/// be deleted or renumbered).
chat_id make_chat() {
  auto chat = test::fresh_chat();
  test::sql("INSERT INTO chats (chat_id, pockets) VALUES (" + str(chat)
            + ", chargeonce_pockets('{\"daily_images\": 3, \"balance\": 3}'))");
  return chat;
}

/// Runs `statement` on its own connection; the SQLSTATE and constraint of
/// the error it raised ("" when it succeeded).
struct sql_outcome {
  std::string sqlstate;
  std::string message;
};

sql_outcome try_sql(const std::string& statement) {
  try {
    test::sql(statement);
    return {};
  } catch (const pqxx::sql_error& e) {
    return {e.sqlstate(), e.what()};
  }
}

std::string insert_reservation(chat_id chat) {
  return "INSERT INTO reservations (chat_id, kind, queue, held) VALUES ("
         + str(chat) + ", 'image', 'image_generation', '{NULL,1}')";
}

std::string insert_ledger_row(chat_id chat, int64_t reservation) {
  return "INSERT INTO ledger (reservation_id, chat_id, kind, charged) VALUES ("
         + std::to_string(reservation) + ", " + str(chat)
         + ", 'image', '{NULL,1}')";
}

long long count(const std::string& table, chat_id chat) {
  return test::sql_int("SELECT count(*) FROM " + table
                       + " WHERE chat_id = " + str(chat));
}

/// A committed cycle: the chat gets a ledger row.
void charge_once(store& db, chat_id chat) {
  auto r = db.reserve(chat, kind::image, {});
  REQUIRE(r);
  REQUIRE(db.start(chat, r->id));
  REQUIRE(db.commit(chat, r->id));
}

} // namespace

TEST_SUITE("references") {
  TEST_CASE("a reservation or ledger row naming an unknown chat is refused "
            "with foreign_key_violation, nothing written") {
    auto unknown = test::fresh_chat();
    auto r = try_sql(insert_reservation(unknown));
    CHECK(r.sqlstate == "23503");
    CHECK(r.message.find("reservations_chat_id_fkey") != std::string::npos);
    auto l = try_sql(insert_ledger_row(unknown, 1'000'000'000 + unknown));
    CHECK(l.sqlstate == "23503");
    CHECK(l.message.find("ledger_chat_id_fkey") != std::string::npos);
    CHECK(count("reservations", unknown) == 0);
    CHECK(count("ledger", unknown) == 0);
  }

  TEST_CASE("moving a reservation or ledger row to an unknown chat is "
            "refused; to a known one it is allowed") {
    store db{test::store_options()};
    auto chat = make_chat();
    auto other = make_chat();
    charge_once(db, chat);
    REQUIRE(db.reserve(chat, kind::image, {}));
    auto unknown = test::fresh_chat();
    for (auto table : {"reservations", "ledger"}) {
      CAPTURE(table);
      auto moved = try_sql(std::string{"UPDATE "} + table + " SET chat_id = "
                           + str(unknown) + " WHERE chat_id = " + str(chat));
      CHECK(moved.sqlstate == "23503");
      CHECK(count(table, chat) == 1);
      CHECK(try_sql(std::string{"UPDATE "} + table + " SET chat_id = "
                    + str(other) + " WHERE chat_id = " + str(chat))
              .sqlstate.empty());
      CHECK(count(table, other) == 1);
    }
  }

  TEST_CASE("deleting a chat deletes its reservation; a chat with ledger "
            "rows cannot be deleted") {
    store db{test::store_options()};
    auto reserved = make_chat();
    REQUIRE(db.reserve(reserved, kind::image, {}));
    auto charged = make_chat();
    charge_once(db, charged);
    CHECK(try_sql("DELETE FROM chats WHERE chat_id = " + str(reserved))
            .sqlstate.empty());
    CHECK(count("reservations", reserved) == 0);
    CHECK(count("chats", reserved) == 0);
    // One statement for both: the refusal rolls back the whole delete.
    auto both = try_sql("DELETE FROM chats WHERE chat_id IN (" + str(charged)
                        + ", " + str(make_chat()) + ")");
    CHECK(both.sqlstate == "23503");
    CHECK(both.message.find("ledger_chat_id_fkey") != std::string::npos);
    CHECK(count("chats", charged) == 1);
    CHECK(count("ledger", charged) == 1);
  }

  TEST_CASE("a referenced chat's id cannot change; an unreferenced one can") {
    store db{test::store_options()};
    auto reserved = make_chat();
    REQUIRE(db.reserve(reserved, kind::image, {}));
    auto charged = make_chat();
    charge_once(db, charged);
    for (auto chat : {reserved, charged}) {
      auto moved =
        try_sql("UPDATE chats SET chat_id = " + str(test::fresh_chat())
                + " WHERE chat_id = " + str(chat));
      CHECK(moved.sqlstate == "23503");
      CHECK(count("chats", chat) == 1);
    }
    auto free_chat = make_chat();
    auto renamed = test::fresh_chat();
    CHECK(try_sql("UPDATE chats SET chat_id = " + str(renamed)
                  + " WHERE chat_id = " + str(free_chat))
            .sqlstate.empty());
    CHECK(count("chats", renamed) == 1);
  }

  TEST_CASE("TRUNCATE chats is refused while reservations or ledger hold "
            "rows") {
    store db{test::store_options()};
    charge_once(db, make_chat());
    auto before = test::sql_int("SELECT count(*) FROM chats");
    auto truncated = try_sql("TRUNCATE chats");
    CHECK(truncated.sqlstate == "23503");
    CHECK(test::sql_int("SELECT count(*) FROM chats") == before);
  }

  TEST_CASE("the batch function's exemption from the row check ends with "
            "it, and a batch never writes for an unknown chat") {
    store db{test::store_options()};
    auto chat = make_chat();
    auto unknown = test::fresh_chat();
    auto results =
      db.apply({{operation_type::reserve, chat, 0, kind::image, {}},
                {operation_type::reserve, unknown, 0, kind::image, {}}});
    REQUIRE(results.size() == 2);
    CHECK(std::holds_alternative<reservation>(results[0]));
    auto err = std::get_if<caf::error>(&results[1]);
    REQUIRE(err != nullptr);
    CHECK(*err == ec::not_found);
    CHECK(count("reservations", unknown) == 0);
    // Same session as the batch: a plain INSERT afterwards is checked.
    pqxx::connection conn{test::dsn()};
    pqxx::nontransaction tx{conn};
    tx.exec(
      "SELECT count(*) FROM chargeonce_apply_batch('{reserve}', '{"
      + str(make_chat())
      + "}', '{0}', '{image}', '{\"\"}', '{0}', '{2}', '{1}', '{3}', '{1}', "
        "1000, 1, 1, '"
      + persistence::catalog_text(builtin_catalog({}),
                                  persistence::pocket_ordinals::builtin())
      + "')");
    CHECK(tx.exec1("SELECT current_setting('chargeonce.references_checked', "
                   "true) IS DISTINCT FROM 'on'")[0]
            .as<bool>());
    CHECK_THROWS_AS(tx.exec(insert_reservation(unknown)),
                    pqxx::foreign_key_violation);
    CHECK(count("reservations", unknown) == 0);
  }

  TEST_CASE("a chat deleted while a writer inserts for it: the delete waits "
            "for the writer and removes its reservation, or the writer "
            "waits for the delete and is refused (20 rounds each way)") {
    store db{test::store_options()};
    long long lock_wait_ms_max = 0;
    for (int round = 0; round < 20; ++round) {
      CAPTURE(round);
      // Writer first: its FOR KEY SHARE lock holds the delete back.
      auto chat = make_chat();
      {
        pqxx::connection writer{test::dsn()};
        pqxx::work tx{writer};
        tx.exec(insert_reservation(chat));
        auto delete_chat = "DELETE FROM chats WHERE chat_id = " + str(chat);
        auto deleted =
          std::async(std::launch::async, [&] { return try_sql(delete_chat); });
        // Blocked on the writer's lock, not merely not started yet.
        auto blocked =
          test::await_lock_wait("query = " + test::sql_literal(delete_chat));
        CHECK(blocked);
        lock_wait_ms_max = std::max(lock_wait_ms_max, blocked.ms());
        CHECK(deleted.wait_for(0s) == std::future_status::timeout);
        tx.commit();
        CHECK(deleted.get().sqlstate.empty());
        CHECK(count("reservations", chat) == 0);
      }
      // Delete first: the writer waits for it, then finds no chat.
      chat = make_chat();
      {
        pqxx::connection deleter{test::dsn()};
        pqxx::work tx{deleter};
        tx.exec("DELETE FROM chats WHERE chat_id = " + str(chat));
        auto insert = insert_reservation(chat);
        auto inserted =
          std::async(std::launch::async, [&] { return try_sql(insert); });
        auto blocked =
          test::await_lock_wait("query = " + test::sql_literal(insert));
        CHECK(blocked);
        lock_wait_ms_max = std::max(lock_wait_ms_max, blocked.ms());
        CHECK(inserted.wait_for(0s) == std::future_status::timeout);
        tx.commit();
        CHECK(inserted.get().sqlstate == "23503");
        CHECK(count("reservations", chat) == 0);
      }
    }
    MESSAGE("longest wait for the blocked statement: " << lock_wait_ms_max
                                                       << " ms");
  }
} // TEST_SUITE
