// SPDX-License-Identifier: Apache-2.0
#include "tests/support/test_db.hpp"

#include "persistence/migrations.hpp"
#include "protocol/errors.hpp"

#include <pqxx/pqxx>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <random>
#include <unistd.h>

namespace chargeonce::test {

const std::string& dsn() {
  static const std::string value = [] {
    const char* env = std::getenv("CHARGEONCE_TEST_DSN");
    if (env == nullptr || *env == '\0') {
      std::cerr << "CHARGEONCE_TEST_DSN is not set: run scripts/test\n";
      std::exit(2);
    }
    if (auto done = persistence::migrate(env); !done) {
      std::cerr << "migration failed: " << error_message(done.error()) << "\n";
      std::exit(2);
    }
    return std::string{env};
  }();
  return value;
}

namespace {

// Random base per process, so reruns against one database never collide.
std::atomic<chat_id> next_chat = [] {
  std::mt19937_64 rng{std::random_device{}()};
  return static_cast<chat_id>(rng() % 1'000'000'000'000) + 1'000'000;
}();

} // namespace

persistence::store_options store_options() {
  persistence::store_options opts;
  opts.dsn = dsn();
  return opts;
}

chat_id fresh_chat() {
  // The negative half is exercised too: group chats have negative ids.
  auto id = next_chat.fetch_add(1);
  return id % 2 == 0 ? id : -id;
}

chat_id fresh_chat_block(int64_t n) {
  return next_chat.fetch_add(n);
}

reserve_tally
tally(std::vector<std::future<caf::expected<reservation>>>& results) {
  reserve_tally out;
  for (auto& f : results) {
    auto r = f.get();
    if (r)
      ++out.won;
    else if (r.error() == ec::busy)
      ++out.busy;
    else
      ++out.other;
  }
  return out;
}

void insert_stuck_reservations(chat_id base, int64_t n,
                               const std::string& age) {
  auto range = std::to_string(base) + ", " + std::to_string(base + n - 1);
  sql("INSERT INTO chats (chat_id, pockets) SELECT g, '{NULL,NULL,1}' FROM "
      "generate_series("
      + range + ") g");
  sql("INSERT INTO reservations (chat_id, kind, status, held, queue, "
      "created_at) SELECT g, 'image', 'in_progress', '{NULL,NULL,1}', "
      "'image_generation', now() - interval '"
      + age + "' FROM generate_series(" + range + ") g");
  grant_balances("chat_id BETWEEN " + std::to_string(base) + " AND "
                 + std::to_string(base + n - 1));
}

void grant_balances(const std::string& chats) {
  // As migration 004 converts a 0.2 database: one grant per balance, and
  // each hold on balance attributed to it.
  sql("SELECT count(chargeonce_grant_balance(chat_id)) FROM chats WHERE "
      + chats);
  sql("UPDATE reservations r SET held_grants = ARRAY[g.grant_id], "
      "held_grant_credits = ARRAY[r.held[3]] FROM grants g WHERE "
      "g.chat_id = r.chat_id AND coalesce(r.held[3], 0) > 0 AND "
      "cardinality(r.held_grants) = 0 AND r."
      + chats);
}

namespace {

/// This thread's connection for sql(): a new backend per statement (a fork
/// and an authentication) was most of the time of the tests that look at a
/// table after each of a thousand rounds.
pqxx::connection& thread_connection(bool fresh) {
  thread_local std::unique_ptr<pqxx::connection> conn;
  if (fresh || !conn || !conn->is_open())
    conn = std::make_unique<pqxx::connection>(dsn());
  return *conn;
}

pqxx::result run_statement(pqxx::connection& conn,
                           const std::string& statement) {
  pqxx::work tx{conn};
  auto rs = tx.exec(statement);
  tx.commit();
  return rs;
}

} // namespace

std::string sql(const std::string& statement) {
  pqxx::result rs;
  try {
    rs = run_statement(thread_connection(false), statement);
  } catch (const pqxx::broken_connection&) {
    // The backend was gone before the statement reached it (a test
    // terminated it, or the cluster restarted): once more, on a new one.
    rs = run_statement(thread_connection(true), statement);
  }
  if (rs.empty() || rs[0].empty() || rs[0][0].is_null())
    return {};
  return rs[0][0].as<std::string>();
}

long long sql_int(const std::string& statement) {
  return std::stoll(sql(statement));
}

std::string sql_literal(const std::string& text) {
  std::string out = "'";
  for (auto c : text)
    out += c == '\'' ? std::string{"''"} : std::string{c};
  return out + "'";
}

waited await_lock_wait(const std::string& which) {
  auto query = "SELECT count(*) FROM pg_stat_activity WHERE datname = "
               "current_database() AND wait_event_type = 'Lock' AND ("
               + which + ")";
  return wait_until([&] { return sql_int(query) > 0; },
                    std::chrono::seconds{60});
}

scratch_database::scratch_database(const std::string& purpose) {
  static std::atomic<int> count{0};
  name = "chargeonce_" + purpose + "_" + std::to_string(::getpid()) + "_"
         + std::to_string(count++);
  dsn = test::dsn() + " dbname=" + name;
  drop();
  admin("CREATE DATABASE " + name);
}

scratch_database::~scratch_database() {
  drop();
}

void scratch_database::admin(const std::string& statement) {
  pqxx::connection conn{test::dsn()};
  pqxx::nontransaction tx{conn};
  tx.exec(statement);
}

void scratch_database::drop() {
  admin("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)");
}

void scratch_database::exec(const std::string& sql) const {
  pqxx::connection conn{dsn};
  pqxx::work tx{conn};
  tx.exec(sql);
  tx.commit();
}

} // namespace chargeonce::test
