// SPDX-License-Identifier: Apache-2.0
// Access to the real Postgres that scripts/test starts for integration tests.
#pragma once

#include "persistence/store.hpp"
#include "protocol/types.hpp"
#include "tests/support/wait.hpp"

#include <future>
#include <string>
#include <vector>

namespace chargeonce::test {

/// CHARGEONCE_TEST_DSN, migrated once per process; aborts the test run with a
/// clear message when unset (integration tests never pass vacuously).
const std::string& dsn();

/// The store's defaults, on the test database.
persistence::store_options store_options();

/// A chat id no other test (or earlier run on the same database) has used.
chat_id fresh_chat();

/// The first of `n` consecutive positive chat ids no other test has used.
chat_id fresh_chat_block(int64_t n);

/// How a batch of concurrent reserves of one chat ended.
struct reserve_tally {
  int won = 0;
  int busy = 0;
  int other = 0; ///< anything else: always a failure in these tests
};

/// Waits for every reserve and counts the outcomes.
reserve_tally
tally(std::vector<std::future<caf::expected<reservation>>>& results);

/// `n` chats from `base` on, each with a reservation started `age` ago
/// (an SQL interval, e.g. "1 hour") by a worker that died.
void insert_stuck_reservations(chat_id base, int64_t n, const std::string& age);

/// Gives the chats that `chats` selects (an SQL condition on chat_id) a
/// grant for the balance no grant has yet, and attributes their holds on
/// balance to it: for rows a test inserts by hand, since every credit of
/// the balance pocket is some grant's.
void grant_balances(const std::string& chats);

/// Runs one statement in a transaction of its own, on this thread's
/// connection to the test database (not the connection of any store);
/// returns the first field of the first row as text ("" when there is
/// none).
std::string sql(const std::string& statement);

/// sql() as an integer.
long long sql_int(const std::string& statement);

/// `text` as an SQL string literal.
std::string sql_literal(const std::string& text);

/// Waits until a backend of the test database that `which` selects (an SQL
/// condition on pg_stat_activity, e.g. "pid = 42") waits for a lock. That
/// takes milliseconds: given up after a minute, when it never will.
waited await_lock_wait(const std::string& which);

/// An empty database of its own in the cluster of CHARGEONCE_TEST_DSN, for
/// tests that need the whole database (migrations, the catalog's kinds);
/// dropped again at the end of the test.
struct scratch_database {
  std::string name;
  std::string dsn;

  /// `purpose` goes into the database's name.
  explicit scratch_database(const std::string& purpose);
  ~scratch_database();
  scratch_database(const scratch_database&) = delete;
  scratch_database& operator=(const scratch_database&) = delete;

  /// Runs `statement` on the cluster's own database.
  static void admin(const std::string& statement);

  void drop();

  /// Runs `sql` in one transaction.
  void exec(const std::string& sql) const;
};

} // namespace chargeonce::test
