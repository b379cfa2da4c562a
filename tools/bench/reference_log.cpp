// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/reference_log.hpp"

#include <algorithm>
#include <limits>
#include <sstream>
#include <string>

namespace chargeonce::bench {

namespace {

bool all_digits(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return c >= '0' && c <= '9';
  });
}

} // namespace

void read_pgbench_log(std::istream& in, std::vector<pgbench_tx>& out) {
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields{line};
    std::string client, number, time, script;
    int64_t epoch_s = 0;
    int64_t epoch_us = 0;
    if (!(fields >> client >> number >> time >> script >> epoch_s >> epoch_us)
        || !all_digits(time))
      continue;
    out.push_back({std::stoll(time), epoch_s * 1000000 + epoch_us});
  }
}

pgbench_window window_of(const std::vector<pgbench_tx>& txs, int64_t warmup_s,
                         int64_t duration_s) {
  pgbench_window out;
  if (txs.empty())
    return out;
  auto first_start = std::numeric_limits<int64_t>::max();
  for (const auto& x : txs)
    first_start = std::min(first_start, x.completed_us - x.latency_us);
  auto from = first_start + warmup_s * 1000000;
  auto until = from + duration_s * 1000000;
  for (const auto& x : txs) {
    if (x.completed_us < from || x.completed_us >= until)
      continue;
    ++out.transactions;
    out.latency_us.record(static_cast<uint64_t>(x.latency_us));
  }
  return out;
}

} // namespace chargeonce::bench
