// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/report.hpp"

#include "tools/bench/compare.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

namespace chargeonce::bench {

namespace {

/// chargeonce's cycles/s over the baseline's, per client count.
struct ratio {
  size_t clients = 0;
  std::string mode;
  double cycles_per_s = 0;
  double cycle_p99 = 0;
};

std::vector<ratio> ratios_of(const std::vector<run_result>& runs) {
  std::vector<ratio> out;
  for (const auto& base : runs) {
    if (base.mode != "baseline" || base.cycles_per_s() <= 0)
      continue;
    for (const auto& ours : runs) {
      if (ours.mode == "baseline" || ours.clients != base.clients)
        continue;
      auto base_p99 = base.latency(op::cycle).percentile(99);
      auto ours_p99 = ours.latency(op::cycle).percentile(99);
      out.push_back(
        {base.clients, ours.mode, ours.cycles_per_s() / base.cycles_per_s(),
         base_p99 > 0
           ? static_cast<double>(ours_p99) / static_cast<double>(base_p99)
           : 0.0});
    }
  }
  return out;
}

nlohmann::json latency_json(const histogram& h) {
  return {{"count", h.count()},      {"p50", h.percentile(50)},
          {"p99", h.percentile(99)}, {"p999", h.percentile(99.9)},
          {"max", h.max()},          {"mean", h.mean()}};
}

nlohmann::json statements_json(const std::vector<statement_figures>& all) {
  auto out = nlohmann::json::array();
  for (const auto& x : all)
    out.push_back({{"query", x.query},
                   {"top_level", x.top_level},
                   {"calls_per_cycle", x.calls_per_cycle},
                   {"exec_us_per_cycle", x.exec_us_per_cycle},
                   {"rows_per_cycle", x.rows_per_cycle}});
  return out;
}

nlohmann::json run_json(const bench_options& o, const run_result& r) {
  nlohmann::json latency = nlohmann::json::object();
  nlohmann::json by_op = nlohmann::json::object();
  std::map<std::string, uint64_t> outcomes{{"ok", 0}, {"busy", 0}};
  for (size_t i = 0; i < op_count; ++i) {
    latency[op_names[i]] = latency_json(r.stats.latency[i]);
    if (!r.stats.outcomes[i].empty())
      by_op[op_names[i]] = r.stats.outcomes[i];
    for (const auto& [name, n] : r.stats.outcomes[i])
      outcomes[name] += n;
  }
  nlohmann::json out{{"mode", r.mode},
                     {"clients", r.clients},
                     {"processes", r.processes},
                     {"duration_s", r.duration_s},
                     {"cycles", r.stats.cycles},
                     {"commits", r.stats.commits},
                     {"cycles_per_s", r.cycles_per_s()},
                     {"latency_us", latency},
                     {"outcomes", outcomes},
                     {"outcomes_by_op", by_op},
                     {"unexpected", r.stats.unexpected}};
  if (r.stats.touched > 0)
    out["chats_touched"] = r.stats.touched;
  if (r.memory) {
    out["rss_process"] = r.memory->process; // whose memory: bench or server
    out["peak_rss_kib"] = r.memory->peak_rss_kib;
    out["rss_kib"] = r.memory->rss_kib;
  }
  if (r.server_cpu_us_per_cycle)
    out["server_cpu_us_per_cycle"] = *r.server_cpu_us_per_cycle;
  if (r.bench_cpu_us_per_cycle)
    out["bench_cpu_us_per_cycle"] = *r.bench_cpu_us_per_cycle;
  if (r.postgres_cpu_us_per_cycle)
    out["postgres_cpu_us_per_cycle"] = *r.postgres_cpu_us_per_cycle;
  if (o.statements)
    out["statements"] = statements_json(r.statements);
  if (r.audit)
    out["audit"] = {{"acknowledged_commits", r.audit->acknowledged},
                    {"ledger_charges", r.audit->ledger_charges},
                    {"charged_units", r.audit->charged_units},
                    {"charged_balance", r.audit->charged_balance},
                    {"balance_spent", r.audit->balance_spent},
                    {"open_reservations", r.audit->open_reservations},
                    {"ok", r.audit->ok()}};
  return out;
}

/// Whether Postgres holds what the clients were told, per run.
void print_audits(const std::vector<run_result>& runs) {
  std::printf("\naudit (Postgres after each run)\n");
  for (const auto& r : runs) {
    if (!r.audit)
      continue;
    const auto& a = *r.audit;
    std::printf("%-13s %7zu  commits acknowledged %llu, ledger charges %llu, "
                "units charged %llu, balance spent %lld of %lld charged, "
                "reservations left %llu: %s\n",
                r.mode.c_str(), r.clients,
                static_cast<unsigned long long>(a.acknowledged),
                static_cast<unsigned long long>(a.ledger_charges),
                static_cast<unsigned long long>(a.charged_units),
                static_cast<long long>(a.balance_spent),
                static_cast<long long>(a.charged_balance),
                static_cast<unsigned long long>(a.open_reservations),
                a.ok() ? "ok" : "MISMATCH");
  }
}

void print_summary(const std::vector<run_result>& runs) {
  std::printf("%-13s %7s %10s %10s %10s %10s\n", "mode", "clients", "cycles/s",
              "cycle p50", "p99", "p99.9");
  for (const auto& r : runs) {
    const auto& c = r.latency(op::cycle);
    std::printf("%-13s %7zu %10.1f %10llu %10llu %10llu\n", r.mode.c_str(),
                r.clients, r.cycles_per_s(),
                static_cast<unsigned long long>(c.percentile(50)),
                static_cast<unsigned long long>(c.percentile(99)),
                static_cast<unsigned long long>(c.percentile(99.9)));
  }
}

void print_operations(const std::vector<run_result>& runs) {
  std::printf("\nper operation (latency in µs)\n");
  std::printf("%-13s %7s %-8s %9s %9s %9s %9s\n", "mode", "clients", "op",
              "count", "p50", "p99", "p99.9");
  for (const auto& r : runs)
    for (size_t i = 0; i < op_count; ++i) {
      const auto& h = r.stats.latency[i];
      if (h.count() == 0 || i == static_cast<size_t>(op::cycle))
        continue;
      std::printf("%-13s %7zu %-8s %9llu %9llu %9llu %9llu\n", r.mode.c_str(),
                  r.clients, op_names[i],
                  static_cast<unsigned long long>(h.count()),
                  static_cast<unsigned long long>(h.percentile(50)),
                  static_cast<unsigned long long>(h.percentile(99)),
                  static_cast<unsigned long long>(h.percentile(99.9)));
    }
}

void print_outcomes(const std::vector<run_result>& runs) {
  std::printf("\noutcomes\n");
  for (const auto& r : runs) {
    std::printf("%-13s %7zu ", r.mode.c_str(), r.clients);
    for (size_t i = 0; i < op_count; ++i)
      for (const auto& [name, n] : r.stats.outcomes[i])
        std::printf(" %s.%s=%llu", op_names[i], name.c_str(),
                    static_cast<unsigned long long>(n));
    std::printf("  unexpected=%llu\n",
                static_cast<unsigned long long>(r.stats.unexpected));
  }
}

/// Resident memory and chats touched, for the runs that know them.
void print_memory(const std::vector<run_result>& runs) {
  for (const auto& r : runs) {
    if (!r.memory && r.stats.touched == 0)
      continue;
    std::printf("%-13s %7zu ", r.mode.c_str(), r.clients);
    if (r.stats.touched > 0)
      std::printf(" chats touched %llu",
                  static_cast<unsigned long long>(r.stats.touched));
    if (r.memory)
      std::printf(" %s peak RSS %lld KiB, RSS after the run %lld KiB",
                  r.memory->process.c_str(),
                  static_cast<long long>(r.memory->peak_rss_kib),
                  static_cast<long long>(r.memory->rss_kib));
    std::printf("\n");
  }
}

std::string cpu_text(const std::optional<double>& x, const char* format) {
  if (!x)
    return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, *x);
  return buf;
}

/// CPU per cycle over the measured window, for the runs that know it: the
/// server's, the bench's own (when its clients run in it) and the Postgres
/// cluster's (when it runs on this machine).
void print_cpu(const std::vector<run_result>& runs) {
  bool header = false;
  for (const auto& r : runs) {
    if (!r.server_cpu_us_per_cycle && !r.bench_cpu_us_per_cycle
        && !r.postgres_cpu_us_per_cycle)
      continue;
    if (!header) {
      std::printf("\nCPU per cycle in µs (user + system, measured window)\n");
      std::printf("%-13s %7s %10s %10s %10s\n", "mode", "clients", "server",
                  "bench", "postgres");
      header = true;
    }
    std::printf("%-13s %7zu %10s %10s %10s\n", r.mode.c_str(), r.clients,
                cpu_text(r.server_cpu_us_per_cycle, "%.0f").c_str(),
                cpu_text(r.bench_cpu_us_per_cycle, "%.0f").c_str(),
                cpu_text(r.postgres_cpu_us_per_cycle, "%.0f").c_str());
  }
}

/// --statements: per run, what Postgres ran in the window, per cycle.
void print_statements(const std::string& track,
                      const std::vector<run_result>& runs) {
  std::printf("\nPostgres statements per cycle (pg_stat_statements, track = "
              "%s, measured window; the costliest %zu per run; a nested "
              "statement ran inside a function, whose time includes it)\n",
              track.c_str(), statements_reported_max);
  for (const auto& r : runs) {
    std::printf("\n%s, %zu clients\n", r.mode.c_str(), r.clients);
    std::printf("%9s %9s %9s %-6s %s\n", "calls", "µs", "rows", "level",
                "query");
    for (const auto& x : r.statements)
      std::printf("%9.3f %9.1f %9.3f %-6s %s\n", x.calls_per_cycle,
                  x.exec_us_per_cycle, x.rows_per_cycle,
                  x.top_level ? "top" : "nested", x.query.c_str());
  }
}

// -- the persistence layer alone ----------------------------------------------

/// A run's figures over per_operation's (the baseline's statements):
/// cycles/s (higher is better) and Postgres CPU per cycle (per_operation's over
/// this run's: higher is better too).
struct persistence_ratio {
  double cycles_per_s = 0;
  std::optional<double> postgres_cpu = std::nullopt;
};

persistence_ratio ratio_of(const persistence_run& r,
                           const std::vector<persistence_run>& alone) {
  persistence_ratio out;
  for (const auto& base : alone) {
    if (base.mode != "per_operation" || base.cycles_per_s() <= 0)
      continue;
    out.cycles_per_s = r.cycles_per_s() / base.cycles_per_s();
    auto ours = r.postgres_cpu_us_per_cycle();
    auto theirs = base.postgres_cpu_us_per_cycle();
    if (ours && theirs && *ours > 0)
      out.postgres_cpu = *theirs / *ours;
  }
  return out;
}

nlohmann::json optional_json(const std::optional<double>& x) {
  return x ? nlohmann::json(*x) : nlohmann::json(nullptr);
}

nlohmann::json persistence_json(const std::vector<persistence_run>& alone) {
  auto out = nlohmann::json::array();
  for (const auto& r : alone) {
    auto ratio = ratio_of(r, alone);
    out.push_back(
      {{"mode", r.mode},
       {"batch_cycles", r.batch_cycles},
       {"duration_s", r.duration_s},
       {"cycles", r.cycles},
       {"cycles_per_s", r.cycles_per_s()},
       {"statements", r.statements},
       {"statement_latency_us", latency_json(r.statement_us)},
       {"postgres_cpu_us_per_cycle",
        optional_json(r.postgres_cpu_us_per_cycle())},
       {"ratio",
        {{"cycles_per_s", ratio.cycles_per_s},
         {"postgres_cpu_per_cycle", optional_json(ratio.postgres_cpu)}}},
       {"unexpected", r.unexpected}});
  }
  return out;
}

void print_persistence(const std::vector<persistence_run>& alone) {
  std::printf("\npersistence layer alone (one connection, no actors; "
              "statement latency in µs, Postgres CPU of the backend; "
              "ratios over per_operation)\n");
  std::printf("%-13s %8s %10s %9s %9s %9s %12s %8s %8s\n", "mode", "cyc/stmt",
              "cycles/s", "stmts/s", "stmt p50", "p99", "pg µs/cycle", "ratio",
              "pg ratio");
  for (const auto& r : alone) {
    auto ratio = ratio_of(r, alone);
    auto batch = r.batch_cycles > 0 ? std::to_string(r.batch_cycles) : "-";
    std::printf(
      "%-13s %8s %10.1f %9.1f %9llu %9llu %12s %7.2fx %8s\n", r.mode.c_str(),
      batch.c_str(), r.cycles_per_s(),
      r.duration_s > 0 ? static_cast<double>(r.statements) / r.duration_s : 0.0,
      static_cast<unsigned long long>(r.statement_us.percentile(50)),
      static_cast<unsigned long long>(r.statement_us.percentile(99)),
      cpu_text(r.postgres_cpu_us_per_cycle(), "%.1f").c_str(),
      ratio.cycles_per_s, cpu_text(ratio.postgres_cpu, "%.2fx").c_str());
  }
  for (const auto& r : alone)
    if (r.unexpected > 0)
      std::printf("%s %zu: unexpected=%llu\n", r.mode.c_str(), r.batch_cycles,
                  static_cast<unsigned long long>(r.unexpected));
}

// -- the sweep ----------------------------------------------------------------

nlohmann::json sweep_json(const sweep_run& r) {
  nlohmann::json out{{"reservations", r.reservations},
                     {"connections", r.connections},
                     {"sweep",
                      {{"released", r.sweep_released},
                       {"released_rows", r.released_rows},
                       {"left", r.left},
                       {"duration_s", r.sweep_s},
                       {"releases_per_s", r.sweep_releases_per_s()}}},
                     {"delete",
                      {{"deleted", r.deleted},
                       {"duration_s", r.delete_s},
                       {"rows_per_s", r.delete_rows_per_s()}}},
                     {"ratio", r.ratio()},
                     {"ok", r.ok()}};
  if (r.memory) {
    out["rss_process"] = r.memory->process;
    out["peak_rss_kib"] = r.memory->peak_rss_kib;
    out["rss_kib"] = r.memory->rss_kib;
  }
  return out;
}

void print_sweep(const sweep_run& r) {
  std::printf("\nsweep of %lld stuck reservations (%zu chat connections), "
              "beside one DELETE ... RETURNING of as many\n",
              static_cast<long long>(r.reservations), r.connections);
  std::printf("sweep   released %llu in %.3f s: %.1f releases/s; of the "
              "run's, %lld remembered as released, %lld left: %s\n",
              static_cast<unsigned long long>(r.sweep_released), r.sweep_s,
              r.sweep_releases_per_s(), static_cast<long long>(r.released_rows),
              static_cast<long long>(r.left), r.ok() ? "ok" : "MISMATCH");
  std::printf("delete  deleted %llu in %.3f s: %.1f rows/s\n",
              static_cast<unsigned long long>(r.deleted), r.delete_s,
              r.delete_rows_per_s());
  std::printf("ratio sweep/delete: %.4fx (the DELETE %.0f times as fast)\n",
              r.ratio(), r.ratio() > 0 ? 1 / r.ratio() : 0.0);
  if (r.memory)
    std::printf("%s peak RSS over the sweep %lld KiB, RSS after it %lld KiB\n",
                r.memory->process.c_str(),
                static_cast<long long>(r.memory->peak_rss_kib),
                static_cast<long long>(r.memory->rss_kib));
}

} // namespace

