// SPDX-License-Identifier: Apache-2.0
// The pocket columns are arrays indexed by the ordinal catalog_pockets gives
// each pocket name once and for ever: registering a catalog's pockets
// (servers starting together agree), and reading arrays back as the
// pockets they were written from.
#include "persistence/pocket_ordinals.hpp"

#include "persistence/failure.hpp"
#include "persistence/migrations.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>
#include <pqxx/pqxx>

#include <string>
#include <thread>
#include <vector>

using namespace chargeonce;
using persistence::pocket_ordinals;

namespace {

/// The built-in catalog with two more daily pockets.
catalog with_voice() {
  catalog out;
  auto problem = parse_catalog(R"({
    "pockets": {
      "daily_messages": {"daily": {"free": 10, "premium": 10}},
      "daily_images": {"daily": {"free": 3, "premium": 10}},
      "daily_voice": {"daily": {"free": 2, "premium": 5}},
      "daily_minutes": {"daily": {"free": 4, "premium": 8}},
      "balance": {"purchased": true}
    },
    "kinds": {
      "voice": {"pay_from": [{"pocket": "daily_voice"},
                             {"pocket": "daily_minutes", "price": 2},
                             {"pocket": "balance", "price": 3}]}
    }
  })",
                               out);
  REQUIRE_MESSAGE(problem.empty(), problem);
  return out;
}

struct migrated_database : test::scratch_database {
  migrated_database() : test::scratch_database("ordinals") {
    REQUIRE(persistence::migrate(dsn));
  }

  std::string query1(const std::string& sql) const {
    pqxx::connection conn{dsn};
    pqxx::nontransaction tx{conn};
    return tx.exec1(sql)[0].as<std::string>();
  }
};

} // namespace

