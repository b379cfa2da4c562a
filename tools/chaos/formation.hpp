// SPDX-License-Identifier: Apache-2.0
// chargeonce-chaos's Postgres when --postgres-ha: a pg_auto_failover
// formation (a monitor, a primary and its synchronous standby) brought up,
// failed over and stopped by scripts/ha-cluster, whose output it reads.
#pragma once

#include <cstdint>
#include <string>

namespace chargeonce::chaos {

class ha_formation {
public:
  /// `script`: scripts/ha-cluster; the formation lives in `dir` on three
  /// ports from `port_base`; the script's stderr goes to `dir`.log.
  ha_formation(std::string script, std::string dir, int port_base);
  ha_formation(const ha_formation&) = delete;
  ha_formation& operator=(const ha_formation&) = delete;
  /// Stops the formation if it was started.
  ~ha_formation();

  /// Creates or starts it; the multi-host connection string (its last line
  /// of output), or "" with the reason in `error`.
  std::string start(std::string& error);

  /// Kills the primary's Postgres (-9), or with `whole_node` all of its
  /// node (pg_autoctl too), and waits until the monitor has promoted the
  /// standby; "primary=HOST:PORT", or "" with `error`. `stall_ms` > 0
  /// stalls replication that long before the kill (a self-test: see
  /// `ha-cluster failover --stall-replication`). `no_primary_ms`: from the
  /// kill to the promotion, as the script measured it (-1 if it did not
  /// say).
  std::string failover(bool whole_node, int64_t stall_ms,
                       int64_t& no_primary_ms, std::string& error);

  /// Waits until a primary and its in-sync standby run again, i.e. the
  /// old primary has rejoined after a failover (`start` on the running
  /// formation, which also runs a node's pg_autoctl that is gone); false
  /// with `error` if that did not happen within the script's timeout.
  bool wait_ready(std::string& error);

  void stop();

  /// Where the script's stderr goes (what it says it does, as it does it).
  std::string log_path() const { return dir_ + ".log"; }

  /// Ports above the ephemeral range (outgoing connections must not hold
  /// them), apart for each seed.
  static int port_base_for(uint64_t seed);

private:
  /// Runs the script with `command`; its last line of stdout, or "" and
  /// why in `error`. What it wrote to stderr (appended to the log) is left
  /// in `stderr_`.
  std::string run(const std::string& command, std::string& error);

  std::string script_;
  std::string dir_;
  int port_base_;
  bool started_ = false;
  std::string stderr_;
};

} // namespace chargeonce::chaos
