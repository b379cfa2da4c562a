// SPDX-License-Identifier: Apache-2.0
// The squashed schema (persistence/migrations) is the schema of the 0.1
// migration chain it replaced (fixtures/migrations_0.1_chain), except for
// what fixtures/drop_legacy.sql drops on purpose; and migrate() records a
// checksum per migration and refuses databases that do not fit it.
#include "persistence/migrations.hpp"

#include "protocol/errors.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>
#include <pqxx/pqxx>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;

namespace {

using chargeonce::ec;
using chargeonce::error_message;
using chargeonce::persistence::migrate;
using chargeonce::persistence::migrations;

const fs::path fixtures = CHARGEONCE_TEST_FIXTURES_DIR;
/// The last migration of the squash; later ones apply on top of both.
const std::string squash_last = "002_functions";
const fs::path migrations_dir = CHARGEONCE_MIGRATIONS_DIR;

std::string read_file(const fs::path& p) {
  std::ifstream in{p, std::ios::binary};
  REQUIRE_MESSAGE(in.good(), "cannot read ", p.string());
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string shell_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string{"'\\''"} : std::string{c};
  return out + "'";
}

/// The output of `command` (its stderr goes to the test's); fails the test
/// unless it exits with 0.
std::string run(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  REQUIRE_MESSAGE(p != nullptr, "cannot run ", command);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;)
    out.append(buf, n);
  int status = ::pclose(p);
  REQUIRE_MESSAGE(status == 0, command, " failed with status ", status);
  return out;
}

/// An empty database of its own, with what these tests ask of it.
struct scratch_database : chargeonce::test::scratch_database {
  scratch_database() : chargeonce::test::scratch_database("migrations") {}

  /// The first field of the first row of `query`, as text.
  std::string query1(const std::string& query) const {
    pqxx::connection conn{dsn};
    pqxx::nontransaction tx{conn};
    auto rs = tx.exec(query);
    REQUIRE(rs.size() == 1);
    return rs[0][0].is_null() ? "NULL" : rs[0][0].as<std::string>();
  }

  /// What 0.1's migrate() did: each file of the chain in its own
  /// transaction, recorded by name in 0.1's schema_migrations.
  void apply_old_chain() const {
    std::vector<fs::path> files;
    for (const auto& e :
         fs::directory_iterator{fixtures / "migrations_0.1_chain"})
      files.push_back(e.path());
    std::sort(files.begin(), files.end());
    REQUIRE(files.size() == 10);
    pqxx::connection conn{dsn};
    pqxx::nontransaction{conn}.exec(
      "CREATE TABLE schema_migrations (name text PRIMARY KEY, "
      "applied_at timestamptz NOT NULL DEFAULT now())");
    for (const auto& f : files) {
      pqxx::work tx{conn};
      tx.exec(read_file(f));
      tx.exec_params("INSERT INTO schema_migrations (name) VALUES ($1)",
                     f.stem().string());
      tx.commit();
    }
  }

  /// The migration files from `first` to `last` (by name, inclusive), each
  /// in its own transaction, without migrate()'s bookkeeping.
  void apply_files(const std::string& first, const std::string& last) const {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator{migrations_dir})
      if (auto name = e.path().stem().string();
          e.path().extension() == ".sql" && name >= first && name <= last)
        files.push_back(e.path());
    std::sort(files.begin(), files.end());
    pqxx::connection conn{dsn};
    for (const auto& f : files) {
      pqxx::work tx{conn};
      tx.exec(read_file(f));
      tx.commit();
    }
  }

  /// pg_dump's schema, without the bookkeeping table and without the
  /// random \restrict keys of newer pg_dumps.
  std::string schema() const {
    // pg_dump must not be older than the server.
    auto major = query1("SELECT current_setting('server_version_num')::int "
                        "/ 10000");
    fs::path same_major = "/usr/lib/postgresql/" + major + "/bin/pg_dump";
    std::string pg_dump =
      fs::exists(same_major) ? same_major.string() : std::string{"pg_dump"};
    auto dump = run(shell_quoted(pg_dump)
                    + " --schema-only --no-owner "
                      "--exclude-table=schema_migrations -d "
                    + shell_quoted(dsn));
    std::istringstream in{dump};
    std::string out;
    for (std::string line; std::getline(in, line);)
      if (line.rfind("\\restrict ", 0) != 0
          && line.rfind("\\unrestrict ", 0) != 0)
        out += line + "\n";
    REQUIRE(out.find("CREATE TABLE public.chats") != std::string::npos);
    return out;
  }
};

