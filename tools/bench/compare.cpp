// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/compare.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <set>

namespace chargeonce::bench {

namespace {

bool is_chargeonce(const std::string& mode) {
  return mode == "remote" || mode == "remote_async" || mode == "http"
         || mode == "in_process";
}

throughput of(const run_result& r) {
  const auto& h = r.latency(op::cycle);
  return {r.cycles_per_s(), h.percentile(50), h.percentile(99)};
}

throughput of(const reference_run& r) {
  return {r.cycles_per_s(), r.latency_us.percentile(50),
          r.latency_us.percentile(99)};
}

std::optional<throughput> baseline_at(const std::vector<run_result>& runs,
                                      size_t clients) {
  for (const auto& r : runs)
    if (r.mode == "baseline" && r.clients == clients)
      return of(r);
  return std::nullopt;
}

std::optional<throughput>
reference_at(const std::vector<reference_run>& reference,
             const std::string& variant, size_t clients) {
  for (const auto& r : reference)
    if (r.variant == variant && r.clients == clients && r.pgbench_status == 0
        && r.cycles_per_s() > 0)
      return of(r);
  return std::nullopt;
}

/// The faster per-operation baseline, and the ratios against it and the
/// ceiling.
void decide(comparison& row) {
  std::optional<throughput> faster;
  if (row.baseline && row.baseline->cycles_per_s > 0) {
    faster = row.baseline;
    row.faster_per_op = "baseline";
  }
  if (row.per_op
      && (!faster || row.per_op->cycles_per_s > faster->cycles_per_s)) {
    faster = row.per_op;
    row.faster_per_op = "reference_per_op";
  }
  if (!row.chargeonce)
    return;
  if (faster)
    row.vs_faster_per_op = row.chargeonce->cycles_per_s / faster->cycles_per_s;
  if (row.batch_set)
    row.share_of_batch_set =
      row.chargeonce->cycles_per_s / row.batch_set->cycles_per_s;
}

nlohmann::json json_of(const std::optional<throughput>& x) {
  if (!x)
    return nullptr;
  return {{"cycles_per_s", x->cycles_per_s},
          {"latency_p50_us", x->p50_us},
          {"latency_p99_us", x->p99_us}};
}

template <class T>
nlohmann::json json_of(const std::optional<T>& x) {
  return x ? nlohmann::json(*x) : nlohmann::json(nullptr);
}

nlohmann::json text_or_null(const std::string& x) {
  return x.empty() ? nlohmann::json(nullptr) : nlohmann::json(x);
}

std::string cell(const std::optional<throughput>& x) {
  if (!x)
    return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", x->cycles_per_s);
  return buf;
}

std::string latency_cell(const std::optional<throughput>& x) {
  if (!x)
    return "-";
  return std::to_string(x->p50_us) + " / " + std::to_string(x->p99_us);
}

std::string ratio_cell(const std::optional<double>& x, const char* format) {
  if (!x)
    return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, *x);
  return buf;
}

std::optional<double> percent_of(const std::optional<double>& share) {
  if (!share)
    return std::nullopt;
  return *share * 100;
}

/// The per-operation designs' best at any client count, set on every row.
void set_best_per_op(const std::vector<run_result>& runs,
                     const std::vector<reference_run>& reference,
                     std::vector<comparison>& rows) {
  std::optional<throughput> best;
  size_t clients = 0;
  std::string design;
  auto consider = [&](throughput x, size_t at, const char* name) {
    if (x.cycles_per_s > 0 && (!best || x.cycles_per_s > best->cycles_per_s)) {
      best = x;
      clients = at;
      design = name;
    }
  };
  for (const auto& r : runs)
    if (r.mode == "baseline")
      consider(of(r), r.clients, "baseline");
  for (const auto& r : reference)
    if (r.variant == "per_op" && r.pgbench_status == 0)
      consider(of(r), r.clients, "reference_per_op");
  if (!best)
    return;
  for (auto& row : rows) {
    row.best_per_op = best;
    row.best_per_op_clients = clients;
    row.best_per_op_design = design;
    if (row.chargeonce)
      row.vs_best_per_op = row.chargeonce->cycles_per_s / best->cycles_per_s;
  }
}

} // namespace

std::vector<comparison> compare(const std::vector<run_result>& runs,
                                const std::vector<reference_run>& reference) {
  std::set<size_t> counts;
  for (const auto& r : runs)
    counts.insert(r.clients);
  for (const auto& r : reference)
    counts.insert(r.clients);
  std::vector<comparison> out;
  for (auto clients : counts) {
    comparison base;
    base.clients = clients;
    base.baseline = baseline_at(runs, clients);
    base.per_op = reference_at(reference, "per_op", clients);
    base.batch_set = reference_at(reference, "batch_set", clients);
    bool any = false;
    for (const auto& r : runs) {
      if (r.clients != clients || !is_chargeonce(r.mode))
        continue;
      auto row = base;
      row.mode = r.mode;
      row.chargeonce = of(r);
      decide(row);
      out.push_back(std::move(row));
      any = true;
    }
    if (!any) {
      decide(base);
      out.push_back(std::move(base));
    }
  }
  set_best_per_op(runs, reference, out);
  return out;
}

