// SPDX-License-Identifier: Apache-2.0
// Internal to actors/metrics/: the storage both halves share. recording.cpp
// defines the one instance and writes it; rendering.cpp reads it.
#pragma once

#include "actors/metrics/recording.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

namespace chargeonce::metrics::detail {

inline constexpr auto relaxed = std::memory_order_relaxed;

// -- building blocks ----------------------------------------------------------

struct counter {
  std::atomic<uint64_t> value{0};
  void add(uint64_t n = 1) { value.fetch_add(n, relaxed); }
  uint64_t get() const { return value.load(relaxed); }
};

struct gauge {
  std::atomic<int64_t> value{0};
  void add(int64_t n) { value.fetch_add(n, relaxed); }
  void set(int64_t n) { value.store(n, relaxed); }
  int64_t get() const { return value.load(relaxed); }
};

/// Fixed upper bounds (`le`), a count per bucket (not cumulative: one
/// increment per observation) and the sum. The +Inf bucket and `_count` are
/// both the total of the buckets at render time, so they always agree.
template <size_t N>
class histogram {
public:
  using bounds_type = std::array<double, N>;

  void observe(const bounds_type& bounds, double x) {
    auto i = std::lower_bound(bounds.begin(), bounds.end(), x) - bounds.begin();
    buckets_[static_cast<size_t>(i)].fetch_add(1, relaxed);
    auto sum = sum_.load(relaxed);
    while (!sum_.compare_exchange_weak(sum, sum + x, relaxed))
      ; // another thread added meanwhile: retry with its sum
  }

  /// Cumulative counts, the last one being +Inf.
  std::array<uint64_t, N + 1> cumulative() const {
    std::array<uint64_t, N + 1> out{};
    uint64_t total = 0;
    for (size_t i = 0; i <= N; ++i)
      out[i] = total += buckets_[i].load(relaxed);
    return out;
  }

  double sum() const { return sum_.load(relaxed); }

private:
  std::array<std::atomic<uint64_t>, N + 1> buckets_{}; ///< last: above all
  std::atomic<double> sum_{0};
};

// -- label sets ---------------------------------------------------------------

/// Outcome slots: 0 is ok, then one per chargeonce::ec code (their names
/// from to_string, so a code appended later gets its own label), then the
/// CAF errors a relay can see, then everything else.
inline constexpr size_t ec_slots_max = 32;
inline constexpr size_t slot_timeout = ec_slots_max;
inline constexpr size_t slot_receiver_down = ec_slots_max + 1;
inline constexpr size_t slot_other = ec_slots_max + 2;
inline constexpr size_t outcome_slots = ec_slots_max + 3;

/// The label of each outcome slot; empty for codes chargeonce does not have.
const std::array<std::string, outcome_slots>& outcome_names();

inline constexpr std::array<const char*, 4> release_reasons = {
  "lease_expired", "sweep_timeout", "unresolved", "other"};

/// From 1 ms (a local Postgres round trip) to the facades' 60 s relay
/// timeout.
inline constexpr std::array<double, 14> latency_bounds = {
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60};

/// Powers of two up to a large batch.
inline constexpr std::array<double, 10> batch_bounds = {1,  2,  4,   8,   16,
                                                        32, 64, 128, 256, 512};

// -- the registry -------------------------------------------------------------

/// Every series of the process.
struct registry {
  std::array<std::array<counter, outcome_slots>, operation_count> operations;
  std::array<histogram<latency_bounds.size()>, operation_count> durations;
  std::array<counter, operation_count> internal_errors;
  counter queue_notices;
  counter cancel_requests;
  counter reconcile_needed;
  counter subscribers_cut_off;
  std::array<counter, release_reasons.size()> releases;
  counter reactivations;
  counter sweeps;
  counter persistence_restarts;
  counter storage_errors;
  counter reconnects;
  /// Persistence actors without a writable Postgres now, since when the
  /// first of them, and the seconds (in microseconds) of earlier spells.
  std::mutex unavailable_mtx;
  int64_t unavailable_members = 0;
  std::chrono::steady_clock::time_point unavailable_since;
  uint64_t unavailable_us = 0;
  counter passivations;
  gauge chat_actors;
  histogram<batch_bounds.size()> batch_sizes;
  gauge queue_depth;
  gauge queue_max; ///< 0 until a persistence actor set it
  gauge active_reservations;
  gauge active_reservations_free;
  gauge active_reservations_premium;
  std::atomic<bool> active_reservations_known{false};
};

/// The one instance (defined in recording.cpp).
extern registry series;

/// Seconds without a writable Postgres so far, the spell going on included.
double unavailable_seconds();

} // namespace chargeonce::metrics::detail
