// SPDX-License-Identifier: Apache-2.0
// The seeded simulation: the real registry, chat actors
// and supervisor on CAF's deterministic scheduler and simulated clock, over
// an in-memory database that injects faults chosen by a seeded generator.
// Simulated users and workers drive it; an auditor checks the money
// invariants after every step. A failing seed prints itself and replays
// exactly with `test_actors_simulation --seed=N` (or CHARGEONCE_SIM_SEED=N);
// `--seeds=N` (or CHARGEONCE_SIM_SEEDS=N) runs N seeds.
#include "tests/simulation/driver.hpp"

#include <doctest/doctest.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>

using namespace chargeonce;
using test::sim_mutant;
using test::simulation;

namespace {

/// `--name=N` from the command line. doctest's shared main owns argv and
/// ignores options it does not know, so they are read back from the
/// process' own command line.
uint64_t option(const std::string& name, const char* env_name,
                uint64_t fallback) {
  std::ifstream in{"/proc/self/cmdline", std::ios::binary};
  std::string all{std::istreambuf_iterator<char>{in}, {}};
  auto prefix = "--" + name + "=";
  for (size_t i = 0; i < all.size(); i = all.find('\0', i) + 1) {
    auto arg = all.substr(i, all.find('\0', i) - i);
    if (arg.compare(0, prefix.size(), prefix) == 0)
      return std::stoull(arg.substr(prefix.size()));
    if (all.find('\0', i) == std::string::npos)
      break;
  }
  const char* x = std::getenv(env_name);
  return x != nullptr && *x != '\0' ? std::stoull(x) : fallback;
}

std::string render(const std::map<std::string, uint64_t>& xs) {
  std::string out;
  for (const auto& [name, n] : xs)
    out += "\n  " + name + ": " + std::to_string(n);
  return out;
}

/// The built-in catalog, or one generated from the seed.
catalog products_of(uint64_t seed, bool generated) {
  if (!generated)
    return builtin_catalog({});
  std::mt19937_64 rng{seed * 104729 + 7};
  auto out = generated_catalog(rng);
  auto problem = validate(out);
  REQUIRE_MESSAGE(problem.empty(), "seed " << seed << ": " << problem);
  return out;
}

/// Runs `count` seeds (or the one of --seed) with the built-in or a
/// generated catalog; fails with the first violation and its replay.
void run_seeds(uint64_t default_count, bool generated) {
  // Refusals, crashes and restarts are the point here: thousands of log
  // lines would drown a failure, which prints its own trail.
  spdlog::set_level(spdlog::level::critical);
  auto single = option("seed", "CHARGEONCE_SIM_SEED", 0);
  auto first = single != 0 ? single : 1;
  auto count =
    single != 0 ? 1 : option("seeds", "CHARGEONCE_SIM_SEEDS", default_count);
  {
    std::map<std::string, uint64_t> faults;
    std::map<std::string, uint64_t> stats;
    uint64_t commits = 0;
    uint64_t deadline_checks = 0;
    uint64_t straddling_checks = 0;
    uint64_t order_checks = 0;
    uint64_t ended_grant_checks = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (auto seed = first; seed < first + count; ++seed) {
      simulation sim{seed, sim_mutant::none,
                     caf::exit_reason::unhandled_exception,
                     products_of(seed, generated)};
      auto violation = sim.run();
      for (const auto& [name, n] : sim.world->faults)
        faults[name] += n;
      for (const auto& [name, n] : sim.stats)
        stats[name] += n;
      commits += sim.world->ledger.size();
      deadline_checks += sim.auditor.deadline_checks;
      straddling_checks += sim.auditor.straddling_checks;
      order_checks += sim.auditor.order_checks;
      ended_grant_checks += sim.auditor.ended_grant_checks;
      if (!violation.empty()) {
        FAIL("seed " << seed << ": " << violation
                     << "\n  replay: test_actors_simulation --seed=" << seed
                     << std::string{generated ? " -tc='*generated*'" : ""}
                     << "\n  trail: " << sim.trail.str());
      }
    }
    std::chrono::duration<double> secs = std::chrono::steady_clock::now() - t0;
    MESSAGE(count << " seeds in " << secs.count() << " s ("
                  << static_cast<double>(count) / secs.count() << " seeds/s), "
                  << commits << " commits; invariant 4 watched "
                  << deadline_checks
                  << " (step, reservation) pairs past their deadline; "
                     "invariant 16 checked "
                  << straddling_checks
                  << " charges of a daily hold after a refill; invariant 19 "
                     "judged "
                  << order_checks
                  << " holds split where two or more grants had credits, "
                     "invariant 18 "
                  << ended_grant_checks
                  << " beside a grant expired or voided with credits in it"
                     "\nfaults:"
                  << render(faults) << "\nbehaviours:" << render(stats));
    // Every run plants one (straddle()) when its catalog has a kind paid
    // from a daily pocket: none checked means the planting broke and
    // invariant 16 checked nothing.
    if (stats["straddles_planted"] + stats["straddles_missed"] > 0)
      CHECK_MESSAGE(straddling_checks > 0,
                    "no job straddled a refill: invariant 16 went unchecked");
    // Likewise the planted grants (plant_grants()): none of these means
    // the planting broke and invariants 17 to 20 saw only the easy cases.
    if (stats["grant_plants"] > 0) {
      CHECK_MESSAGE(stats["grants_expired_while_held"] > 0,
                    "no grant expired while a job held it");
      CHECK_MESSAGE(stats["grants_voided_while_held"] > 0,
                    "no grant was voided while a job held it");
      CHECK_MESSAGE(order_checks > 0,
                    "no hold was split where the spending order mattered");
      CHECK_MESSAGE(ended_grant_checks > 0,
                    "no reserve met an expired or voided grant");
    }
  }
}

} // namespace

