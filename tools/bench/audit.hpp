// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench's check that a run charged exactly once: after the
// clients stopped, Postgres must hold one ledger charge per commit they
// were answered ok, each of the one unit that an image reserve holds, the
// same units missing from the chats' balances, and no reservation left.
// Fast figures from wrong answers would be worth nothing.
#pragma once

#include "protocol/types.hpp"

#include <cstdint>
#include <string>

namespace chargeonce::bench {

/// What Postgres holds for one run's chats, against what its clients saw.
struct run_audit {
  uint64_t acknowledged = 0;      ///< commits answered ok, whole run
  uint64_t ledger_charges = 0;    ///< ledger charges of the run's chats
  uint64_t charged_units = 0;     ///< their charges summed over all pockets
  int64_t charged_balance = 0;    ///< of which from the purchased balance
  int64_t balance_spent = 0;      ///< seeded balance minus the chats' now
  uint64_t open_reservations = 0; ///< reservations of the run's chats left

  /// Every acknowledged commit charged once, one unit, from a pocket that
  /// shows it; nothing else charged, nothing left held.
  bool ok() const {
    return ledger_charges == acknowledged && charged_units == ledger_charges
           && balance_spent == charged_balance && open_reservations == 0;
  }
};

/// Reads the figures of chats first+1 … first+count in one statement (one
/// snapshot); throws when Postgres cannot answer.
run_audit audit_run(const std::string& dsn, chat_id first, int64_t count,
                    int32_t seed_balance, uint64_t acknowledged);

} // namespace chargeonce::bench
