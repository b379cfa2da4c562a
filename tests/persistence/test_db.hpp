// SPDX-License-Identifier: Apache-2.0
// Access to the real Postgres that scripts/test starts for integration tests.
#pragma once

#include "persistence/store.hpp"
#include "protocol/types.hpp"

#include <string>

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

/// Runs one statement on its own connection; returns the first field of the
/// first row as text ("" when there is none).
std::string sql(const std::string& statement);

/// sql() as an integer.
long long sql_int(const std::string& statement);

} // namespace chargeonce::test