void print_json(const bench_options& o, const std::string& statements_track,
                const std::vector<run_result>& runs,
                const std::vector<persistence_run>& alone,
                const std::vector<reference_run>& reference,
                const std::optional<sweep_run>& sweep) {
  nlohmann::json out;
  out["config"] = {{"chats", o.chats},
                   {"grants_per_chat", o.grants_per_chat},
                   {"duration_s", o.duration_s},
                   {"warmup_s", o.warmup_s},
                   {"min_cycles", o.min_cycles},
                   {"connections", o.connections},
                   {"processes", o.processes},
                   {"chat_order", name_of(o.order)},
                   {"persistence_batches", o.persistence_batches},
                   {"mix",
                    {{"cancel", o.mix.cancel},
                     {"fail", o.mix.fail},
                     {"double", o.mix.double_tap}}}};
  if (o.statements)
    out["config"]["statements_track"] = statements_track;
  out["runs"] = nlohmann::json::array();
  for (const auto& r : runs)
    out["runs"].push_back(run_json(o, r));
  out["ratios"] = nlohmann::json::array();
  for (const auto& x : ratios_of(runs))
    out["ratios"].push_back({{"clients", x.clients},
                             {"mode", x.mode},
                             {"cycles_per_s", x.cycles_per_s},
                             {"cycle_p99", x.cycle_p99}});
  if (!o.persistence_batches.empty())
    out["persistence"] = persistence_json(alone);
  if (sweep)
    out["sweep"] = sweep_json(*sweep);
  if (!reference.empty()) {
    out["reference"] = reference_json(reference);
    out["comparisons"] = comparisons_json(compare(runs, reference));
  }
  std::cout << out.dump() << std::endl;
}

