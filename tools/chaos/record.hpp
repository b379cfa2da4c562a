// SPDX-License-Identifier: Apache-2.0
// chargeonce-chaos's record: every request it sent and every answer it got
// (with ids and amounts), every fault it injected and when Postgres was
// known to be down. The auditor judges Postgres against this record.
#pragma once

#include "protocol/types.hpp"

#include <caf/error.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace chargeonce::chaos {

/// Microseconds since the epoch (the system clock, which Postgres' now()
/// shares on this machine).
int64_t now_us();

enum class op : uint8_t {
  touch,
  reserve,
  cancel,
  status,
  start,
  heartbeat,
  commit,
  fail,
  create,
  top_up,
  premium,
  uncertain,
  resolve,
  void_grant,
};
constexpr size_t op_count = 14;
const char* to_string(op x);
bool op_from_string(const std::string& name, op& out);

/// The answer: ok, one of our error codes (ec, 1…), or a transport problem
/// (no answer: the outcome is unknown).
enum class outcome : uint8_t { ok = 0, transport = 200, pending = 201 };
std::string outcome_name(uint8_t code);

/// One request and its answer. `id` is the reservation the request named,
/// or the one the answer returned (reserve, cancel).
struct op_record {
  int64_t sent_us = 0;
  int64_t acked_us = 0;   ///< when the answer (or the transport error) came
  int64_t created_us = 0; ///< a returned reservation's created_at
  chat_id chat = 0;
  reservation_id id = 0;
  uint64_t key = 0; ///< request_id / payment_id number
  pockets amounts;  ///< held (reserve, start, fail, cancel) or charged
  /// A returned reservation's units (its hold pays `held_units` of them per
  /// pocket); a commit's: the units it named (0: all held).
  int32_t units = 0;
  pockets held_units;
  int32_t credits = 0;
  /// A top-up: the grant its receipt names; a void: the grant it named (0
  /// when it named the top-up's payment id instead).
  int64_t grant = 0;
  uint32_t actor = 0; ///< gateway/worker/admin thread or worker process
  op what = op::status;
  uint8_t result = static_cast<uint8_t>(outcome::pending);
  kind job = kind::text;
  /// The answer returned a reservation that had already ended (a reserve
  /// retried with the request id of a finished job): it proves nothing
  /// about the job being active when it came.
  bool ended = false;
  /// The returned reservation is marked cancel_requested: a cancel of a
  /// started job under the `request` policy (the job lives on).
  bool cancel_requested = false;
  /// A resolve: what it said the provider did ("succeeded" or "failed").
  std::string resolution;
  /// A start: the worker it named ("" for none).
  std::string worker{};
  /// A returned reservation: the window its hold was taken in; a receipt
  /// or a resolution: the window that paid; a status: the chat's window.
  int64_t window = 0;

  bool ok() const { return result == static_cast<uint8_t>(outcome::ok); }
};

/// Sets `r.result` (and `r.acked_us`) from an error.
void set_error(op_record& r, const caf::error& err);

enum class fault : uint8_t {
  kill_server,
  terminate_backend,
  restart_postgres,
  pause_postgres,
  drop_connection,
  kill_worker,
  failover, ///< --postgres-ha only: the primary's Postgres killed, promoted
  /// --postgres-ha only: the primary's whole node (pg_autoctl and Postgres)
  /// killed, the standby promoted, the node started again.
  failover_node,
};
constexpr size_t fault_count = 8;
const char* to_string(fault x);
bool fault_from_string(const std::string& name, fault& out);

/// One injected fault; `detail` says what exactly (server index, pids, …).
struct fault_record {
  fault what = fault::kill_server;
  int64_t begin_us = 0;
  int64_t end_us = 0;
  std::string detail;
  /// A failover: from the kill to a writable new primary, as the script
  /// measured it (0 for other faults).
  int64_t no_primary_ms = 0;
};

/// [from, to]: Postgres was stopped or frozen for the whole interval.
struct outage {
  int64_t from_us = 0;
  int64_t to_us = 0;
};

/// Thread-safe; appended to during the run, read only after it.
class recorder {
public:
  void add(const op_record& r);
  void add(fault_record f);
  void add(outage o);
  void add_process_release(reservation_id id); ///< a killed worker's job
  /// How many requests of `what` were answered ok so far (while the run
  /// goes on, too).
  uint64_t acknowledged(op what) const;

  std::vector<op_record> ops;
  std::vector<fault_record> faults;
  std::vector<outage> outages;
  std::vector<reservation_id> killed_jobs;

private:
  std::mutex mtx_;
  std::array<std::atomic<uint64_t>, op_count> acknowledged_{};
};

} // namespace chargeonce::chaos
