// SPDX-License-Identifier: Apache-2.0
// A log-linear latency histogram in the spirit of HdrHistogram: fixed
// relative precision, constant memory, mergeable, so percentiles of many
// threads come from one distribution and never from averaged percentiles.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace chargeonce {

/// Counts microsecond values in buckets whose width grows with the value:
/// exact below 2 × sub_buckets, then sub_buckets buckets per power of two,
/// i.e. a relative error below 1 / sub_buckets (0.8 %). Not thread-safe:
/// give each thread its own and merge them afterwards.
class histogram {
public:
  /// log2 of the buckets per power of two; 7 gives 128, 0.78 % precision.
  static constexpr uint32_t sub_bucket_bits = 7;
  static constexpr uint64_t sub_buckets = uint64_t{1} << sub_bucket_bits;
  /// Values at or above this (2^36 µs, about 19 hours) share the last
  /// bucket; max() still reports them exactly.
  static constexpr uint64_t trackable_max = uint64_t{1} << 36;

  histogram();

  void record(uint64_t value);

  /// Adds every value `other` has recorded.
  void merge(const histogram& other);

  uint64_t count() const { return count_; }
  uint64_t min() const { return count_ == 0 ? 0 : min_; }
  uint64_t max() const { return max_; }

  /// The exact mean of all values (sums are kept, not averaged averages);
  /// 0 when empty.
  double mean() const;

  /// The smallest value v such that at least `p` percent of the recorded
  /// values are <= v, up to the bucket's precision; never below min() nor
  /// above max(). 0 when empty. `p` in (0, 100].
  uint64_t percentile(double p) const;

  /// One line of text (no newline) that deserialize() turns back into an
  /// equal histogram: how a bench client process hands its latencies to
  /// the parent. Only non-empty buckets are written.
  std::string serialize() const;

  /// The histogram serialize() wrote; nullopt for any other text (a wrong
  /// tag, a bucket out of range, counts that do not add up).
  static std::optional<histogram> deserialize(const std::string& text);

  /// The bucket a value falls into.
  static size_t index_of(uint64_t value);

  /// The smallest and the largest value of a bucket.
  static uint64_t lowest_equivalent(size_t index);
  static uint64_t highest_equivalent(size_t index);

  /// How many buckets every histogram has.
  static size_t bucket_count();

private:
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  uint64_t min_ = 0;
  uint64_t max_ = 0;
  long double sum_ = 0; ///< exact for any realistic run length
};

} // namespace chargeonce
