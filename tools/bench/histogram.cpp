// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/histogram.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace chargeonce {

namespace {

/// The first word of a serialized histogram; a new format gets a new tag.
constexpr const char* serial_tag = "hist1";

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

std::string histogram::serialize() const {
  std::ostringstream out;
  // %La writes the sum in hexadecimal floating point: exact, so that the
  // mean of merged processes equals the mean of one.
  char sum[64];
  std::snprintf(sum, sizeof(sum), "%La", sum_);
  size_t used = 0;
  for (auto n : counts_)
    used += n > 0 ? 1 : 0;
  out << serial_tag << ' ' << count_ << ' ' << min_ << ' ' << max_ << ' ' << sum
      << ' ' << used;
  for (size_t i = 0; i < counts_.size(); ++i)
    if (counts_[i] > 0)
      out << ' ' << i << ' ' << counts_[i];
  return out.str();
}

std::optional<histogram> histogram::deserialize(const std::string& text) {
  std::istringstream in{text};
  std::string tag;
  std::string sum;
  histogram out;
  size_t used = 0;
  if (!(in >> tag >> out.count_ >> out.min_ >> out.max_ >> sum >> used)
      || tag != serial_tag || used > out.counts_.size())
    return std::nullopt;
  char* end = nullptr;
  out.sum_ = std::strtold(sum.c_str(), &end);
  if (end != sum.c_str() + sum.size())
    return std::nullopt;
  uint64_t total = 0;
  for (size_t k = 0; k < used; ++k) {
    size_t i = 0;
    uint64_t n = 0;
    if (!(in >> i >> n) || i >= out.counts_.size() || n == 0)
      return std::nullopt;
    out.counts_[i] += n;
    total += n;
  }
  std::string rest;
  if (in >> rest || total != out.count_)
    return std::nullopt;
  return out;
}

} // namespace chargeonce
