// SPDX-License-Identifier: Apache-2.0
#include "tools/chaos/report.hpp"

#include <algorithm>
#include <sstream>

namespace chargeonce::chaos {

namespace {

constexpr size_t violations_printed_max = 20;

/// Besides the outcomes: cancels of started jobs that asked their worker to
/// stop, and heartbeats that told a worker so.
nlohmann::json operations(const recorder& rec) {
  nlohmann::json by_op = nlohmann::json::object();
  uint64_t requested = 0;
  uint64_t told = 0;
  for (const auto& r : rec.ops) {
    auto& slot = by_op[to_string(r.what)][outcome_name(r.result)];
    slot = slot.is_null() ? 1 : slot.get<uint64_t>() + 1;
    if (r.ok() && r.cancel_requested)
      ++(r.what == op::cancel ? requested : told);
  }
  return {{"total", rec.ops.size()},
          {"by_op", by_op},
          {"cancel_requested", {{"cancels", requested}, {"heartbeats", told}}}};
}

nlohmann::json faults(const run_facts& facts, const recorder& rec) {
  nlohmann::json counts = nlohmann::json::object();
  for (auto f : facts.enabled)
    counts[to_string(f)] = 0;
  nlohmann::json log = nlohmann::json::array();
  auto t0 = rec.ops.empty() ? 0 : rec.ops.front().sent_us;
  int64_t no_primary_ms = 0;
  for (const auto& f : rec.faults) {
    counts[to_string(f.what)] = counts[to_string(f.what)].get<uint64_t>() + 1;
    log.push_back({{"fault", to_string(f.what)},
                   {"at_s", static_cast<double>(f.begin_us - t0) / 1e6},
                   {"duration_ms", (f.end_us - f.begin_us) / 1000},
                   {"detail", f.detail}});
    no_primary_ms += std::max<int64_t>(0, f.no_primary_ms);
  }
  uint64_t outage_ms = 0;
  for (const auto& o : rec.outages)
    outage_ms += static_cast<uint64_t>((o.to_us - o.from_us) / 1000);
  // Failovers: from each kill to a writable new primary (the servers'
  // chargeonce_storage_unavailable_seconds_total restarts with them).
  return {{"by_type", counts},
          {"total", rec.faults.size()},
          {"postgres_down_ms", outage_ms},
          {"no_primary_ms", no_primary_ms},
          {"log", log}};
}

} // namespace

nlohmann::json summarize(const run_facts& facts, const recorder& rec,
                         const audit_result& result) {
  nlohmann::json inv = nlohmann::json::object();
  for (const auto& t : result.invariants)
    inv[t.name] = {{"checked", t.checked}, {"violations", t.violations}};
  nlohmann::json violations = nlohmann::json::array();
  for (const auto& v : result.violations)
    violations.push_back({{"invariant", v.invariant},
                          {"chat", v.chat},
                          {"reservation", v.reservation},
                          {"what", v.what}});
  std::vector<std::string> enabled;
  for (auto f : facts.enabled)
    enabled.emplace_back(to_string(f));
  auto verdict = !facts.harness_error.empty()  ? "harness_error"
                 : result.violations_total > 0 ? "violations"
                                               : "ok";
  return {{"seed", facts.seed},
          {"duration_s", facts.duration_s},
          {"servers", facts.servers},
          {"catalog", facts.catalog},
          {"faults_enabled", enabled},
          {"self_test_violation", facts.self_test},
          {"planted_chat", facts.planted_chat == 0
                             ? nlohmann::json(nullptr)
                             : nlohmann::json(facts.planted_chat)},
          {"operations", operations(rec)},
          {"faults", faults(facts, rec)},
          {"invariants", inv},
          {"ledger", result.ledger_entries},
          // What the run did with grants: made, expired (while held, and
          // holds that ended after their grant expired), voided.
          {"grants", result.grants},
          // The liveness allowance of invariant 4 and how much of it the
          // latest lock took: what the slack is measured against.
          {"locks",
           {{"slack_ms", result.lock_slack_ms},
            {"slack_used_ms_max", result.lock_slack_used_ms}}},
          {"violations_total", result.violations_total},
          {"violations", violations},
          {"harness_error", facts.harness_error},
          {"result", verdict}};
}

std::string render(const nlohmann::json& s) {
  std::ostringstream out;
  out << "chargeonce-chaos seed=" << s["seed"]
      << " duration=" << s["duration_s"] << "s servers=" << s["servers"]
      << " catalog=" << s["catalog"].get<std::string>() << "\n\n"
      << "operations: " << s["operations"]["total"] << "\n";
  for (const auto& [name, outcomes] : s["operations"]["by_op"].items()) {
    out << "  " << name << ":";
    for (const auto& [o, n] : outcomes.items())
      out << ' ' << o << '=' << n;
    out << '\n';
  }
  out << "\nfaults: " << s["faults"]["total"] << " (Postgres down "
      << s["faults"]["postgres_down_ms"] << " ms";
  if (s["faults"]["no_primary_ms"].get<int64_t>() > 0)
    out << ", no primary " << s["faults"]["no_primary_ms"] << " ms";
  out << ")\n";
  for (const auto& [name, n] : s["faults"]["by_type"].items())
    out << "  " << name << ": " << n << '\n';
  out << "\nledger rows:";
  for (const auto& [entry, n] : s["ledger"].items())
    out << ' ' << entry << '=' << n;
  out << "\ngrants:";
  for (const auto& [what, n] : s["grants"].items())
    out << ' ' << what << '=' << n;
  out << "\nlocks: the latest ended " << s["locks"]["slack_used_ms_max"]
      << " ms after its deadline and one sweep (slack allowed: "
      << s["locks"]["slack_ms"] << " ms)";
  out << "\n\ninvariants:\n";
  for (const auto& [name, t] : s["invariants"].items())
    out << "  " << name << ": checked " << t["checked"] << ", violations "
        << t["violations"] << '\n';
  out << "\nviolations: " << s["violations_total"] << '\n';
  size_t n = 0;
  for (const auto& v : s["violations"]) {
    if (++n > violations_printed_max) {
      out << "  … (all in the JSON)\n";
      break;
    }
    out << "  [" << v["invariant"].get<std::string>() << "] chat=" << v["chat"]
        << " reservation=" << v["reservation"] << ": "
        << v["what"].get<std::string>() << '\n';
  }
  if (!s["harness_error"].get<std::string>().empty())
    out << "\nharness error: " << s["harness_error"].get<std::string>() << '\n';
  out << "\nresult: " << s["result"].get<std::string>() << '\n';
  return out.str();
}

} // namespace chargeonce::chaos
