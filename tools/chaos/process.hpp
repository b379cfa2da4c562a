// SPDX-License-Identifier: Apache-2.0
// chargeonce-chaos's process control: the chargeonce-server processes (each
// behind its own proxy), the embedded Postgres (restart, SIGSTOP/SIGCONT)
// and the worker processes it kills. Every child is forked from the main
// thread with PR_SET_PDEATHSIG, so none outlives the chaos tool.
#pragma once

#include "main/server/embedded_cluster.hpp"
#include "tools/chaos/proxy.hpp"

#include <chrono>
#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

namespace chargeonce::chaos {

/// fork + exec `argv` with stdout/stderr appended to `log` (or, with
/// `out_pipe`, stdout into a pipe whose read end is stored there).
pid_t spawn(const std::vector<std::string>& argv, const std::string& log,
            int* out_pipe = nullptr);

/// SIGKILL and reap; true if it was still running.
bool kill_and_reap(pid_t pid);

/// SIGTERM, wait up to `grace`, then SIGKILL; reaps.
void stop_and_reap(pid_t pid, std::chrono::milliseconds grace);

/// Server options that make locks come and go within a short run, in
/// milliseconds (the auditor judges deadlines by the same numbers).
struct server_timings {
  int64_t sweep_interval_ms = 1000;
  int64_t max_job_duration_ms = 3000;
  int64_t sweep_timeout_ms = 6000; ///< at least 2 x max-job-duration
  int64_t lease_duration_ms = 2000;
  int64_t store_timeout_ms = 2000;
  int64_t statement_timeout_ms = 2000;
  /// Short, so that a run sees uncertain jobs released unresolved.
  int64_t reconcile_timeout_ms = 6000;
  /// Refills write ledger rows like every other change: a run sees many
  /// windows refilled, which the auditor replays.
  int64_t refill_interval_ms = 3000;
};

/// The chargeonce-server processes and their proxies.
class server_set {
public:
  /// `catalog`: the servers' catalog file; empty: the built-in one.
  /// `extra`: more options for every server.
  server_set(std::string binary, std::string dsn, std::string dir,
             server_timings timings, size_t count, std::string catalog = {},
             std::vector<std::string> extra = {});
  ~server_set();

  /// Starts server `i` and waits for its port file; false on failure.
  bool start(size_t i);
  /// kill -9; the proxy's connections to it reset.
  void kill(size_t i);
  void stop_all();

  size_t size() const { return pids_.size(); }
  /// Proxy ports, where clients connect.
  std::vector<uint16_t> ports() const;
  proxy& proxy_of(size_t i) { return *proxies_[i]; }
  std::string log_of(size_t i) const;

private:
  std::string binary_;
  std::string dsn_;
  std::string dir_;
  std::string catalog_; ///< --catalog of every server; empty: none
  std::vector<std::string> extra_;
  server_timings timings_;
  std::vector<pid_t> pids_;
  std::vector<uint16_t> server_ports_;
  std::vector<std::unique_ptr<proxy>> proxies_;
};

/// The embedded cluster under `dir`, with the faults done to it.
class postgres_control {
public:
  explicit postgres_control(std::string dir);

  /// Starts (or reuses) the cluster; returns its DSN or an error text.
  std::string start(std::string& error);
  /// Fast shutdown by signal, wait until gone. False on failure.
  bool stop();
  /// At the end of the run: pg_ctl stop, or the signal if pg_ctl had no
  /// reason to (a cluster that was already running when we came).
  void shutdown();
  /// SIGSTOP the postmaster, then every child of it; the pids stopped.
  std::vector<pid_t> freeze();
  void thaw(const std::vector<pid_t>& pids);
  const std::string& dir() const { return cluster_.dir(); }

private:
  pid_t postmaster() const;
  embedded_cluster cluster_;
};

} // namespace chargeonce::chaos
