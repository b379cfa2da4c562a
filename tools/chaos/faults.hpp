// SPDX-License-Identifier: Apache-2.0
// chargeonce-chaos's fault schedule: one fault at a time, chosen by the
// seeded generator, each one undone (server restarted, Postgres started or
// thawed) before the next begins. Runs on the main thread, which forked
// every child (PR_SET_PDEATHSIG is tied to the forking thread).
#pragma once

#include "tools/chaos/formation.hpp"
#include "tools/chaos/process.hpp"
#include "tools/chaos/record.hpp"

#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace chargeonce::chaos {

struct fault_options {
  std::vector<fault> enabled;
  std::string dsn;      ///< for pg_terminate_backend
  std::string app_name; ///< the servers' application_name
  std::string self_exe; ///< this binary, for worker processes
  std::string dir;      ///< logs of worker processes
  uint64_t seed = 1;
  chat_id first_process_chat = 0; ///< chats first+1 … first+count
  int64_t process_chats = 8;
  std::string process_kind = "image"; ///< what worker processes reserve
  int64_t gap_min_ms = 1500;          ///< quiet time between two faults
  int64_t gap_max_ms = 4000;
  /// --self-test-lost-commit: each failover first stalls replication this
  /// long (0: never).
  int64_t stall_replication_ms = 0;
  /// One request through the servers, recorded (workload::probe): sent
  /// while Postgres is down, so that every outage has an answer the
  /// auditor judges (invariant 5) and every failover one that felt it.
  std::function<op_record()> probe;
  /// While replication is stalled: a job reserved, started and committed
  /// through the servers, each request sent only while `stalled()` holds;
  /// true once its commit was acknowledged (workload::commit_while).
  std::function<bool(const std::function<bool()>& stalled)> commit_while;
};

class fault_injector {
public:
  /// `pg` (the embedded cluster) or `ha` (a formation) may be null when
  /// no enabled fault needs it.
  fault_injector(recorder& rec, server_set& servers, postgres_control* pg,
                 ha_formation* ha, fault_options opts);

  /// Injects every enabled type once (in a seeded order), however long
  /// that takes, then repeats them at random until `deadline`. False if the
  /// harness itself failed (a server or Postgres did not come back).
  bool run(std::chrono::steady_clock::time_point deadline);

  /// What went wrong when run() returned false.
  const std::string& error() const { return error_; }

private:
  bool inject(fault f);
  bool kill_server();
  bool terminate_backend();
  bool restart_postgres();
  bool pause_postgres();
  bool drop_connection();
  bool kill_worker();
  bool failover(bool whole_node);
  /// opts_.probe while Postgres is down; " probe=OUTCOME probe_ms=N".
  std::string probe_outage();
  int64_t uniform(int64_t lo, int64_t hi);
  void sleep_ms(int64_t ms);

  recorder& rec_;
  server_set& servers_;
  postgres_control* pg_;
  ha_formation* ha_;
  fault_options opts_;
  std::mt19937_64 rng_;
  uint64_t workers_spawned_ = 0;
  std::string error_;
  fault_record current_;
};

} // namespace chargeonce::chaos
