// SPDX-License-Identifier: Apache-2.0
// Bulk chat setup for benchmarks and load tests: many chats in one
// statement, and their removal with everything that refers to them.
#pragma once

#include "protocol/types.hpp"

#include <caf/error.hpp>

#include <cstdint>
#include <string>

namespace chargeonce::persistence {

/// Chats first+1 … first+count with `balance` credits in `grants` grants
/// each (see seed.cpp for their terms), then fresh statistics and (if
/// allowed) a checkpoint, so that runs start alike.
caf::error seed_chats(const std::string& dsn, chat_id first, int64_t count,
                      int32_t balance, int32_t grants = 1);

/// Deletes chats first+1 … first+count and their reservations, released
/// reservations and ledger rows (synthetic, like the chats), then vacuums
/// those tables so that the next run does not inherit the dead rows.
caf::error drop_chats(const std::string& dsn, chat_id first, int64_t count);

} // namespace chargeonce::persistence
