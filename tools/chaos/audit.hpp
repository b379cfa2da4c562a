// SPDX-License-Identifier: Apache-2.0
// chargeonce-chaos's money auditor: judges Postgres' final state against
// the record of every request and answer, for the money invariants
// (invariant_names) as far as they are observable from outside the servers.
#pragma once

#include "tools/chaos/record.hpp"
#include "tools/common/audit.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace chargeonce::chaos {

/// The server timings the deadlines are judged by.
struct audit_limits {
  int64_t sweep_timeout_ms = 6000;
  int64_t sweep_interval_ms = 1000;
  int64_t slack_ms = 3000; ///< scheduling, a sweep page, a store timeout
  uint64_t seed = 1;       ///< payment ids are "pay-<seed>-<key>"
  /// Each chat's limit of active jobs; a chat not named has 1.
  std::map<chat_id, int32_t> max_active_jobs;
};

struct violation {
  std::string invariant;
  chat_id chat = 0;
  reservation_id reservation = 0;
  std::string what;
};

struct invariant_tally {
  std::string name;
  uint64_t checked = 0;
  uint64_t violations = 0;
};

struct audit_result {
  std::vector<invariant_tally> invariants; ///< in invariant_names order
  std::vector<violation> violations;       ///< the first few thousand
  uint64_t violations_total = 0;
  /// The audited ledger's rows by entry (charge, top_up, refill, admin).
  std::map<std::string, uint64_t> ledger_entries;
  /// How far the latest lock went past its deadline and one sweep (what
  /// audit_limits::slack_ms allows for), in ms; negative when every lock
  /// ended within them, 0 when none was judged. The summary prints it
  /// beside the slack.
  int64_t lock_slack_used_ms = 0;
  int64_t lock_slack_ms = 0; ///< audit_limits::slack_ms
  /// What the run did with grants: how many there are, expired, expired
  /// while held, voided, … (audit_grants).
  std::map<std::string, uint64_t> grants;
};

audit_result audit(const recorder& rec,
                   const std::map<chat_id, pockets>& initial,
                   const persistence::audit_snapshot& snapshot,
                   const audit_limits& limits);

inline constexpr size_t invariant_count = 23;

/// How late a request without an answer may still take effect: the client
/// gave up after 4 s, the server's store-timeout is 2 s, and a paused
/// Postgres runs the queued statements within seconds of SIGCONT.
inline constexpr int64_t unknown_horizon_us = 15'000'000;

/// Invariant names, as the summary and the JSON show them.
extern const char* const invariant_names[invariant_count];

} // namespace chargeonce::chaos
