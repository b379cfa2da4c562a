// SPDX-License-Identifier: Apache-2.0
// The bench's latency histogram: bounded relative error, exact small values,
// and merging equal to recording everything in one place.
#include "tools/bench/histogram.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace chargeonce;

namespace {

/// The exact percentile of a sorted sample: the smallest value with at
/// least p % of the sample at or below it.
uint64_t exact_percentile(const std::vector<uint64_t>& sorted, double p) {
  auto rank = static_cast<size_t>(std::ceil(p * sorted.size() / 100 - 1e-9));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

double relative_error(uint64_t got, uint64_t want) {
  return std::abs(static_cast<double>(got) - static_cast<double>(want))
         / static_cast<double>(want);
}

} // namespace

TEST_SUITE("main.histogram") {

  TEST_CASE("an empty histogram reports zeros") {
    histogram h;
    CHECK(h.count() == 0);
    CHECK(h.percentile(50) == 0);
    CHECK(h.percentile(99.9) == 0);
    CHECK(h.min() == 0);
    CHECK(h.max() == 0);
    CHECK(h.mean() == 0.0);
  }

  TEST_CASE("values below 256 are kept exactly") {
    histogram h;
    for (uint64_t v = 1; v <= 200; ++v)
      h.record(v);
    CHECK(h.percentile(50) == 100);
    CHECK(h.percentile(99) == 198);
    CHECK(h.percentile(100) == 200);
    CHECK(h.min() == 1);
    CHECK(h.mean() == doctest::Approx(100.5));
  }

  TEST_CASE("every bucket holds its own bounds and buckets tile the range") {
    for (size_t i = 0; i + 1 < histogram::bucket_count(); ++i) {
      auto low = histogram::lowest_equivalent(i);
      auto high = histogram::highest_equivalent(i);
      REQUIRE(histogram::index_of(low) == i);
      REQUIRE(histogram::index_of(high) == i);
      REQUIRE(histogram::lowest_equivalent(i + 1) == high + 1);
    }
  }

  TEST_CASE("a bucket is narrower than 1 % of its values") {
    for (size_t i = 0; i < histogram::bucket_count(); ++i) {
      auto low = histogram::lowest_equivalent(i);
      auto high = histogram::highest_equivalent(i);
      if (low > 0)
        REQUIRE(static_cast<double>(high - low) / low < 0.01);
    }
  }

  TEST_CASE("percentiles of a long-tailed sample are within 1 %") {
    std::mt19937_64 rng{42};
    std::lognormal_distribution<double> latency{7.0, 1.2}; // ~1 ms median
    std::vector<uint64_t> sample;
    histogram h;
    for (int i = 0; i < 100000; ++i) {
      auto v = static_cast<uint64_t>(latency(rng)) + 1;
      sample.push_back(v);
      h.record(v);
    }
    std::sort(sample.begin(), sample.end());
    for (double p : {1.0, 50.0, 90.0, 99.0, 99.9, 99.99}) {
      CAPTURE(p);
      CHECK(relative_error(h.percentile(p), exact_percentile(sample, p))
            < 0.01);
    }
    CHECK(h.percentile(100) == sample.back());
    CHECK(h.min() == sample.front());
  }

  TEST_CASE("merging equals recording everything into one histogram") {
    std::mt19937_64 rng{7};
    std::uniform_int_distribution<uint64_t> value{1, 5000000};
    histogram all;
    histogram parts[4];
    for (int i = 0; i < 40000; ++i) {
      auto v = value(rng);
      all.record(v);
      parts[i % 4].record(v);
    }
    histogram merged;
    for (const auto& part : parts)
      merged.merge(part);
    CHECK(merged.count() == all.count());
    CHECK(merged.min() == all.min());
    CHECK(merged.max() == all.max());
    CHECK(merged.mean() == doctest::Approx(all.mean()));
    for (double p : {50.0, 99.0, 99.9})
      CHECK(merged.percentile(p) == all.percentile(p));
  }

  TEST_CASE("a rare slow value shows at p99.9, not at p99") {
    histogram h;
    for (int i = 0; i < 998; ++i)
      h.record(1000);
    h.record(50000);
    h.record(50000);
    CHECK(relative_error(h.percentile(99), 1000) < 0.01);
    CHECK(relative_error(h.percentile(99.9), 50000) < 0.01);
  }

  TEST_CASE("values beyond the trackable range clamp but max stays exact") {
    histogram h;
    h.record(histogram::trackable_max * 4);
    CHECK(h.max() == histogram::trackable_max * 4);
    CHECK(h.percentile(50) == histogram::trackable_max * 4);
    CHECK(histogram::index_of(histogram::trackable_max * 4)
          == histogram::bucket_count() - 1);
  }

  TEST_CASE("a serialized histogram comes back equal, merges included") {
    std::mt19937_64 rng{11};
    std::lognormal_distribution<double> latency{6.0, 1.5};
    histogram a;
    histogram b;
    for (int i = 0; i < 20000; ++i) {
      a.record(static_cast<uint64_t>(latency(rng)));
      b.record(static_cast<uint64_t>(latency(rng)) * 3);
    }
    auto a2 = histogram::deserialize(a.serialize());
    REQUIRE(a2);
    CHECK(a2->serialize() == a.serialize());
    CHECK(a2->count() == a.count());
    CHECK(a2->min() == a.min());
    CHECK(a2->max() == a.max());
    CHECK(a2->mean() == a.mean());
    for (double p : {50.0, 99.0, 99.9})
      CHECK(a2->percentile(p) == a.percentile(p));
    auto b2 = histogram::deserialize(b.serialize());
    REQUIRE(b2);
    histogram direct;
    direct.merge(a);
    direct.merge(b);
    a2->merge(*b2);
    CHECK(a2->serialize() == direct.serialize());
  }

  TEST_CASE("an empty histogram survives serialization") {
    histogram h;
    auto back = histogram::deserialize(h.serialize());
    REQUIRE(back);
    CHECK(back->count() == 0);
    CHECK(back->percentile(99) == 0);
  }

  TEST_CASE("deserialize refuses text serialize did not write") {
    histogram h;
    h.record(5);
    h.record(500);
    auto good = h.serialize();
    REQUIRE(histogram::deserialize(good));
    CHECK_FALSE(histogram::deserialize(""));
    CHECK_FALSE(histogram::deserialize("hist2" + good.substr(5)));
    CHECK_FALSE(histogram::deserialize(good + " 7"));
    CHECK_FALSE(histogram::deserialize(good.substr(0, good.size() - 2)));
    // The counts no longer add up to the total.
    CHECK_FALSE(histogram::deserialize("hist1 3" + good.substr(7)));
    // A bucket beyond the last one.
    CHECK_FALSE(histogram::deserialize(
      "hist1 1 1 1 0x8p-3 1 " + std::to_string(histogram::bucket_count())
      + " 1"));
  }
}
