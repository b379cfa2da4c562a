// SPDX-License-Identifier: Apache-2.0
// chargeonce-chaos's summary: operations by op and outcome, faults by type,
// invariants with their counts, violations with chat and reservation ids.
// One JSON document; the text on stdout is rendered from it.
#pragma once

#include "tools/chaos/audit.hpp"
#include "tools/chaos/record.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace chargeonce::chaos {

struct run_facts {
  uint64_t seed = 0;
  int64_t duration_s = 0;
  size_t servers = 0;
  std::vector<fault> enabled;
  std::string harness_error;       ///< empty when the harness itself worked
  bool self_test = false;          ///< a forged ledger row was planted
  std::string catalog = "builtin"; ///< --catalog: replays need it too
  /// The chat of the jobs planted for the forgeries; 0 when none.
  chat_id planted_chat = 0;
};

nlohmann::json summarize(const run_facts& facts, const recorder& rec,
                         const audit_result& result);

/// The human-readable summary of `summary`.
std::string render(const nlohmann::json& summary);

} // namespace chargeonce::chaos
