// SPDX-License-Identifier: Apache-2.0
// chargeonce-chaos's Postgres when --postgres-ha: a pg_auto_failover
// formation (a monitor, a primary and its synchronous standby) brought up,
// failed over and stopped by scripts/ha-cluster, whose output it reads.
#pragma once

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

  /// Kills the primary's Postgres (-9) and waits until the monitor has
  /// promoted the standby; "primary=HOST:PORT", or "" with `error`.
  std::string failover(std::string& error);

  void stop();

  /// Ports above the ephemeral range (outgoing connections must not hold
  /// them), apart for each seed.
  static int port_base_for(uint64_t seed);

private:
  /// Runs the script with `command`; its last line of stdout, or "" and
  /// why in `error`.
  std::string run(const char* command, std::string& error);

  std::string script_;
  std::string dir_;
  int port_base_;
  bool started_ = false;
};

} // namespace chargeonce::chaos
