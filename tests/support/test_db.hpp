// SPDX-License-Identifier: Apache-2.0
// Access to the real Postgres that scripts/test starts for integration tests.
#pragma once

#include "persistence/store.hpp"
#include "protocol/types.hpp"

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

/// Runs one statement on its own connection; returns the first field of the
/// first row as text ("" when there is none).
std::string sql(const std::string& statement);

/// sql() as an integer.
long long sql_int(const std::string& statement);

} // namespace chargeonce::test
