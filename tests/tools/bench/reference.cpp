// SPDX-License-Identifier: Apache-2.0
// The bench's reference runs without pgbench: reading pgbench's
// per-transaction log into the measured window, the comparison against
// the faster per-operation baseline, the reference's own flags, and the
// scripts the binary carries.
#include "tools/bench/reference.hpp"

#include "tools/bench/compare.hpp"
#include "tools/bench/reference_log.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace chargeonce;
using namespace chargeonce::bench;

namespace {

/// A run of `mode` whose every cycle took `cycle_us`.
run_result run_of(const std::string& mode, size_t clients, uint64_t cycles,
                  uint64_t cycle_us) {
  run_result r;
  r.mode = mode;
  r.clients = clients;
  r.duration_s = 10;
  r.stats.cycles = cycles;
  for (uint64_t i = 0; i < cycles; ++i)
    r.stats.latency[static_cast<size_t>(op::cycle)].record(cycle_us);
  return r;
}

reference_run reference_of(const std::string& variant, size_t clients,
                           uint64_t transactions, uint64_t cycles_per_tx) {
  reference_run r;
  r.variant = variant;
  r.clients = clients;
  r.duration_s = 10;
  r.transactions = transactions;
  r.transactions_total = transactions;
  r.ledger_rows = transactions * cycles_per_tx;
  r.latency_us.record(1000);
  return r;
}

std::string read_file(const std::string& path) {
  std::ifstream in{path};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

} // namespace

TEST_SUITE("main.bench_reference") {

  TEST_CASE("the log's failed and malformed lines are left out") {
    std::istringstream log{"0 1 1500 0 1700000000 500000\n"
                           "1 1 failed 0 1700000000 600000\n"
                           "garbage\n"
                           "1 2 2500 0 1700000001 0 12\n"};
    std::vector<pgbench_tx> txs;
    read_pgbench_log(log, txs);
    REQUIRE(txs.size() == 2);
    CHECK(txs[0].latency_us == 1500);
    CHECK(txs[0].completed_us == 1700000000500000);
    CHECK(txs[1].latency_us == 2500);
    CHECK(txs[1].completed_us == 1700000001000000);
  }

  TEST_CASE("the window opens a warm-up after the first start and lasts "
            "the duration") {
    // Starts at t = 0 s; completions at 0.5 s, 1.5 s, 2.5 s and 3.5 s.
    constexpr int64_t t0 = 1700000000000000;
    std::vector<pgbench_tx> txs{{500000, t0 + 500000},
                                {1000, t0 + 1500000},
                                {3000, t0 + 2500000},
                                {1000, t0 + 3500000}};
    auto w = window_of(txs, 1, 2);
    CHECK(w.transactions == 2);
    CHECK(w.latency_us.max() == 3000);
    CHECK(window_of(txs, 0, 10).transactions == 4);
    CHECK(window_of({}, 1, 2).transactions == 0);
  }

  TEST_CASE("cycles per second count every cycle of a batch") {
    auto r = reference_of("batch_set", 4, 300, 100);
    r.transactions_total = 400; // the warm-up's transactions too
    r.ledger_rows = 40000;
    CHECK(r.cycles_per_transaction() == doctest::Approx(100));
    CHECK(r.transactions_per_s() == doctest::Approx(30));
    CHECK(r.cycles_per_s() == doctest::Approx(3000));
  }

  TEST_CASE("the ratio divides by the faster per-operation baseline") {
    std::vector<run_result> runs{
      run_of("remote", 16, 40000, 3000), run_of("baseline", 16, 10000, 2000),
      run_of("remote", 64, 50000, 9000), run_of("baseline", 64, 30000, 8000)};
    std::vector<reference_run> ref{reference_of("per_op", 16, 20000, 1),
                                   reference_of("batch_set", 16, 800, 100),
                                   reference_of("per_op", 64, 20000, 1)};
    auto rows = compare(runs, ref);
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].clients == 16);
    CHECK(rows[0].mode == "remote");
    CHECK(rows[0].faster_per_op == "reference_per_op");
    CHECK(*rows[0].vs_faster_per_op == doctest::Approx(2.0));
    CHECK(*rows[0].share_of_batch_set == doctest::Approx(0.5));
    CHECK(rows[0].chargeonce->p50_us == 3000);
    CHECK(rows[0].baseline->p99_us == 2000);
    CHECK(rows[1].faster_per_op == "baseline");
    CHECK(*rows[1].vs_faster_per_op == doctest::Approx(50000.0 / 30000));
    CHECK_FALSE(rows[1].batch_set);
    CHECK_FALSE(rows[1].share_of_batch_set);
  }

  TEST_CASE("the best per-operation figure at any client count is the bar "
            "at every count: a baseline that collapses at 64 clients does "
            "not flatter chargeonce there") {
    std::vector<run_result> runs{
      run_of("remote", 16, 40000, 3000), run_of("baseline", 16, 20000, 2000),
      run_of("remote", 64, 60000, 9000), run_of("baseline", 64, 10000, 8000)};
    std::vector<reference_run> ref{reference_of("per_op", 16, 25000, 1),
                                   reference_of("per_op", 64, 5000, 1)};
    auto failed = reference_of("per_op", 1, 90000, 1);
    failed.pgbench_status = 2; // a failed run is no bar either
    ref.push_back(failed);
    auto rows = compare(runs, ref);
    REQUIRE(rows.size() == 3);
    const auto& at64 = rows[2];
    CHECK(at64.clients == 64);
    CHECK(*at64.vs_faster_per_op == doctest::Approx(6.0)); // 60000 / 10000
    REQUIRE(at64.best_per_op);
    CHECK(at64.best_per_op_design == "reference_per_op");
    CHECK(at64.best_per_op_clients == 16);
    CHECK(at64.best_per_op->cycles_per_s == doctest::Approx(2500));
    CHECK(*at64.vs_best_per_op == doctest::Approx(60000.0 / 25000));
    CHECK(*rows[1].vs_best_per_op == doctest::Approx(40000.0 / 25000));
    CHECK_FALSE(rows[0].vs_best_per_op); // no chargeonce run at 1 client
    auto json = comparisons_json(rows);
    CHECK(json[2]["best_per_op"]["clients"] == 16);
    CHECK(json[2]["vs_best_per_op"].get<double>()
          == doctest::Approx(60000.0 / 25000));
  }

  TEST_CASE("a failed reference run is no baseline") {
    std::vector<run_result> runs{run_of("remote", 4, 100, 1000),
                                 run_of("baseline", 4, 100, 1000)};
    auto failed = reference_of("per_op", 4, 1000, 1);
    failed.pgbench_status = 2;
    auto rows = compare(runs, {failed});
    REQUIRE(rows.size() == 1);
    CHECK_FALSE(rows[0].per_op);
    CHECK(rows[0].faster_per_op == "baseline");
    CHECK(*rows[0].vs_faster_per_op == doctest::Approx(1.0));
  }

  TEST_CASE("without chargeonce runs a row still shows the baselines") {
    auto rows = compare({run_of("baseline", 2, 100, 1000)},
                        {reference_of("per_op", 2, 50, 1)});
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].mode.empty());
    CHECK_FALSE(rows[0].chargeonce);
    CHECK(rows[0].faster_per_op == "baseline");
    CHECK_FALSE(rows[0].vs_faster_per_op);
  }

  TEST_CASE("the reference's flags are taken out of the command line") {
    std::vector<std::string> args{"bench", "--reference", "--baseline",
                                  "--pgbench=/opt/pg/bin/pgbench"};
    auto r = take_reference_flags(args);
    CHECK(r.enabled);
    CHECK(r.pgbench == "/opt/pg/bin/pgbench");
    CHECK(args == std::vector<std::string>{"bench", "--baseline"});
    std::vector<std::string> none{"bench", "--baseline"};
    CHECK_FALSE(take_reference_flags(none).enabled);
    std::vector<std::string> alone{"bench", "--pgbench=/x"};
    CHECK_THROWS_AS(take_reference_flags(alone), usage_error);
    std::vector<std::string> twice{"bench", "--reference", "--reference"};
    CHECK_THROWS_AS(take_reference_flags(twice), usage_error);
  }

  TEST_CASE("the binary carries the reference's scripts unchanged") {
    std::vector<std::string> names;
    for (const auto& f : reference_files()) {
      names.push_back(f.name);
      CHECK(f.text
            == read_file(std::string{CHARGEONCE_REFERENCE_DIR} + "/" + f.name));
    }
    CHECK(names
          == std::vector<std::string>{"cycle_batch_set.sql", "cycle_per_op.sql",
                                      "schema.sql", "seed.sql"});
  }
}