/// `diff -u` of two schemas, for the failure message.
std::string diff(const std::string& a, const std::string& b) {
  auto base = fs::temp_directory_path()
              / ("chargeonce_schema_" + std::to_string(::getpid()));
  auto pa = base.string() + ".old.sql";
  auto pb = base.string() + ".new.sql";
  std::ofstream{pa} << a;
  std::ofstream{pb} << b;
  std::string out;
  if (FILE* p = ::popen(("diff -u " + pa + " " + pb).c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;)
      out.append(buf, n);
    ::pclose(p);
  }
  fs::remove(pa);
  fs::remove(pb);
  return out;
}

/// The schema of the squashed migrations, as the real migrate() applies it.
std::string squashed_schema() {
  scratch_database db;
  REQUIRE(migrate(db.dsn));
  return db.schema();
}

std::vector<std::string> names_of_migrations() {
  std::vector<std::string> out;
  for (const auto& m : migrations())
    out.push_back(m.name);
  return out;
}

} // namespace

TEST_SUITE("migrations") {
  TEST_CASE("the squashed migrations give the schema of the 0.1 chain, less "
            "exactly the drops of drop_legacy.sql (both followed by the "
            "migrations after the squash)") {
    scratch_database old_chain;
    old_chain.apply_old_chain();
    old_chain.exec(read_file(fixtures / "drop_legacy.sql"));
    for (const auto& m : migrations())
      if (m.name > squash_last)
        old_chain.exec(m.sql);
    auto expected = old_chain.schema();
    auto actual = squashed_schema();
    if (expected != actual) {
      auto why = "the squashed schema differs from the 0.1 chain's (- chain, "
                 "+ squashed):\n"
                 + diff(expected, actual);
      FAIL_CHECK(why);
    }
  }

  TEST_CASE("the schema comparison sees one changed column, index, trigger, "
            "function body or function setting") {
    auto baseline = squashed_schema();
    const char* changes[] = {
      "ALTER TABLE ledger ALTER COLUMN kind SET NOT NULL",
      "DROP INDEX reservations_lease_expires_at",
      "DROP TRIGGER ledger_chat_changed ON ledger",
      "CREATE OR REPLACE FUNCTION chargeonce_describe(p_chat bigint, "
      "p_id bigint) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT "
      "'reservation ' || p_id || ' of chat' || p_chat $$",
      "ALTER FUNCTION chargeonce_apply_batch(text[], bigint[], bigint[], "
      "text[], text[], integer[], integer[], integer[], integer[], "
      "integer[], bigint, integer, integer, jsonb) RESET "
      "enable_hashjoin",
    };
    for (const char* change : changes) {
      INFO(change);
      scratch_database db;
      REQUIRE(migrate(db.dsn));
      db.exec(change);
      CHECK(db.schema() != baseline);
    }
  }

  TEST_CASE("005_units gives the jobs of before one unit from each pocket "
            "they hold, and their commit charges the whole hold as before") {
    scratch_database db;
    db.apply_files("001_schema", "004_catalog");
    db.exec("INSERT INTO chats (chat_id, pockets) VALUES "
            "(1, '{\"daily_images\": 1, \"balance\": 2}')");
    db.exec("INSERT INTO reservations (chat_id, kind, queue, held, "
            "request_id, slot, status) VALUES (1, 'image', 'image_generation', "
            "'{\"daily_images\": 1}', 'job-1', 0, 'in_progress')");
    db.exec("INSERT INTO ledger (reservation_id, chat_id, kind, charged) "
            "VALUES (999, 1, 'image', '{\"balance\": 1}')");
    db.exec("INSERT INTO ended_reservations (id, chat_id, kind, status, "
            "queue, held, request_id, slot, created_at) VALUES (999, 1, "
            "'image', 'committed', 'image_generation', '{\"balance\": 1}', "
            "'job-0', 0, now())");
    db.apply_files("005_units", "005_units");
    CHECK(db.query1("SELECT units || ' ' || held_units::text FROM "
                    "ended_reservations WHERE id = 999")
          == "1 {\"balance\": 1}");
    CHECK(db.query1("SELECT units || ' ' || held_units::text FROM "
                    "reservations")
          == "1 {\"daily_images\": 1}");
    CHECK(db.query1("SELECT units || ' ' || released::text FROM ledger")
          == "1 {}");
    CHECK(db.query1("SELECT c_units || ' ' || c_charged::text || ' ' || "
                    "c_released::text FROM chargeonce_commit(1, (SELECT id "
                    "FROM reservations), 0)")
          == "1 {\"daily_images\": 1} {}");
    CHECK(db.query1("SELECT units || ' ' || held_units::text FROM "
                    "ended_reservations WHERE request_id = 'job-1'")
          == "1 {\"daily_images\": 1}");
  }

  TEST_CASE("008 opens every chat's ledger with its pockets as they are, "
            "and the rows of before keep none") {
    scratch_database db;
    db.apply_files("001_schema", "007_outcome_unknown");
    db.exec("INSERT INTO chats (chat_id, pockets) VALUES "
            "(1, '{\"daily_images\": 1, \"balance\": 0}'), (2, '{}')");
    db.exec("INSERT INTO ledger (entry, chat_id, payment_id, "
            "credited_balance) VALUES ('top_up', 1, 'pay-1', 2)");
    db.apply_files("008_ledger_of_every_change", "008_ledger_of_every_change");
    CHECK(db.query1("SELECT string_agg(chat_id || ' ' || entry || '/' || "
                    "coalesce(detail, '') || ' ' || changed::text || ' ' || "
                    "coalesce(pockets::text, 'none'), '; ' ORDER BY id) "
                    "FROM ledger")
          == "1 top_up/ {} none; "
             "1 admin/opening {\"daily_images\": 1} "
             "{\"balance\": 0, \"daily_images\": 1}; "
             "2 admin/opening {} {}");
  }

  TEST_CASE("012 turns every pocket column into an array by ordinal, "
            "numbering the pockets the data names after the built-in ones; "
            "a hold of before commits as before") {
    scratch_database db;
    db.apply_files("001_schema", "011_single_operation_batches");
    db.exec("INSERT INTO chats (chat_id, pockets) VALUES "
            "(1, '{\"daily_voice\": 2, \"balance\": 5}'), (2, '{}')");
    db.exec("INSERT INTO reservations (chat_id, kind, queue, held, "
            "held_units, units, request_id, slot, status) VALUES (1, "
            "'voice', 'voice_generation', "
            "'{\"daily_voice\": 1, \"balance\": 3}', "
            "'{\"daily_voice\": 1, \"balance\": 1}', 2, 'job-1', 0, "
            "'in_progress')");
    db.exec("INSERT INTO ledger (reservation_id, chat_id, kind, charged, "
            "released, pockets) VALUES (999, 1, 'voice', "
            "'{\"balance\": 0}', '{\"daily_a\": 1}', "
            "'{\"daily_voice\": 2, \"balance\": 5}')");
    db.apply_files("012_pockets_by_ordinal", "012_pockets_by_ordinal");
    CHECK(db.query1("SELECT string_agg(pocket || '=' || ordinal, ' ' "
                    "ORDER BY ordinal) FROM catalog_pockets")
          == "daily_messages=1 daily_images=2 balance=3 daily_a=4 "
             "daily_voice=5");
    CHECK(db.query1("SELECT string_agg(pockets::text, ' ' ORDER BY chat_id) "
                    "FROM chats")
          == "{NULL,NULL,5,NULL,2} {}");
    CHECK(db.query1(
            "SELECT held::text || ' ' || held_units::text FROM reservations")
          == "{NULL,NULL,3,NULL,1} {NULL,NULL,1,NULL,1}");
    // A listed 0 stays listed; names come back as they were.
    CHECK(db.query1("SELECT charged::text || ' ' || released::text || ' ' || "
                    "chargeonce_pockets_json(pockets)::text FROM ledger")
          == "{NULL,NULL,0} {NULL,NULL,NULL,1} "
             "{\"balance\": 5, \"daily_voice\": 2}");
    CHECK(
      db.query1(
        "SELECT c_units || ' ' || c_charged::text || ' ' || c_released::text "
        "FROM chargeonce_commit(1, (SELECT id FROM reservations), "
        "1)")
      == "1 {NULL,NULL,NULL,NULL,1} {NULL,NULL,3}");
    CHECK(db.query1("SELECT pockets::text FROM chats WHERE chat_id = 1")
          == "{NULL,NULL,5,NULL,1}");
  }

  TEST_CASE("migrate records each migration with the sha256 of its file") {
    scratch_database db;
    auto applied = migrate(db.dsn);
    REQUIRE(applied);
    CHECK(*applied == names_of_migrations());
    pqxx::connection conn{db.dsn};
    pqxx::nontransaction tx{conn};
    auto rows =
      tx.exec("SELECT name, checksum FROM schema_migrations ORDER BY name");
    REQUIRE(rows.size() == migrations().size());
    for (const auto& row : rows) {
      auto name = row[0].as<std::string>();
      INFO("migration ", name);
      auto file = migrations_dir / (name + ".sql");
      auto sha256sum = run("sha256sum " + shell_quoted(file.string()));
      CHECK(row[1].as<std::string>() == sha256sum.substr(0, 64));
    }
    // Up to date: nothing to apply, no complaint.
    auto again = migrate(db.dsn);
    REQUIRE(again);
    CHECK(again->empty());
  }

  TEST_CASE("migrate refuses a database whose migration was edited after it "
            "was applied, naming the migration and both checksums") {
    scratch_database db;
    REQUIRE(migrate(db.dsn));
    auto ours = db.query1("SELECT checksum FROM schema_migrations "
                          "WHERE name = '001_schema'");
    std::string theirs(64, '0');
    db.exec("UPDATE schema_migrations SET checksum = '" + theirs
            + "' WHERE name = '001_schema'");
    auto refused = migrate(db.dsn);
    REQUIRE_FALSE(refused);
    CHECK(refused.error() == ec::invalid_argument);
    auto message = error_message(refused.error());
    INFO(message);
    CHECK(message.find("migration 001_schema was edited after it was "
                       "applied: checksum "
                       + theirs + " != " + ours)
          != std::string::npos);
  }

  TEST_CASE("migrate refuses a database with a migration this server does "
            "not know and leaves it as it was") {
    scratch_database db;
    REQUIRE(migrate(db.dsn));
    db.exec("INSERT INTO schema_migrations (name, checksum) "
            "VALUES ('003_x', 'abc')");
    auto refused = migrate(db.dsn);
    REQUIRE_FALSE(refused);
    CHECK(refused.error() == ec::invalid_argument);
    auto message = error_message(refused.error());
    INFO(message);
    CHECK(message.find("database has migration 003_x that this server does "
                       "not know: it was migrated by a newer chargeonce or "
                       "by the old 0.1 chain")
          != std::string::npos);
    CHECK(db.query1("SELECT count(*) FROM schema_migrations")
          == std::to_string(migrations().size() + 1));
  }

  TEST_CASE("migrate refuses a database of the 0.1 chain and leaves its "
            "bookkeeping as it was") {
    scratch_database db;
    db.apply_old_chain();
    auto refused = migrate(db.dsn);
    REQUIRE_FALSE(refused);
    CHECK(refused.error() == ec::invalid_argument);
    auto message = error_message(refused.error());
    INFO(message);
    CHECK(message.find("database has migration 001_core (and 9 more) that "
                       "this server does not know")
          != std::string::npos);
    CHECK(db.query1("SELECT string_agg(name, ',' ORDER BY name) "
                    "FROM schema_migrations")
          == "001_core,002_leases,003_limits,004_functions,005_plans,"
             "006_set_based,007_payment_id_partial,008_linear_batches,"
             "009_statement_references,010_receipts_without_join");
    CHECK(db.query1("SELECT count(*) FROM pg_attribute WHERE attrelid = "
                    "'schema_migrations'::regclass AND attname = 'checksum'")
          == "0");
  }

  TEST_CASE("an empty schema_migrations of 0.1 gets the checksum column") {
    scratch_database db;
    db.exec("CREATE TABLE schema_migrations (name text PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())");
    auto applied = migrate(db.dsn);
    REQUIRE(applied);
    CHECK(*applied == names_of_migrations());
    CHECK(db.query1("SELECT count(*) FROM schema_migrations "
                    "WHERE length(checksum) = 64")
          == std::to_string(migrations().size()));
  }

  TEST_CASE("servers migrating one fresh database together apply each "
            "migration once (the advisory lock)") {
    scratch_database db;
    std::vector<std::future<caf::expected<std::vector<std::string>>>> runs;
    for (int i = 0; i < 4; ++i)
      runs.push_back(std::async(std::launch::async, migrate, db.dsn));
    size_t applied = 0;
    for (auto& r : runs) {
      auto done = r.get();
      REQUIRE_MESSAGE(done, error_message(done.error()));
      applied += done->size();
    }
    CHECK(applied == migrations().size());
    CHECK(db.query1("SELECT count(*) FROM schema_migrations")
          == std::to_string(migrations().size()));
  }
}
