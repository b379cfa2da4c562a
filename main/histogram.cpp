// SPDX-License-Identifier: Apache-2.0
#include "main/histogram.hpp"

#include <algorithm>
#include <cmath>

namespace chargeonce {

namespace {

/// Below this every value has a bucket of its own.
constexpr uint64_t linear_limit = 2 * histogram::sub_buckets;

uint32_t highest_bit(uint64_t value) {
  return 63 - static_cast<uint32_t>(__builtin_clzll(value));
}

} // namespace

histogram::histogram() : counts_(bucket_count(), 0) {}

size_t histogram::index_of(uint64_t value) {
  if (value < linear_limit)
    return static_cast<size_t>(value);
  value = std::min(value, trackable_max - 1);
  // The top sub_bucket_bits + 1 bits pick the bucket: the rest is below
  // the precision we promise.
  auto shift = highest_bit(value) - sub_bucket_bits;
  auto top = value >> shift; // in [sub_buckets, 2 * sub_buckets)
  return static_cast<size_t>(linear_limit + (shift - 1) * sub_buckets
                             + (top - sub_buckets));
}

uint64_t histogram::lowest_equivalent(size_t index) {
  if (index < linear_limit)
    return index;
  auto rest = index - linear_limit;
  auto shift = rest / sub_buckets + 1;
  auto top = sub_buckets + rest % sub_buckets;
  return top << shift;
}

uint64_t histogram::highest_equivalent(size_t index) {
  if (index < linear_limit)
    return index;
  auto shift = (index - linear_limit) / sub_buckets + 1;
  return lowest_equivalent(index) + (uint64_t{1} << shift) - 1;
}

size_t histogram::bucket_count() {
  return index_of(trackable_max - 1) + 1;
}

void histogram::record(uint64_t value) {
  ++counts_[index_of(value)];
  min_ = count_ == 0 ? value : std::min(min_, value);
  max_ = std::max(max_, value);
  ++count_;
  sum_ += value;
}

void histogram::merge(const histogram& other) {
  if (other.count_ == 0)
    return;
  for (size_t i = 0; i < counts_.size(); ++i)
    counts_[i] += other.counts_[i];
  min_ = count_ == 0 ? other.min_ : std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
  count_ += other.count_;
  sum_ += other.sum_;
}

double histogram::mean() const {
  return count_ == 0 ? 0.0 : static_cast<double>(sum_ / count_);
}

uint64_t histogram::percentile(double p) const {
  if (count_ == 0)
    return 0;
  // The rank of the value we want; the epsilon keeps 99.9 % of 1000 at
  // rank 999 despite binary floating point.
  auto exact = static_cast<long double>(p) * count_ / 100;
  auto rank = static_cast<uint64_t>(std::ceil(exact - 1e-9L));
  rank = std::clamp<uint64_t>(rank, 1, count_);
  uint64_t seen = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    seen += counts_[i];
    if (seen >= rank)
      return std::clamp(highest_equivalent(i), min_, max_);
  }
  return max_;
}

} // namespace chargeonce
