// SPDX-License-Identifier: Apache-2.0
// What a caught exception means: libpqxx's reports about the server or the
// connection are outages (storage_unavailable, retry with the same ids);
// everything else is a bug (internal), never an outage. Then the same rule
// against a real Postgres whose batch function breaks its promise.
#include "persistence/failure.hpp"

#include "persistence/health.hpp"
#include "persistence/migrations.hpp"
#include "persistence/store.hpp"
#include "protocol/errors.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>
#include <pqxx/pqxx>

#include <chrono>
#include <stdexcept>
#include <string>
#include <variant>

using namespace chargeonce;
using persistence::classify;
using persistence::failure;

namespace {

template <class E>
failure of(E e) {
  return classify(std::make_exception_ptr(std::move(e)));
}

} // namespace

TEST_SUITE("persistence.failure") {

  TEST_CASE("libpqxx's connection, SQL and transaction errors are outages") {
    CHECK(of(pqxx::broken_connection{"server closed the connection"}).code
          == ec::storage_unavailable);
    CHECK(of(pqxx::too_many_connections{"too many"}).code
          == ec::storage_unavailable);
    CHECK(of(pqxx::in_doubt_error{"commit in doubt"}).code
          == ec::storage_unavailable);
    auto timeout =
      of(pqxx::sql_error{"canceling statement", "SELECT", "57014"});
    CHECK(timeout.code == ec::storage_unavailable);
    CHECK(timeout.sqlstate == "57014");
    CHECK(timeout.refused);
    auto deadlock = of(pqxx::deadlock_detected{"deadlock detected"});
    CHECK(deadlock.code == ec::storage_unavailable);
    CHECK(deadlock.sqlstate == "40P01");
    CHECK(deadlock.refused); // nothing written: the batch may be split
    auto standby = of(persistence::not_primary{"read-only"});
    CHECK(standby.code == ec::storage_unavailable);
    CHECK(standby.sqlstate == "25006");
    CHECK(standby.refused); // nothing was sent
    // Which of them say that no writable Postgres is reachable.
    CHECK(persistence::lost_primary(standby));
    CHECK(persistence::lost_primary(
      of(pqxx::broken_connection{"server closed the connection"})));
    CHECK(persistence::lost_primary(
      of(pqxx::sql_error{"terminating connection", "SELECT", "57P01"})));
    CHECK_FALSE(persistence::lost_primary(timeout));
    CHECK_FALSE(persistence::lost_primary(deadlock));
    CHECK_FALSE(persistence::lost_primary(of(std::out_of_range{"bug"})));
    auto unknown = of(pqxx::statement_completion_unknown{"lost"});
    CHECK(unknown.code == ec::storage_unavailable);
    CHECK_FALSE(unknown.refused); // it may have committed
  }

  TEST_CASE("a bug is internal, never storage_unavailable") {
    CHECK(of(std::out_of_range{"vector::at"}).code == ec::internal);
    CHECK(of(std::bad_variant_access{}).code == ec::internal);
    CHECK(of(persistence::broken_invariant{"3 rows for 4"}).code
          == ec::internal);
    CHECK(of(pqxx::conversion_error{"not an integer"}).code == ec::internal);
    CHECK(of(pqxx::usage_error{"wrong use"}).code == ec::internal);
    CHECK(of(42).code == ec::internal);
    // SQL the schema does not fit is our bug; a missing grant is not.
    auto undefined =
      of(pqxx::sql_error{"column \"x\" does not exist", "SELECT x", "42703"});
    CHECK(undefined.code == ec::internal);
    CHECK(undefined.sqlstate == "42703");
    CHECK(undefined.refused);
    CHECK(of(pqxx::sql_error{"syntax error", "SELEC", "42601"}).code
          == ec::internal);
    CHECK(of(pqxx::sql_error{"permission denied", "SELECT", "42501"}).code
          == ec::storage_unavailable);
    auto named = of(std::out_of_range{"vector::at"});
    CHECK(named.detail.find("std::out_of_range") != std::string::npos);
    CHECK(named.detail.find("vector::at") != std::string::npos);
  }

  TEST_CASE("a batch function answering fewer rows than operations is "
            "internal, names a log id, and the next call works") {
    // The broken function lives in a schema of its own that only this
    // store's connection puts first on its search_path: other tests on the
    // same database keep the real one.
    test::sql("CREATE SCHEMA IF NOT EXISTS broken_batch");
    test::sql("CREATE OR REPLACE FUNCTION broken_batch.chargeonce_apply_batch("
              "text[], bigint[], bigint[], text[], text[], integer[], "
              "integer[], integer[], integer[], integer[], bigint, integer, "
              "integer, jsonb) "
              "RETURNS SETOF public.chargeonce_outcome LANGUAGE sql AS "
              "$$ SELECT * FROM unnest('{}'::public.chargeonce_outcome[]) $$");
    auto opts = test::store_options();
    auto good_opts = opts;
    opts.dsn += " options='-c search_path=broken_batch,public'";
    persistence::store good{good_opts};
    auto chat = test::fresh_chat();
    REQUIRE(good.create_chat(chat_spec{chat, {1, 0, 0}, caf::none, caf::none}));
    persistence::store broken{opts};
    auto answer = broken.reserve(chat, kind::text, "req-broken");
    REQUIRE_FALSE(answer);
    CHECK(answer.error() == ec::internal);
    CHECK(error_message(answer.error()).find("see server log id=")
          != std::string::npos);
    CHECK(test::sql_int("SELECT count(*) FROM reservations WHERE chat_id = "
                        + std::to_string(chat))
          == 0);
    auto again = good.reserve(chat, kind::text, "req-broken");
    CHECK(again);
  }

  TEST_CASE("a connection that lands on a read-only Postgres (a standby) is "
            "refused as storage_unavailable, not kept, and the next "
            "operation connects again; readiness says no primary") {
    test::scratch_database scratch{"readonly"};
    REQUIRE(persistence::migrate(scratch.dsn));
    auto opts = test::store_options();
    opts.dsn = scratch.dsn;
    persistence::store db{opts};
    auto chat = test::fresh_chat();
    REQUIRE(db.create_chat(chat_spec{chat, {1, 0, 0}, caf::none, caf::none}));
    CHECK(db.connections_made() == 1);
    CHECK_FALSE(db.unavailable());
    CHECK(persistence::check_ready(scratch.dsn, std::chrono::seconds{5}).ready);
    // What a standby looks like to a new session.
    test::scratch_database::admin("ALTER DATABASE " + scratch.name
                                  + " SET default_transaction_read_only = on");
    test::sql("SELECT pg_terminate_backend(" + std::to_string(db.backend_pid())
              + ")");
    for (int i = 0; i < 3; ++i) {
      auto refused = db.status(chat);
      REQUIRE_FALSE(refused);
      CHECK(refused.error() == ec::storage_unavailable);
      CHECK(db.unavailable());
      CHECK(db.backend_pid() == 0); // nothing kept
    }
    CHECK(error_message(db.status(chat).error()).find("read-only")
          != std::string::npos);
    CHECK(db.connections_made() == 1);
    auto probe = persistence::check_ready(scratch.dsn, std::chrono::seconds{5});
    CHECK_FALSE(probe.ready);
    CHECK(probe.reason.find("read-only") != std::string::npos);
    // The primary is back (promoted): the next operation reconnects.
    test::scratch_database::admin("ALTER DATABASE " + scratch.name
                                  + " RESET default_transaction_read_only");
    auto back = db.status(chat);
    REQUIRE(back);
    CHECK(back->amounts == pockets{1, 0, 0});
    CHECK(db.connections_made() == 2);
    CHECK_FALSE(db.unavailable());
    CHECK(persistence::check_ready(scratch.dsn, std::chrono::seconds{5}).ready);
  }

  TEST_CASE("a statement that names a column the schema lacks is internal, "
            "not storage_unavailable, and writes nothing") {
    test::sql("CREATE SCHEMA IF NOT EXISTS wrong_batch");
    test::sql("CREATE OR REPLACE FUNCTION wrong_batch.chargeonce_apply_batch("
              "text[], bigint[], bigint[], text[], text[], integer[], "
              "integer[], integer[], integer[], integer[], bigint, integer, "
              "integer, jsonb) "
              "RETURNS SETOF public.chargeonce_outcome LANGUAGE plpgsql AS "
              "$$ BEGIN PERFORM no_such_column FROM public.chats; END $$");
    auto opts = test::store_options();
    persistence::store good{opts};
    opts.dsn += " options='-c search_path=wrong_batch,public'";
    auto chat = test::fresh_chat();
    REQUIRE(good.create_chat(chat_spec{chat, {1, 0, 0}, caf::none, caf::none}));
    persistence::store wrong{opts};
    auto answer = wrong.reserve(chat, kind::text, "req-wrong");
    REQUIRE_FALSE(answer);
    CHECK(answer.error() == ec::internal);
    CHECK(test::sql_int("SELECT count(*) FROM reservations WHERE chat_id = "
                        + std::to_string(chat))
          == 0);
    CHECK(good.reserve(chat, kind::text, "req-wrong"));
  }
}