TEST_SUITE("simulation") {

  TEST_CASE("every seed keeps the money invariants under injected faults") {
    run_seeds(3000, false);
  }

  TEST_CASE("every seed keeps them with a generated catalog of its own (2 "
            "to 4 kinds, 2 to 5 pockets, prices of 1 to 3), conservation "
            "checked per pocket") {
    run_seeds(1000, true);
  }

  TEST_CASE("the auditor catches each broken rule within a few seeds") {
    spdlog::set_level(spdlog::level::off);
    constexpr uint64_t seeds_max = 1000;
    for (auto m : {sim_mutant::commit_not_idempotent,
                   sim_mutant::charge_released,
                   sim_mutant::no_unique_index,
                   sim_mutant::cancel_in_progress,
                   sim_mutant::sweep_blind,
                   sim_mutant::outage_says_busy,
                   sim_mutant::killed_commit_charges_twice,
                   sim_mutant::reserve_ignores_holds,
                   sim_mutant::limit_ignored,
                   sim_mutant::request_id_forgotten,
                   sim_mutant::charged_from_balance,
                   sim_mutant::commit_units_unchecked,
                   sim_mutant::partial_commit_balance_first,
                   sim_mutant::cancel_request_acks_cancelled,
                   sim_mutant::cancelled_job_committable,
                   sim_mutant::commit_of_uncertain,
                   sim_mutant::unresolved_never_released,
                   sim_mutant::refill_unrecorded,
                   sim_mutant::event_lost,
                   sim_mutant::event_skipped_by_reader,
                   sim_mutant::second_worker_starts,
                   sim_mutant::paid_by_new_window}) {
      std::string name = test::to_string(m);
      CAPTURE(name);
      std::string violation;
      uint64_t seed = 1;
      for (; seed <= seeds_max && violation.empty(); ++seed) {
        simulation sim{seed, m};
        violation = sim.run();
      }
      CHECK_FALSE(violation.empty());
      MESSAGE("mutant " << name << " caught by seed " << seed - 1 << ": "
                        << violation);
    }
    spdlog::set_level(spdlog::level::err);
  }

  TEST_CASE("the auditor catches each broken grant rule within a few seeds, "
            "by the invariant the rule is for") {
    spdlog::set_level(spdlog::level::off);
    // Every run plants the grants' cases (plant_grants()): the first seed
    // should do; a few leave room for a planting that faults delayed.
    constexpr uint64_t seeds_max = 5;
    struct expectation {
      sim_mutant mutant;
      const char* says; ///< a phrase only that invariant's message has
    };
    for (auto [m, says] : {
           // 17: a voided grant's released credits stayed in it.
           expectation{sim_mutant::void_releases_to_balance,
                       ": the rest went back to the balance"},
           // 18: a grant past its expiry paid a new hold.
           expectation{sim_mutant::hold_skips_expiry, ", which expired at "},
           // 19: a later grant paid while an earlier one had credits.
           expectation{sim_mutant::hold_in_creation_order,
                       "before it in the spending order"},
           // 20: a grant that expired once expired again.
           expectation{sim_mutant::expiry_repeated, " expired 2 times"},
           // 20 at the end: a quiet chat's due grant never expired.
           expectation{sim_mutant::expiry_scan_blind, ", never expired"},
         }) {
      std::string name = test::to_string(m);
      CAPTURE(name);
      std::string violation;
      uint64_t seed = 1;
      for (; seed <= seeds_max && violation.empty(); ++seed) {
        simulation sim{seed, m};
        violation = sim.run();
      }
      CHECK_FALSE(violation.empty());
      CHECK_MESSAGE(violation.find(says) != std::string::npos, violation);
      MESSAGE("mutant " << name << " caught by seed " << seed - 1 << ": "
                        << violation);
    }
    spdlog::set_level(spdlog::level::err);
  }

  // CAF 0.17 treats an exit_msg with reason `kill` as fatal whatever the
  // exit handler: when the registry linked its chat actors, one killed chat
  // actor took the registry and the supervisor down (seed 1). The registry
  // now monitors them.
  TEST_CASE("a chat actor killed with exit_reason::kill is respawned") {
    spdlog::set_level(spdlog::level::off);
    auto count = option("seeds", "CHARGEONCE_SIM_SEEDS", 200);
    for (uint64_t seed = 1; seed <= count; ++seed) {
      simulation sim{seed, sim_mutant::none, caf::exit_reason::kill};
      auto violation = sim.run();
      if (!violation.empty())
        FAIL("seed " << seed << ": " << violation
                     << "\n  trail: " << sim.trail.str());
    }
    spdlog::set_level(spdlog::level::err);
  }

} // TEST_SUITE
