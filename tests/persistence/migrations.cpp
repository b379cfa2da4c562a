// SPDX-License-Identifier: Apache-2.0
// The schema migrate() builds (persistence/migrations, then
// persistence/functions) is the schema of the chains it replaced: the 0.1
// chain (fixtures/migrations_0.1_chain, less fixtures/drop_legacy.sql) and
// 0.2's development chain (fixtures/migrations_0.2_chain, less
// fixtures/house_changes.sql); persistence/schema.sql is that schema; every
// function has one source file; a 0.1 database's rows convert as the
// development chain converted them. migrate() records a checksum per
// migration and per function set, refuses databases that do not fit, and
// leaves a newer release's functions alone.
#include "persistence/migrations.hpp"

#include "protocol/errors.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>
#include <pqxx/pqxx>

#include <algorithm>
#include <atomic>
#include <cctype>
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
using chargeonce::persistence::release_version;

const fs::path fixtures = CHARGEONCE_TEST_FIXTURES_DIR;
/// The last migration of 0.1; the release 0.2 replaced every later one.
const std::string released_0_1 = "002_functions";
const fs::path migrations_dir = CHARGEONCE_MIGRATIONS_DIR;
const fs::path schema_file = CHARGEONCE_SCHEMA_FILE;

/// The .sql files of `dir`, by name.
std::vector<fs::path> sql_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator{dir})
    if (e.path().extension() == ".sql")
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

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
    auto files = sql_files(fixtures / "migrations_0.1_chain");
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

  /// What 0.1.0's migrate() left: 001 and 002 applied and recorded with
  /// their checksums.
  void migrate_as_0_1() const {
    pqxx::connection conn{dsn};
    pqxx::nontransaction{conn}.exec(
      "CREATE TABLE schema_migrations (name text PRIMARY KEY, applied_at "
      "timestamptz NOT NULL DEFAULT now(), checksum text NOT NULL)");
    for (const auto& m : migrations()) {
      if (m.name > released_0_1)
        break;
      pqxx::work tx{conn};
      tx.exec(m.sql);
      tx.exec_params("INSERT INTO schema_migrations (name, checksum) VALUES "
                     "($1, encode(sha256(convert_to($2, 'UTF8')), 'hex'))",
                     m.name, m.sql);
      tx.commit();
    }
  }

  /// The .sql files of `dir` from `first` to `last` (by name, inclusive),
  /// each in its own transaction, without migrate()'s bookkeeping.
  void apply_files(const fs::path& dir, const std::string& first,
                   const std::string& last) const {
    std::vector<fs::path> files;
    for (const auto& f : sql_files(dir))
      if (auto name = f.stem().string(); name >= first && name <= last)
        files.push_back(f);
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
                      "--exclude-table=schema_migrations "
                      "--exclude-table=schema_functions -d "
                    + shell_quoted(dsn));
    // As scripts/schema writes persistence/schema.sql: without the versions
    // of the server and of pg_dump (a minor upgrade changes nothing here).
    std::istringstream in{dump};
    std::string out;
    for (std::string line; std::getline(in, line);)
      if (line.rfind("\\restrict ", 0) != 0
          && line.rfind("\\unrestrict ", 0) != 0
          && line.rfind("-- Dumped from database version", 0) != 0
          && line.rfind("-- Dumped by pg_dump version", 0) != 0)
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

/// Whether `sql` declares function (or aggregate) `name`.
bool declares(const std::string& sql, const std::string& name) {
  for (const char* what :
       {"CREATE OR REPLACE FUNCTION ", "CREATE OR REPLACE AGGREGATE "})
    for (auto at = sql.find(what + name); at != std::string::npos;
         at = sql.find(what + name, at + 1))
      if (auto next = sql[at + std::string{what}.size() + name.size()];
          next == '(' || next == ' ' || next == '\n')
        return true;
  return false;
}

