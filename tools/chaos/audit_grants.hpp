// SPDX-License-Identifier: Apache-2.0
// The auditor's grant invariants (20-23): what Postgres keeps of each grant,
// of the ledger rows that name it and of the holds on it must add up, each
// hold must be taken from live grants in spending order, and each expiry and
// void must happen once.
#pragma once

#include "tools/chaos/audit.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace chargeonce::chaos {

/// Where the grant invariants report, numbered as invariant_names is.
struct audit_sink {
  std::function<void(int)> check;
  std::function<void(int, chat_id, reservation_id, std::string)> fail;
};

/// Invariants 20 to 23 on `snap`, judged with the record where timing needs
/// it; `facts` gets what the run did with grants (for the summary).
void audit_grants(const recorder& rec,
                  const std::map<chat_id, pockets>& initial,
                  const persistence::audit_snapshot& snap,
                  const audit_limits& lim, const audit_sink& sink,
                  std::map<std::string, uint64_t>& facts);

} // namespace chargeonce::chaos