void print_table(const bench_options& o, const std::string& statements_track,
                 const std::vector<run_result>& runs,
                 const std::vector<persistence_run>& alone,
                 const std::vector<reference_run>& reference,
                 const std::optional<sweep_run>& sweep) {
  std::printf("chargeonce-bench: %lld chats (%s), %lld s per run after %lld "
              "s warm-up, %zu client process(es), mix cancel %d%% fail %d%% "
              "double %d%%; latency in µs\n",
              static_cast<long long>(o.chats), name_of(o.order),
              static_cast<long long>(o.duration_s),
              static_cast<long long>(o.warmup_s), o.processes, o.mix.cancel,
              o.mix.fail, o.mix.double_tap);
  if (o.min_cycles > 0)
    std::printf("a run's window stays open past its duration, if need be, "
                "until every client has %lld cycles begun in it\n",
                static_cast<long long>(o.min_cycles));
  if (!runs.empty()) {
    std::printf("\n");
    print_summary(runs);
    auto ratios = ratios_of(runs);
    if (!ratios.empty())
      std::printf("\n");
    for (const auto& x : ratios)
      std::printf("ratio %s/baseline clients=%zu: cycles/s %.2fx, cycle p99 "
                  "%.2fx\n",
                  x.mode.c_str(), x.clients, x.cycles_per_s, x.cycle_p99);
    print_operations(runs);
    print_outcomes(runs);
    print_audits(runs);
    print_memory(runs);
    print_cpu(runs);
    if (o.statements)
      print_statements(statements_track, runs);
  }
  if (!reference.empty())
    print_comparisons(reference, compare(runs, reference));
  if (!alone.empty())
    print_persistence(alone);
  if (sweep)
    print_sweep(*sweep);
  std::fflush(stdout);
}

} // namespace chargeonce::bench
