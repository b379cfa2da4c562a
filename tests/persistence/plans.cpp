// SPDX-License-Identifier: Apache-2.0
// The batch function keeps using its indexes, and only for the batch's own
// rows, when the plans PL/pgSQL cached per connection were made on empty
// tables (a fresh deployment) and the tables then grow without an ANALYZE
// (the SET options of chargeonce_apply_batch), and a batch costs index
// lookups in proportion to its size (its LATERAL lookups).
#include "persistence/migrations.hpp"
#include "persistence/pocket_ordinals.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>
#include <pqxx/pqxx>

#include <string>
#include <unistd.h>
#include <vector>

namespace {

/// The built-in catalog, the batch function's last parameter.
std::string builtin_products() {
  return chargeonce::persistence::catalog_text(
    chargeonce::builtin_catalog({}),
    chargeonce::persistence::pocket_ordinals::builtin());
}

/// One operation: position 0 of the arrays chargeonce_apply_batch takes.
struct operation {
  std::string op;
  long long chat = 0;
  long long id = 0;
};

/// Applies one operation as a batch of one on `conn`, in the current
/// transaction; returns the outcome and the reservation id.
std::pair<std::string, long long> apply_one(pqxx::work& tx,
                                            const operation& x) {
  auto rs = tx.exec_params(
    "SELECT outcome, coalesce(r_id, 0) FROM chargeonce_apply_batch("
    "ARRAY[$1::text], ARRAY[$2::bigint], ARRAY[$3::bigint], "
    "ARRAY['image'], ARRAY[''], ARRAY[0], ARRAY[2], ARRAY[1], ARRAY[3], "
    "ARRAY[1], 30000, 1, 1, $4::jsonb)",
    x.op, x.chat, x.id, builtin_products());
  REQUIRE(rs.size() == 1);
  return {rs[0][0].as<std::string>(), rs[0][1].as<long long>()};
}

operation chat_op(const char* op, long long chat, long long id = 0) {
  return {op, chat, id};
}

/// One full cycle in three transactions, as the persistence actor runs them.
void cycle(pqxx::connection& conn, long long chat) {
  long long id = 0;
  {
    pqxx::work tx{conn};
    auto [outcome, r] = apply_one(tx, chat_op("reserve", chat));
    REQUIRE(outcome == "ok");
    id = r;
    tx.commit();
  }
  for (auto op : {"start", "commit"}) {
    pqxx::work tx{conn};
    REQUIRE(apply_one(tx, chat_op(op, chat, id)).first == "ok");
    tx.commit();
  }
}

/// Chats 1 … 60,000 with 10 purchased credits each.
void insert_chats(pqxx::connection& conn) {
  pqxx::work tx{conn};
  // Every credit of the balance pocket is some grant's. The grants go
  // first, so that each chat row is written once, with its sole grant, as
  // the bench's seed does it: no per-row reference check and no update of
  // 60,000 chats by the grants' trigger, whose index lookups the
  // statistics of the test's transaction would count when they are not
  // flushed yet (Postgres flushes them at most once a second).
  tx.exec("SET LOCAL chargeonce.references_checked = 'on'");
  tx.exec("INSERT INTO grants (chat_id, source, credits) "
          "SELECT g, 'admin', 10 FROM generate_series(1, 60000) AS g");
  tx.exec("INSERT INTO chats (chat_id, pockets, sole_grant) "
          "SELECT g, '{NULL,NULL,10}', chargeonce_sole_grant(g) "
          "FROM generate_series(1, 60000) AS g");
  tx.commit();
}

/// Flushes what this connection's earlier transactions counted into the
/// statistics, so that pg_stat_xact_user_tables in the next transaction
/// counts that transaction alone: Postgres flushes pending counts at most
/// once a second otherwise, and a count left pending (the seeding's 60,000
/// writes, a warm-up's scans) shows up as the next transaction's now and
/// then.
void flush_statistics(pqxx::connection& conn) {
  pqxx::nontransaction{conn}.exec("SELECT pg_stat_force_next_flush()");
  // The flush happens as the backend goes idle after that statement; one
  // more round trip makes sure it has.
  pqxx::nontransaction{conn}.exec("SELECT 1");
}

/// Runs one section of `n` operations on chats 1..n through
/// chargeonce_apply_batch in `tx`; answers the reservation ids in chat order.
std::vector<long long> apply_section(pqxx::work& tx, const char* op, int n,
                                     const std::string& ids) {
  auto rs = tx.exec_params(
    "SELECT outcome, coalesce(r_id, 0) FROM chargeonce_apply_batch("
    "array_fill($1::text, ARRAY[$2::int]), "
    "ARRAY(SELECT g::bigint FROM generate_series(1, $2::int) AS g), "
    "$3::bigint[], array_fill('image'::text, ARRAY[$2::int]), "
    "array_fill(''::text, ARRAY[$2::int]), "
    "array_fill(0, ARRAY[$2::int]), array_fill(2, ARRAY[$2::int]), "
    "array_fill(1, ARRAY[$2::int]), array_fill(3, ARRAY[$2::int]), "
    "array_fill(1, ARRAY[$2::int]), 30000, 1, 1, $4::jsonb) "
    "ORDER BY idx",
    op, n, ids, builtin_products());
  REQUIRE(rs.size() == static_cast<size_t>(n));
  std::vector<long long> out;
  for (const auto& row : rs) {
    REQUIRE(row[0].as<std::string>() == "ok");
    out.push_back(row[1].as<long long>());
  }
  return out;
}

std::string array_of(const std::vector<long long>& xs) {
  std::string out = "{";
  for (auto x : xs)
    out += (out.size() > 1 ? "," : "") + std::to_string(x);
  return out + "}";
}

/// A database of its own: the plans must be made while its tables are
/// empty, which the shared test database never is again.
struct scratch_database {
  std::string name = "chargeonce_plans_" + std::to_string(::getpid());
  std::string dsn = chargeonce::test::dsn() + " dbname=" + name;