/// Whether `sql` creates a function or aggregate outside pg_temp.
bool creates_function(const std::string& sql) {
  std::string upper;
  for (char c : sql)
    upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const char* what : {"FUNCTION ", "AGGREGATE "})
    for (const char* create : {"CREATE ", "CREATE OR REPLACE "})
      for (auto at = upper.find(std::string{create} + what);
           at != std::string::npos;
           at = upper.find(std::string{create} + what, at + 1))
        if (upper.compare(at + std::string{create}.size()
                            + std::string{what}.size(),
                          8, "PG_TEMP.")
            != 0)
          return true;
  return false;
}

/// `schema` without its lines that hold only an SQL comment.
std::string without_comment_lines(const std::string& schema) {
  std::istringstream in{schema};
  std::string out;
  for (std::string line; std::getline(in, line);)
    if (auto first = line.find_first_not_of(' ');
        first == std::string::npos || line.compare(first, 2, "--") != 0)
      out += line + "\n";
  return out;
}

/// The schema migrate() builds on an empty database.
std::string migrated_schema() {
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
  TEST_CASE("migrate gives the schema of the chains it replaced: the 0.1 "
            "chain less drop_legacy.sql, then 0.2's development chain less "
            "house_changes.sql, then what came after them") {
    scratch_database old_chain;
    old_chain.apply_old_chain();
    old_chain.exec(read_file(fixtures / "drop_legacy.sql"));
    old_chain.apply_files(fixtures / "migrations_0.2_chain", "000", "999");
    old_chain.exec(read_file(fixtures / "house_changes.sql"));
    // What came after the squash comes after it here too: the migrations
    // after 003_release_0_2, then the function files as they are now.
    old_chain.apply_files(migrations_dir, "004", "999");
    for (const auto& f : chargeonce::persistence::function_files())
      old_chain.exec(f.sql);
    // Comments aside: the function files' comments point at files that
    // exist, where the chains' pointed at migrations the release replaced.
    auto expected = without_comment_lines(old_chain.schema());
    auto actual = without_comment_lines(migrated_schema());
    if (expected != actual) {
      auto why = "migrate's schema differs from the replaced chains' (- "
                 "chains, + migrate):\n"
                 + diff(expected, actual);
      FAIL_CHECK(why);
    }
  }

  TEST_CASE("persistence/schema.sql is the schema migrate builds "
            "(scripts/schema writes it)") {
    auto actual = migrated_schema();
    auto written = read_file(schema_file);
    if (written != actual) {
      auto why = "persistence/schema.sql drifted from migrate's schema; run "
                 "scripts/schema (- file, + migrate):\n"
                 + diff(written, actual);
      FAIL_CHECK(why);
    }
  }

  TEST_CASE("the schema comparison sees one changed column, index, trigger, "
            "function body or function setting") {
    auto baseline = migrated_schema();
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

  TEST_CASE("every chargeonce function is declared in exactly one function "
            "file, and no migration after 0.1 creates a function") {
    scratch_database db;
    REQUIRE(migrate(db.dsn));
    pqxx::connection conn{db.dsn};
    pqxx::nontransaction tx{conn};
    auto live =
      tx.exec("SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = "
              "p.pronamespace WHERE n.nspname = 'public' AND p.proname LIKE "
              "'chargeonce\\_%' ORDER BY 1");
    REQUIRE(live.size() > 50);
    for (const auto& row : live) {
      auto name = row[0].as<std::string>();
      INFO("function ", name);
      std::vector<std::string> declared_in;
      for (const auto& f : chargeonce::persistence::function_files())
        if (declares(f.sql, name))
          declared_in.push_back(f.name);
      CHECK(declared_in.size() == 1);
    }
    for (const auto& m : migrations()) {
      if (m.name <= released_0_1)
        continue;
      INFO("migration ", m.name);
      CHECK_FALSE(creates_function(m.sql));
    }
  }

  TEST_CASE("a 0.1 database's rows convert as 0.2's development chain "
            "converted them, and a hold of 0.1 commits as before") {
    // The same rows, and the same queries, on both: the development chain's
    // answers are the reference (pinned below as well).
    const char* rows_of_0_1[] = {
      "INSERT INTO chats (chat_id, daily_messages, daily_images, balance) "
      "VALUES (1, 0, 1, 2), (2, 0, 0, 0)",
      "INSERT INTO reservations (chat_id, kind, queue, held_daily_messages, "
      "held_daily_images, held_balance, request_id, status) VALUES (1, "
      "'image', 'image_generation', 0, 1, 0, 'job-1', 'in_progress')",
      "INSERT INTO ledger (reservation_id, chat_id, kind, "
      "charged_daily_messages, charged_daily_images, charged_balance) VALUES "
      "(999, 1, 'image', 0, 0, 1)",
      "INSERT INTO ledger (entry, chat_id, payment_id, credited_balance, "
      "charged_daily_messages, charged_daily_images, charged_balance) "
      "VALUES ('top_up', 1, 'pay-1', 2, 0, 0, 0)",
    };
    const std::vector<std::pair<std::string, std::string>> answers = {
      {"SELECT string_agg(pocket || '=' || ordinal, ' ' ORDER BY ordinal) "
       "FROM catalog_pockets",
       "daily_messages=1 daily_images=2 balance=3"},
      {"SELECT string_agg(kind, ' ' ORDER BY kind) FROM catalog_kinds",
       "image"},
      {"SELECT string_agg(chat_id || ':' || pockets::text || ':' || "
       "window_number, ' ' ORDER BY chat_id) FROM chats",
       "1:{0,1,2}:0 2:{0,0,0}:0"},
      {"SELECT held::text || ' ' || held_units::text || ' ' || units || ' ' "
       "|| slot || ' [' || worker || ']' FROM reservations",
       "{NULL,1} {NULL,1} 1 0 []"},
      {"SELECT string_agg(chat_id || ' ' || entry || '/' || coalesce(detail, "
       "'') || ' ' || charged::text || ' ' || changed::text || ' ' || "
       "released::text || ' ' || units || ' ' || coalesce(pockets::text, "
       "'none'), '; ' ORDER BY id) FROM ledger",
       "1 charge/ {NULL,NULL,1} {} {} 1 none; 1 top_up/ {} {} {} 1 none; "
       "1 admin/opening {} {NULL,1,2} {} 1 {0,1,2}; "
       "2 admin/opening {} {} {} 1 {0,0,0}; "
       "1 admin/the balance of 2 credits became grant 1 (credit grants, "
       "migration 004_grants) {} {} {} 1 {0,1,2}"},
      {"SELECT c_units || ' ' || c_charged::text || ' ' || c_released::text "
       "FROM chargeonce_commit(1, (SELECT id FROM reservations), 0)",
       "1 {NULL,1} {}"},
      {"SELECT pockets::text FROM chats WHERE chat_id = 1", "{0,0,2}"},
      {"SELECT status || ' ' || held::text || ' ' || held_units::text FROM "
       "ended_reservations",
       "committed {NULL,1} {NULL,1}"},
    };
    scratch_database chain;
    chain.apply_files(migrations_dir, "001", released_0_1);
    for (const char* row : rows_of_0_1)
      chain.exec(row);
    chain.apply_files(fixtures / "migrations_0.2_chain", "000", "999");
    // What came after 0.2 comes after it here too (004_grants writes a
    // ledger row per balance it converts).
    chain.apply_files(migrations_dir, "004", "999");
    for (const auto& f : chargeonce::persistence::function_files())
      chain.exec(f.sql);
    scratch_database released;
    released.migrate_as_0_1();
    for (const char* row : rows_of_0_1)
      released.exec(row);
    REQUIRE(migrate(released.dsn));
    for (const auto& [query, pinned] : answers) {
      INFO(query);
      CHECK(chain.query1(query) == pinned);
      CHECK(released.query1(query) == pinned);
    }
  }

  TEST_CASE("migrate applies the function files once per set, records it "
            "with the release, and applies a changed set again") {
    scratch_database db;
    auto applied = migrate(db.dsn);
    REQUIRE(applied);
    REQUIRE_FALSE(applied->empty());
    CHECK(applied->back() == "functions");
    CHECK(db.query1("SELECT version FROM schema_functions")
          == chargeonce::persistence::release_version());
    CHECK(db.query1("SELECT length(checksum) FROM schema_functions") == "64");
    // An older release's set (or an edited one): replaced, body and record.
    db.exec("CREATE OR REPLACE FUNCTION chargeonce_describe(p_chat bigint, "
            "p_id bigint) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT "
            "'older' $$");
    db.exec("UPDATE schema_functions SET checksum = 'older', version = "
            "'0.0.9'");
    auto again = migrate(db.dsn);
    REQUIRE(again);
    CHECK(*again == std::vector<std::string>{"functions"});
    CHECK(db.query1("SELECT chargeonce_describe(1, 2)") != "older");
    CHECK(db.query1("SELECT version FROM schema_functions")
          == chargeonce::persistence::release_version());
    auto third = migrate(db.dsn);
    REQUIRE(third);
    CHECK(third->empty());
  }

  TEST_CASE("a server never replaces the functions a newer release recorded, "
            "and runs on them (a rolling upgrade's old servers)") {
    scratch_database db;
    REQUIRE(migrate(db.dsn));
    // The newer release changed a body its old servers call.
    db.exec("CREATE OR REPLACE FUNCTION chargeonce_describe(p_chat bigint, "
            "p_id bigint) RETURNS text LANGUAGE sql IMMUTABLE AS $$ SELECT "
            "'job ' || p_id || ' of chat ' || p_chat $$");
    db.exec("UPDATE schema_functions SET checksum = 'newer', version = "
            "'99.0.0'");
    auto applied = migrate(db.dsn);
    REQUIRE(applied);
    CHECK(applied->empty());
    CHECK(db.query1("SELECT chargeonce_describe(7, 3)") == "job 3 of chat 7");
    CHECK(db.query1("SELECT checksum || ' ' || version FROM "
                    "schema_functions")
          == "newer 99.0.0");
    // The old server's operations run on them.
    db.exec("INSERT INTO chats (chat_id) VALUES (7)");
    CHECK(db.query1("SELECT outcome FROM chargeonce_apply_one('status', 7, "
                    "0, '', '', 0, 0, 1, 1, '{}')")
          == "ok");
  }

  TEST_CASE("the release order of versions") {
    using chargeonce::persistence::newer_release;
    CHECK(newer_release("0.2.0", "0.1.0"));
    CHECK(newer_release("0.10.0", "0.9.9"));
    CHECK(newer_release("1.0", "0.99.99"));
    CHECK_FALSE(newer_release("0.2.0", "0.2.0"));
    CHECK_FALSE(newer_release("0.1.9", "0.2.0"));
    CHECK_FALSE(newer_release("0.2", "0.2.0"));
  }

  TEST_CASE("migrate refuses a database of 0.2's development chain and says "
            "to recreate it") {
    scratch_database db;
    db.exec("CREATE TABLE schema_migrations (name text PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now(), checksum text NOT "
            "NULL)");
    db.exec("INSERT INTO schema_migrations (name, checksum) SELECT name, "
            "'x' FROM unnest(ARRAY['001_schema', '002_functions', "
            "'003_parallel_jobs', '012_pockets_by_ordinal']) AS name");
    auto refused = migrate(db.dsn);
    REQUIRE_FALSE(refused);
    CHECK(refused.error() == ec::invalid_argument);
    auto message = error_message(refused.error());
    INFO(message);
    CHECK(message.find("of 0.2's development chain") != std::string::npos);
    CHECK(message.find("recreate it") != std::string::npos);
    CHECK(db.query1("SELECT count(*) FROM schema_migrations") == "4");
  }

  TEST_CASE("migrate records each migration with the sha256 of its file") {
    scratch_database db;
    auto applied = migrate(db.dsn);
    REQUIRE(applied);
    auto with_functions = names_of_migrations();
    with_functions.emplace_back("functions");
    CHECK(*applied == with_functions);
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
    auto with_functions = names_of_migrations();
    with_functions.emplace_back("functions");
    CHECK(*applied == with_functions);
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
    CHECK(applied == migrations().size() + 1); // + "functions"
    CHECK(db.query1("SELECT count(*) FROM schema_migrations")
          == std::to_string(migrations().size()));
  }
}
