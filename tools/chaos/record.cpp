// SPDX-License-Identifier: Apache-2.0
#include "tools/chaos/record.hpp"

#include "protocol/errors.hpp"

#include <caf/error.hpp>

namespace chargeonce::chaos {

int64_t now_us() {
  using namespace std::chrono;
  return duration_cast<microseconds>(system_clock::now().time_since_epoch())
    .count();
}

bool op_from_string(const std::string& name, op& out) {
  for (size_t i = 0; i < op_count; ++i)
    if (name == to_string(static_cast<op>(i))) {
      out = static_cast<op>(i);
      return true;
    }
  return false;
}

const char* to_string(op x) {
  static constexpr const char* names[] = {
    "touch",     "reserve",   "cancel",  "status",     "start",
    "heartbeat", "commit",    "fail",    "create",     "top_up",
    "premium",   "uncertain", "resolve", "void_grant",
  };
  return names[static_cast<size_t>(x)];
}

std::string outcome_name(uint8_t code) {
  if (code == static_cast<uint8_t>(outcome::ok))
    return "ok";
  if (code == static_cast<uint8_t>(outcome::transport))
    return "transport_error";
  if (code == static_cast<uint8_t>(outcome::pending))
    return "no_answer";
  return to_string(static_cast<ec>(code));
}

void set_error(op_record& r, const caf::error& err) {
  r.acked_us = now_us();
  if (err.category() == caf::atom(error_category_name) && err.code() != 0)
    r.result = err.code();
  else
    r.result = static_cast<uint8_t>(outcome::transport);
}

const char* to_string(fault x) {
  static constexpr const char* names[] = {
    "kill-server",    "terminate-backend", "restart-postgres",
    "pause-postgres", "drop-connection",   "kill-worker",
    "failover",       "failover-node",
  };
  return names[static_cast<size_t>(x)];
}

bool fault_from_string(const std::string& name, fault& out) {
  for (size_t i = 0; i < fault_count; ++i)
    if (name == to_string(static_cast<fault>(i))) {
      out = static_cast<fault>(i);
      return true;
    }
  return false;
}

void recorder::add(const op_record& r) {
  std::lock_guard<std::mutex> guard{mtx_};
  ops.push_back(r);
  if (r.ok())
    ++acknowledged_[static_cast<size_t>(r.what)];
}

uint64_t recorder::acknowledged(op what) const {
  return acknowledged_[static_cast<size_t>(what)];
}

void recorder::add(fault_record f) {
  std::lock_guard<std::mutex> guard{mtx_};
  faults.push_back(std::move(f));
}

void recorder::add(outage o) {
  std::lock_guard<std::mutex> guard{mtx_};
  outages.push_back(o);
}

void recorder::add_process_release(reservation_id id) {
  std::lock_guard<std::mutex> guard{mtx_};
  killed_jobs.push_back(id);
}

} // namespace chargeonce::chaos
