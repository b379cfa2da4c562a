// SPDX-License-Identifier: Apache-2.0
// chargeonce-chaos's command line (plain --name=value parsing, like
// chargeonce-cli and chargeonce-bench).
#pragma once

#include "main/flags/flags.hpp"
#include "tools/chaos/record.hpp"
#include "tools/chaos/worker_process.hpp"

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace chargeonce::chaos {

struct chaos_options {
  uint64_t seed = 1;
  int64_t duration_s = 60;
  size_t servers = 2;
  std::vector<fault> faults; ///< default: every type
  bool faults_given = false;
  std::string json_path;
  std::string postgres; ///< empty: an embedded cluster under data_dir
  /// A pg_auto_failover formation under data_dir/ha instead, made and
  /// failed over by `ha_cluster` (scripts/ha-cluster).
  bool postgres_ha = false;
  std::string ha_cluster;
  /// The formation's first port (monitor; the nodes +1 and +2); 0: one
  /// above the ephemeral range, derived from the seed.
  int ha_port_base = 0;
  std::string server; ///< chargeonce-server; default next to this binary
  std::string data_dir = "var/chaos";
  /// builtin, generated (from the seed) or the path of a catalog file.
  std::string catalog = "builtin";
  int64_t chats = 48;
  /// After --duration the chaos goes on until the record holds at least
  /// this many acknowledged requests of each op (a commit count a check
  /// relies on, reached however slow the machine).
  std::vector<std::pair<op, uint64_t>> min_acknowledged;
  size_t gateways = 4;
  size_t workers = 8;
  bool self_test_violation = false;
  bool self_test_pocket_move = false;
  bool self_test_over_capture = false;
  bool self_test_cancel_charged = false;
  bool self_test_uncertain_charged = false;
  bool self_test_uncertain_left = false;
  bool self_test_ledger_chain = false;
  /// Charges one credit of a grant without the balance pocket: the check
  /// that the balance is what its grants have left must see it.
  bool self_test_grant_left = false;
  bool self_test_sole_grant = false;
  /// The grant invariants' forgeries (20 to 23): a grant whose credits the
  /// ledger does not give, a hold on a grant that had expired, a hold that
  /// passed over a grant, a grant voided twice.
  bool self_test_grant_conserved = false;
  bool self_test_hold_expired = false;
  bool self_test_grant_order = false;
  bool self_test_void_twice = false;
  /// Deletes one event before the audit (or, without any, writes one no
  /// change made): the check of an event with each change must see it.
  bool self_test_lost_event = false;
  /// A start acknowledged to a second worker, added to the record.
  bool self_test_second_start = false;
  /// A planted job straddles a window's turn; its charge is then made to
  /// take its daily part from the new window's pockets too.
  bool self_test_window_paid_twice = false;
  /// --postgres-ha: the servers commit with synchronous_commit = local and
  /// every failover stalls replication first, so that it loses what was
  /// acknowledged meanwhile: invariant 1 must see it.
  bool self_test_lost_commit = false;
  bool help = false;
  bool worker_process = false; ///< internal: run as a killable worker
  worker_process_args worker;
};

/// Throws usage_error.
chaos_options parse_options(int argc, char** argv);

extern const char* const usage_text;

} // namespace chargeonce::chaos
