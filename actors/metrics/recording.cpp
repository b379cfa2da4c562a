// SPDX-License-Identifier: Apache-2.0
#include "actors/metrics/recording.hpp"

#include "actors/metrics/series.hpp"
#include "protocol/errors.hpp"

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/sec.hpp>

namespace chargeonce::metrics {

namespace detail {

registry series;

const std::array<std::string, outcome_slots>& outcome_names() {
  static const auto names = [] {
    std::array<std::string, outcome_slots> out;
    out[0] = "ok";
    for (size_t i = 1; i < ec_slots_max; ++i)
      if (std::string name = to_string(static_cast<ec>(i)); name != "unknown")
        out[i] = name;
    out[slot_timeout] = caf::to_string(caf::sec::request_timeout);
    out[slot_receiver_down] = caf::to_string(caf::sec::request_receiver_down);
    out[slot_other] = "other";
    return out;
  }();
  return names;
}

double unavailable_seconds() {
  std::lock_guard<std::mutex> guard{series.unavailable_mtx};
  auto us = series.unavailable_us;
  if (series.unavailable_members > 0)
    us += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now() - series.unavailable_since)
        .count());
  return static_cast<double>(us) / 1e6;
}

} // namespace detail

namespace {

using namespace detail;

size_t outcome_slot(const caf::error& err) {
  if (!err)
    return 0;
  if (err.category() == caf::atom(error_category_name)) {
    auto code = static_cast<size_t>(err.code());
    return code < ec_slots_max && !outcome_names()[code].empty() ? code
                                                                 : slot_other;
  }
  if (err == caf::sec::request_timeout)
    return slot_timeout;
  if (err == caf::sec::request_receiver_down)
    return slot_receiver_down;
  return slot_other;
}

} // namespace

void record_operation(operation_type op, const caf::error& err,
                      std::chrono::nanoseconds elapsed) {
  auto i = static_cast<size_t>(op);
  auto slot = outcome_slot(err);
  series.operations[i][slot].add();
  if (slot == static_cast<size_t>(ec::internal))
    series.internal_errors[i].add();
  series.durations[i].observe(latency_bounds,
                              std::chrono::duration<double>(elapsed).count());
}

void count_queue_notice() {
  series.queue_notices.add();
}

void count_cancel_request() {
  series.cancel_requests.add();
}

void count_subscriber_cut_off() {
  series.subscribers_cut_off.add();
}

void count_reconcile_needed() {
  series.reconcile_needed.add();
}

void count_release(std::string_view reason) {
  size_t i = 0;
  while (i + 1 < release_reasons.size() && reason != release_reasons[i])
    ++i;
  series.releases[i].add();
}

void count_reactivations(uint64_t chats) {
  series.reactivations.add(chats);
}

void count_sweep() {
  series.sweeps.add();
}

void count_persistence_restart() {
  series.persistence_restarts.add();
}

void count_storage_error() {
  series.storage_errors.add();
}

void count_passivation() {
  series.passivations.add();
}

void chat_actor_started() {
  series.chat_actors.add(1);
}

void chat_actor_stopped() {
  series.chat_actors.add(-1);
}

void observe_persistence_batch(size_t operations) {
  series.batch_sizes.observe(batch_bounds, static_cast<double>(operations));
}

queue_depth_share::~queue_depth_share() {
  series.queue_depth.add(-current_);
}

void queue_depth_share::set(int64_t depth) {
  series.queue_depth.add(depth - current_);
  current_ = depth;
}

void count_reconnects(uint64_t n) {
  series.reconnects.add(n);
}

unavailable_share::~unavailable_share() {
  set(false);
}

void unavailable_share::set(bool unavailable) {
  if (unavailable == unavailable_)
    return;
  unavailable_ = unavailable;
  std::lock_guard<std::mutex> guard{series.unavailable_mtx};
  auto now = std::chrono::steady_clock::now();
  if (unavailable) {
    if (series.unavailable_members++ == 0)
      series.unavailable_since = now;
    return;
  }
  if (--series.unavailable_members == 0)
    series.unavailable_us += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(
        now - series.unavailable_since)
        .count());
}

void set_persistence_queue_max(size_t operations) {
  series.queue_max.set(static_cast<int64_t>(operations));
}

void set_active_reservations(const active_count& n) {
  series.active_reservations.set(n.free + n.premium);
  series.active_reservations_free.set(n.free);
  series.active_reservations_premium.set(n.premium);
  series.active_reservations_known.store(true, relaxed);
}

} // namespace chargeonce::metrics