  scratch_database() {
    drop();
    admin("CREATE DATABASE " + name);
    REQUIRE(chargeonce::persistence::migrate(dsn));
    pqxx::connection conn{dsn};
    pqxx::work tx{conn};
    // No ANALYZE may replan behind the test's back.
    for (auto table :
         {"chats", "reservations", "ledger", "released_reservations"})
      tx.exec(std::string{"ALTER TABLE "} + table
              + " SET (autovacuum_enabled = false)");
    tx.commit();
    // What autovacuum leaves on a quiet deployment: statistics saying
    // "empty", which the planner believes.
    pqxx::nontransaction vacuum{conn};
    vacuum.exec("VACUUM ANALYZE reservations, ledger, released_reservations");
  }

  ~scratch_database() { drop(); }

  void admin(const std::string& statement) {
    pqxx::connection conn{chargeonce::test::dsn()};
    pqxx::nontransaction tx{conn};
    tx.exec(statement);
  }

  void drop() { admin("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); }
};

} // namespace

TEST_SUITE("plans") {
  TEST_CASE("plans cached on empty tables never scan the ledger, the "
            "reservations or the chats once they have grown") {
    scratch_database db;
    pqxx::connection conn{db.dsn};
    insert_chats(conn);
    // More than PL/pgSQL's five custom plans: the generic ones are cached
    // while the ledger and the reservations hold a handful of rows.
    for (long long chat = 1; chat <= 12; ++chat)
      cycle(conn, chat);
    {
      // The tables grow past any seq-scan-friendly size: 50,000 ledger
      // rows, 50,000 dead reservations and 20,000 live ones, 50,000
      // released ones.
      pqxx::connection other{db.dsn};
      pqxx::work tx{other};
      tx.exec("INSERT INTO ledger (reservation_id, chat_id, kind, charged) "
              "SELECT 1000000 + g, 100 + g, 'image', '{}' "
              "FROM generate_series(1, 50000) AS g");
      tx.exec("INSERT INTO reservations (chat_id, kind, held, queue) "
              "SELECT 100 + g, 'image', '{NULL,NULL,1}', "
              "'image_generation' FROM generate_series(1, 50000) AS g");
      tx.exec("DELETE FROM reservations WHERE chat_id > 100");
      tx.exec("INSERT INTO reservations (chat_id, kind, held, queue) "
              "SELECT 30000 + g, 'image', '{NULL,NULL,1}', "
              "'image_generation' FROM generate_series(1, 20000) AS g");
      tx.exec("INSERT INTO released_reservations (id, chat_id, reason) "
              "SELECT 2000000 + g, 100 + g, 'sweep_timeout' "
              "FROM generate_series(1, 50000) AS g");
      tx.commit();
    }
    flush_statistics(conn);
    pqxx::work tx{conn};
    auto [outcome, id] = apply_one(tx, chat_op("reserve", 50));
    REQUIRE(outcome == "ok");
    CHECK(apply_one(tx, chat_op("start", 50, id)).first == "ok");
    CHECK(apply_one(tx, chat_op("commit", 50, id)).first == "ok");
    // Refusals walk explain_missing: reservations, ledger, released.
    CHECK(apply_one(tx, chat_op("commit", 50, 999999999)).first == "not_found");
    CHECK(apply_one(tx, chat_op("start", 51, 2000001)).first
          == "invalid_argument");
    CHECK(apply_one(tx, chat_op("cancel", 52)).first == "not_found");
    CHECK(apply_one(tx, chat_op("status", 53)).first == "ok");
    // No sequential scan, and no index scanned whole either (a join with
    // the batch's arrays planned on "empty" statistics can walk all of an
    // index): a handful of rows fetched for a handful of operations.
    auto scans = tx.exec(
      "SELECT relname, seq_scan, idx_tup_fetch FROM pg_stat_xact_user_tables "
      "WHERE relname IN ('chats', 'reservations', 'ledger', "
      "'released_reservations') ORDER BY relname");
    REQUIRE(scans.size() == 4);
    for (const auto& row : scans) {
      INFO("table ", row[0].as<std::string>());
      CHECK(row[1].as<long long>() == 0);
      CHECK(row[2].as<long long>() < 100);
    }
  }

  TEST_CASE("a batch of n operations on n chats makes index lookups in "
            "proportion to n, not to n * n") {
    scratch_database db;
    pqxx::connection conn{db.dsn};
    insert_chats(conn);
    pqxx::nontransaction{conn}.exec("ANALYZE chats");
    flush_statistics(conn);
    constexpr int n = 200;
    pqxx::work tx{conn};
    std::string zeros = array_of(std::vector<long long>(n, 0));
    auto ids = array_of(apply_section(tx, "reserve", n, zeros));
    apply_section(tx, "start", n, ids);
    apply_section(tx, "commit", n, ids);
    CHECK(tx.exec("SELECT count(*) FROM ledger WHERE entry = 'charge'")[0][0]
            .as<int>()
          == n);
    // Each section reads each of its rows a few times (lock, lookup,
    // update, the foreign keys): at most 10 n per table. A join whose index
    // scan runs the batch's = ANY once per operation fetches about n * n / 2
    // per lookup.
    auto fetched =
      tx.exec("SELECT relname, idx_tup_fetch FROM pg_stat_xact_user_tables "
              "WHERE relname IN ('chats', 'reservations') ORDER BY relname");
    REQUIRE(fetched.size() == 2);
    for (const auto& row : fetched) {
      INFO("table ", row[0].as<std::string>());
      CHECK(row[1].as<long long>() <= 10 * n);
    }
  }
}