nlohmann::json reference_json(const std::vector<reference_run>& reference) {
  auto out = nlohmann::json::array();
  for (const auto& r : reference) {
    const auto& h = r.latency_us;
    out.push_back({{"variant", r.variant},
                   {"script", "cycle_" + r.variant + ".sql"},
                   {"clients", r.clients},
                   {"duration_s", r.duration_s},
                   {"transactions", r.transactions},
                   {"transactions_total", r.transactions_total},
                   {"ledger_rows", r.ledger_rows},
                   {"cycles_per_transaction", r.cycles_per_transaction()},
                   {"transactions_per_s", r.transactions_per_s()},
                   {"cycles_per_s", r.cycles_per_s()},
                   {"latency_us",
                    {{"count", h.count()},
                     {"p50", h.percentile(50)},
                     {"p99", h.percentile(99)},
                     {"p999", h.percentile(99.9)},
                     {"max", h.max()},
                     {"mean", h.mean()}}},
                   {"pgbench_status", r.pgbench_status}});
  }
  return out;
}

nlohmann::json comparisons_json(const std::vector<comparison>& rows) {
  auto out = nlohmann::json::array();
  for (const auto& x : rows)
    out.push_back(
      {{"clients", x.clients},
       {"mode", text_or_null(x.mode)},
       {"chargeonce", json_of(x.chargeonce)},
       {"baseline", json_of(x.baseline)},
       {"reference_per_op", json_of(x.per_op)},
       {"reference_batch_set", json_of(x.batch_set)},
       {"faster_per_op", text_or_null(x.faster_per_op)},
       {"vs_faster_per_op", json_of(x.vs_faster_per_op)},
       {"best_per_op",
        x.best_per_op
          ? nlohmann::json{{"design", x.best_per_op_design},
                           {"clients", x.best_per_op_clients},
                           {"cycles_per_s", x.best_per_op->cycles_per_s}}
          : nlohmann::json(nullptr)},
       {"vs_best_per_op", json_of(x.vs_best_per_op)},
       {"share_of_batch_set", json_of(x.share_of_batch_set)}});
  return out;
}

void print_comparisons(const std::vector<reference_run>& reference,
                       const std::vector<comparison>& rows) {
  std::printf("\nreference (pgbench; latency of one pgbench transaction: one "
              "cycle for per_op, 100 cycles for batch_set)\n");
  std::printf("%-10s %7s %10s %10s %8s %9s %9s %7s\n", "variant", "clients",
              "cycles/s", "tx/s", "cyc/tx", "tx p50", "p99", "status");
  for (const auto& r : reference)
    std::printf("%-10s %7zu %10.1f %10.1f %8.2f %9llu %9llu %7d\n",
                r.variant.c_str(), r.clients, r.cycles_per_s(),
                r.transactions_per_s(), r.cycles_per_transaction(),
                static_cast<unsigned long long>(r.latency_us.percentile(50)),
                static_cast<unsigned long long>(r.latency_us.percentile(99)),
                r.pgbench_status);
  std::printf("\nagainst the per-operation baselines (cycles/s; x: chargeonce "
              "over the faster per-operation baseline at the same client "
              "count; x best: over the best either made at any count; "
              "ceiling: chargeonce as a share of batch_set)\n");
  std::printf("%7s %-13s %10s %10s %10s %10s %-16s %7s %7s %8s\n", "clients",
              "mode", "chargeonce", "baseline", "ref per_op", "batch_set",
              "faster per-op", "x", "x best", "ceiling");
  for (const auto& x : rows)
    std::printf("%7zu %-13s %10s %10s %10s %10s %-16s %7s %7s %8s\n", x.clients,
                x.mode.empty() ? "-" : x.mode.c_str(),
                cell(x.chargeonce).c_str(), cell(x.baseline).c_str(),
                cell(x.per_op).c_str(), cell(x.batch_set).c_str(),
                x.faster_per_op.empty() ? "-" : x.faster_per_op.c_str(),
                ratio_cell(x.vs_faster_per_op, "%.2fx").c_str(),
                ratio_cell(x.vs_best_per_op, "%.2fx").c_str(),
                ratio_cell(percent_of(x.share_of_batch_set), "%.1f%%").c_str());
  if (!rows.empty() && rows.front().best_per_op)
    std::printf("best per-operation: %s at %zu clients, %.1f cycles/s\n",
                rows.front().best_per_op_design.c_str(),
                rows.front().best_per_op_clients,
                rows.front().best_per_op->cycles_per_s);
  std::printf("\nlatency p50 / p99 in µs (a cycle; batch_set: a 100-cycle "
              "transaction)\n");
  std::printf("%7s %-13s %17s %17s %17s %17s\n", "clients", "mode",
              "chargeonce", "baseline", "ref per_op", "batch_set");
  for (const auto& x : rows)
    std::printf(
      "%7zu %-13s %17s %17s %17s %17s\n", x.clients,
      x.mode.empty() ? "-" : x.mode.c_str(), latency_cell(x.chargeonce).c_str(),
      latency_cell(x.baseline).c_str(), latency_cell(x.per_op).c_str(),
      latency_cell(x.batch_set).c_str());
}

} // namespace chargeonce::bench