TEST_SUITE("persistence.pocket_ordinals") {
  TEST_CASE("8 servers registering one catalog together give each new "
            "pocket one ordinal, the next ones, and agree on all of them") {
    migrated_database db;
    std::vector<pocket_ordinals> seen(8);
    std::vector<std::thread> servers;
    for (auto& ordinals : seen)
      servers.emplace_back([&] {
        pqxx::connection conn{db.dsn};
        ordinals.register_catalog(conn, with_voice());
      });
    for (auto& t : servers)
      t.join();
    CHECK(db.query1("SELECT string_agg(pocket || '=' || ordinal, ' ' "
                    "ORDER BY ordinal) FROM catalog_pockets")
          == "daily_messages=1 daily_images=2 balance=3 daily_minutes=4 "
             "daily_voice=5");
    for (const auto& ordinals : seen) {
      CHECK(ordinals.ordinal("daily_voice") == 5);
      CHECK(ordinals.ordinal("daily_minutes") == 4);
      CHECK(ordinals.ordinal(pocket::balance) == 3);
    }
    // Once and for ever: a catalog without them takes nothing away.
    pqxx::connection conn{db.dsn};
    pocket_ordinals again;
    again.register_catalog(conn, builtin_catalog({}));
    CHECK(again.ordinal("daily_voice") == 5);
    CHECK(db.query1("SELECT count(*) FROM catalog_pockets") == "5");
  }

  TEST_CASE("an array reads back as the pockets it was written from: NULL "
            "is a pocket not listed, 0 one listed at 0") {
    auto ordinals = pocket_ordinals::builtin();
    pockets charged;
    charged.set(pocket::balance, 0);
    CHECK(ordinals.text(charged) == "{NULL,NULL,0}");
    CHECK(ordinals.read("{NULL,NULL,0}").items() == charged.items());
    CHECK(ordinals.text(pockets{}) == "{}");
    CHECK(ordinals.read("{}").items().empty());
    CHECK(ordinals.text(pockets{7, 0, -2}) == "{7,0,-2}");
    CHECK(ordinals.read("{7,0,-2}") == pockets{7, 0, -2});
    CHECK(ordinals.read(nlohmann::json::parse("[null, 1]")).items()
          == std::vector<pockets::value_type>{{pocket::daily_images, 1}});
    for (const char* garbage : {"", "{", "{1,x}", "{1,,2}", "[1,2]"}) {
      CAPTURE(garbage);
      CHECK_THROWS_AS(ordinals.read(garbage), persistence::broken_invariant);
    }
  }

  TEST_CASE("a pocket no server registered is a bug, never a pocket "
            "dropped: in C++ and in SQL written by hand") {
    auto ordinals = pocket_ordinals::builtin();
    pockets unknown;
    unknown.set("daily_voice", 1);
    CHECK_THROWS_AS(ordinals.text(unknown), persistence::broken_invariant);
    CHECK_THROWS_AS(ordinals.read("{1,1,1,1}"), persistence::broken_invariant);
    migrated_database db;
    pqxx::connection conn{db.dsn};
    pqxx::nontransaction tx{conn};
    CHECK_THROWS_AS(tx.exec("SELECT chargeonce_pockets('{\"nope\": 1}')"),
                    pqxx::data_exception);
  }

  TEST_CASE("an ordinal another server registered after this one loaded "
            "its ordinals is looked up again, by name") {
    migrated_database db;
    pqxx::connection conn{db.dsn};
    pocket_ordinals early{db.dsn};
    early.register_catalog(conn, builtin_catalog({}));
    pocket_ordinals later;
    later.register_catalog(conn, with_voice());
    auto read = early.read("{NULL,NULL,1,2,3}");
    CHECK(read.get("daily_minutes") == 2);
    CHECK(read.get("daily_voice") == 3);
    CHECK(early.ordinal("daily_voice") == 5);
    CHECK(db.query1("SELECT chargeonce_pockets_json('{NULL,NULL,1,2,3}')::text")
          == R"({"balance": 1, "daily_voice": 3, "daily_minutes": 2})");
  }

  TEST_CASE("the SQL pocket helpers take a NULL array as no pockets: a "
            "value set in pocket 3 lands in pocket 3") {
    migrated_database db;
    CHECK(db.query1("SELECT chargeonce_pockets_set(NULL, 3, 5)::text")
          == "{NULL,NULL,5}");
    CHECK(db.query1("SELECT chargeonce_pockets_set(NULL, 1, 5)::text")
          == "{5}");
    CHECK(db.query1("SELECT chargeonce_pockets_add(NULL, '{NULL,2}')::text")
          == "{NULL,2}");
    CHECK(db.query1("SELECT chargeonce_pockets_add(NULL, '{}')::text") == "{}");
    CHECK(db.query1("SELECT chargeonce_pockets_take(NULL, '{1}')::text")
          == "{0}");
    CHECK(db.query1("SELECT chargeonce_pockets_change(NULL, NULL)::text")
          == "{}");
    CHECK(db.query1("SELECT chargeonce_pockets_change(NULL, '{NULL,4}')::text")
          == "{NULL,4}");
    CHECK(db.query1("SELECT chargeonce_pockets_with(NULL, "
                    "'{\"balance\": 2}')::text")
          == "{NULL,NULL,2}");
    CHECK(db.query1("SELECT chargeonce_pockets_json(NULL)::text") == "{}");
  }

  TEST_CASE("a lookup of an unknown ordinal that fails keeps the ordinals "
            "known so far, and a later one finds it") {
    migrated_database db;
    pqxx::connection conn{db.dsn};
    pocket_ordinals early{db.dsn};
    early.register_catalog(conn, builtin_catalog({}));
    pocket_ordinals later;
    later.register_catalog(conn, with_voice());
    // Every new session waits 100 ms at most for a lock; this one holds
    // the table, so the lookup fails (SQLSTATE 55P03), for real.
    {
      pqxx::nontransaction admin{conn};
      admin.exec("ALTER DATABASE " + db.name + " SET lock_timeout = '100ms'");
    }
    pqxx::connection locker_conn{db.dsn};
    pqxx::work locker{locker_conn};
    locker.exec("LOCK TABLE catalog_pockets IN ACCESS EXCLUSIVE MODE");
    CHECK_THROWS_AS(early.read("{NULL,NULL,1,2}"), pqxx::sql_error);
    CHECK(early.read("{1,2,3}") == pockets{1, 2, 3}); // still known
    locker.abort();
    // Tried again a second after the failure at the earliest: eventually.
    auto looked_up = test::wait_until(
      [&] {
        try {
          return early.read("{NULL,NULL,1,2}").get("daily_minutes") == 2;
        } catch (const pqxx::sql_error&) {
          return false;
        }
      },
      std::chrono::seconds{30}, std::chrono::milliseconds{100});
    MESSAGE("looked up again after " << looked_up.ms() << " ms");
    CHECK(looked_up);
  }
}
