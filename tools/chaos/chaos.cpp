// SPDX-License-Identifier: Apache-2.0
// chargeonce-chaos: real chargeonce-server processes on a real Postgres,
// driven through the client library by simulated gateways, workers and an
// admin while faults are injected on a seeded schedule (kill -9 of servers,
// pg_terminate_backend, Postgres restarts and SIGSTOP pauses, dropped client
// connections, worker processes killed mid-job). Afterwards, with workers
// quiet and the sweeps waited for, Postgres is audited against the record
// of every request and answer. Exit 0: no violation; 1: a violation or the
// harness failed; 2: usage.
#include "tools/chaos/chaos.hpp"

#include "client/client.hpp"
#include "persistence/migrations.hpp"
#include "protocol/catalog.hpp"
#include "protocol/errors.hpp"
#include "tools/chaos/audit.hpp"
#include "tools/chaos/faults.hpp"
#include "tools/chaos/formation.hpp"
#include "tools/chaos/options.hpp"
#include "tools/chaos/process.hpp"
#include "tools/chaos/report.hpp"
#include "tools/chaos/sql_retry.hpp"
#include "tools/chaos/workload.hpp"
#include "tools/common/audit.hpp"
#include "tools/common/seed.hpp"

#include <caf/all.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

namespace {

using namespace chargeonce;
using namespace chargeonce::chaos;

constexpr int exit_ok = 0;
constexpr int exit_violation = 1;
constexpr int exit_usage = 2;

/// Chaos chats live far from real ones, one block of 1,000 per seed.
constexpr chat_id chat_base = 900'000'000'000;
constexpr int64_t process_chats = 8;
/// Marks the servers' Postgres connections for pg_terminate_backend.
constexpr const char* app_name = "chargeonce-chaos";
/// Per request: above the servers' store-timeout, below a stuck run.
constexpr auto client_timeout = std::chrono::seconds(4);
/// How long past --duration a run may wait for --min-acknowledged: ten
/// times what the CI runs ask for takes on a quiet machine (50 commits in
/// about 15 s).
constexpr auto acknowledged_wait_max = std::chrono::seconds(180);

int64_t ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           std::chrono::steady_clock::now() - t0)
    .count();
}

/// How every server is timed, and how the auditor judges deadlines.
audit_limits limits_of(uint64_t seed, const server_timings& t) {
  audit_limits out;
  out.sweep_timeout_ms = t.sweep_timeout_ms;
  out.sweep_interval_ms = t.sweep_interval_ms;
  out.seed = seed;
  return out;
}

/// Everything the run needs besides its options.
struct setup {
  std::unique_ptr<postgres_control> pg;
  std::unique_ptr<ha_formation> ha;
  std::string dsn;
  chat_id first_chat = 0;
};

/// Starts or checks Postgres, migrates, clears this seed's chats.
std::string prepare(const chaos_options& o, setup& s) {
  if (o.postgres_ha) {
    s.ha = std::make_unique<ha_formation>(
      o.ha_cluster, o.data_dir + "/ha",
      o.ha_port_base != 0 ? o.ha_port_base
                          : ha_formation::port_base_for(o.seed));
    std::string err;
    s.dsn = s.ha->start(err);
    if (s.dsn.empty())
      return "cannot start the formation: " + err;
  } else if (o.postgres.empty()) {
    s.pg = std::make_unique<postgres_control>(o.data_dir + "/postgres");
    std::string err;
    s.dsn = s.pg->start(err);
    if (s.dsn.empty())
      return "cannot start Postgres: " + err;
  } else {
    s.dsn = o.postgres;
  }
  // Keyed by the migration versions applied and the chat range cleared.
  if (auto done = retried_while_primary_moves(
        "migrating", [&] { return persistence::migrate(s.dsn); });
      !done)
    return "cannot migrate: " + error_message(done.error());
  s.first_chat = chat_base + static_cast<chat_id>(o.seed % 100000) * 1000;
  if (auto err = retried_while_primary_moves("clearing old chaos chats", [&] {
        return persistence::drop_chats(s.dsn, s.first_chat,
                                       o.chats + process_chats);
      }))
    return "cannot clear old chaos chats: " + error_message(err);
  return {};
}

/// Waits until the sweepers released every reservation left by silent
/// workers and settled every job of unknown outcome, and says how long
/// that took. On a quiet machine it is the last job's deadline and a sweep
/// (up to 8 s); the bound is ten times the longest it can be. A lock that
/// outlives it is left for the audit to report (invariants 4 and 12).
void drain(const setup& s, int64_t chats, const server_timings& t) {
  auto t0 = std::chrono::steady_clock::now();
  auto bound_ms = 10
                  * (std::max(t.sweep_timeout_ms, t.reconcile_timeout_ms)
                     + 2 * t.sweep_interval_ms + t.store_timeout_ms);
  while (ms_since(t0) < bound_ms) {
    auto n = persistence::count_reservations(s.dsn, s.first_chat,
                                             chats + process_chats);
    if (n && *n == 0) {
      spdlog::info("chaos: the sweepers left nothing held {} ms after the "
                   "workload stopped",
                   ms_since(t0));
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  spdlog::warn("chaos: reservations still held {} ms after the workload "
               "stopped: the audit reports them",
               ms_since(t0));
}

/// After --duration, until the record holds what --min-acknowledged asks;
/// "" or what is missing.
std::string await_acknowledged(const chaos_options& o, const recorder& rec) {
  auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    std::string missing;
    for (const auto& [what, n] : o.min_acknowledged)
      if (auto got = rec.acknowledged(what); got < n)
        missing += std::string{missing.empty() ? "" : ", "} + to_string(what)
                   + " " + std::to_string(got) + " of " + std::to_string(n);
    if (missing.empty()) {
      if (!o.min_acknowledged.empty())
        spdlog::info("chaos: --min-acknowledged reached {} ms after "
                     "--duration",
                     ms_since(t0));
      return {};
    }
    if (std::chrono::steady_clock::now() - t0 > acknowledged_wait_max)
      return "--min-acknowledged not reached "
             + std::to_string(ms_since(t0) / 1000)
             + " s after --duration: acknowledged " + missing;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

/// What --catalog names: the built-in catalog, one drawn from the seed or a
/// file's; "" or why not in `error`. A catalog other than the built-in one
/// is written to DATA-DIR/catalog.json for the servers.
catalog products_for(const chaos_options& o, std::string& path,
                     std::string& error) {
  if (o.catalog == "builtin") {
    // The servers get --image-cancel-after-start=request to match.
    auto out = builtin_catalog({});
    out.kinds.back().cancel_after_start = cancel_policy::request;
    return out;
  }
  catalog out;
  if (o.catalog == "generated") {
    std::mt19937_64 rng{o.seed * 104729 + 7};
    out = generated_catalog(rng);
    // Both policies: the last kind (the one cancelled after a reserve) asks
    // its worker to stop, and every other kind before it does too.
    for (size_t i = 0; i < out.kinds.size(); ++i)
      if ((out.kinds.size() - 1 - i) % 2 == 0)
        out.kinds[i].cancel_after_start = cancel_policy::request;
  } else {
    std::ifstream in{o.catalog};
    std::stringstream text;
    text << in.rdbuf();
    if (!in) {
      error = "cannot read catalog " + o.catalog;
      return out;
    }
    if (auto problem = parse_catalog(text.str(), out); !problem.empty()) {
      error = "catalog " + o.catalog + ": " + problem;
      return out;
    }
  }
  path = o.data_dir + "/catalog.json";
  std::ofstream{path} << to_json(out).dump(2) << '\n';
  spdlog::info("chaos: catalog {} kinds={} pockets={}", path, out.kind_names(),
               out.pocket_names());
  return out;
}

/// Where --self-test-pocket-move puts its unit: the catalog's first daily
/// pocket, else a pocket the catalog lacks (still not conserved).
std::string first_daily_pocket(const catalog& products) {
  for (const auto& p : products.pockets)
    if (!p.purchased)
      return p.name;
  return "daily_self_test";
}

/// A forged ledger charge for `id`: keyed by it (the ledger's reservation
/// ids are unique), so repeated while the primary moves.
caf::error forge_charge(const std::string& dsn, chat_id chat,
                        reservation_id id) {
  return retried_while_primary_moves("forging a charge", [&] {
    return persistence::forge_charge(dsn, chat, id);
  });
}

/// --self-test-second-start: the record of the first start acknowledged to
/// a named worker, once more, as acknowledged to another worker: what the
/// client would have seen had the server let both deliveries run the job.
caf::error start_by_a_second_worker(recorder& rec) {
  for (const auto& r : rec.ops)
    if (r.what == op::start && r.ok() && !r.worker.empty()) {
      auto forged = r;
      forged.worker += "-forged";
      rec.add(forged);
      return caf::none;
    }
  return caf::make_error(ec::not_found, "no start acknowledged to a worker");
}

/// --self-test-cancel-charged: a ledger charge for the first job a cancel
/// acknowledged as cancelled while queued.
caf::error charge_a_cancelled_job(const std::string& dsn, const recorder& rec) {
  for (const auto& r : rec.ops)
    if (r.what == op::cancel && r.ok() && !r.cancel_requested && r.id != 0)
      return forge_charge(dsn, r.chat, r.id);
  return caf::make_error(ec::not_found, "no cancel was acknowledged");
}

/// --self-test-uncertain-charged: a ledger charge for the first job that
/// went uncertain and that no resolve succeeded was sent for.
caf::error charge_an_uncertain_job(const std::string& dsn,
                                   const recorder& rec) {
  std::set<reservation_id> succeeded;
  for (const auto& r : rec.ops)
    if (r.what == op::resolve && r.resolution == "succeeded")
      succeeded.insert(r.id);
  for (const auto& r : rec.ops)
    if (r.what == op::uncertain && r.ok() && succeeded.count(r.id) == 0)
      return forge_charge(dsn, r.chat, r.id);
  return caf::make_error(ec::not_found, "no job went uncertain unresolved");
}

/// The run itself: servers, clients, workload and faults; fills `rec`.
std::string run(const chaos_options& o, setup& s, recorder& rec,
                const catalog& products, const std::string& catalog_path,
                std::map<chat_id, pockets>& initial,
                std::map<chat_id, int32_t>& max_active_jobs,
                chat_id& planted_chat) {
  std::vector<std::string> policy_args;
  if (catalog_path.empty())
    policy_args.push_back("--image-cancel-after-start=request");
  // The self-test's servers do not wait for the standby: what they commit
  // during a stalled replication is acknowledged and then lost.
  auto server_dsn = s.dsn + " application_name=" + app_name;
  if (o.self_test_lost_commit)
    server_dsn += " options='-c synchronous_commit=local'";
  const server_timings t;
  server_set servers{o.server,  server_dsn,   o.data_dir, t,
                     o.servers, catalog_path, policy_args};
  for (size_t i = 0; i < o.servers; ++i)
    if (!servers.start(i))
      return "server " + std::to_string(i) + " did not start; see "
             + servers.log_of(i);
  caf::actor_system_config cfg;
  client::prepare_config(cfg);
  caf::actor_system sys{cfg};
  client::options copts;
  for (auto port : servers.ports())
    copts.servers.push_back(client::endpoint{"127.0.0.1", port});
  copts.timeout = client_timeout;
  client::client c{sys, copts};
  workload_options wopts;
  wopts.seed = o.seed;
  wopts.first_chat = s.first_chat;
  wopts.chats = o.chats;
  wopts.process_chats = process_chats;
  wopts.gateways = o.gateways;
  wopts.workers = o.workers;
  wopts.late_ms = t.sweep_timeout_ms + 2 * t.sweep_interval_ms + 1000;
  wopts.refill_interval_ms = t.refill_interval_ms;
  wopts.products = products;
  // The forgeries need jobs that a short run may lack: planted ones.
  wopts.plant = o.self_test_over_capture || o.self_test_cancel_charged
                || o.self_test_uncertain_charged || o.self_test_uncertain_left
                || o.self_test_ledger_chain || o.self_test_lost_event
                || o.self_test_window_paid_twice;
  workload wl{c, rec, wopts};
  std::mt19937_64 rng{o.seed};
  if (!wl.create_chats(rng))
    return "cannot create the chats";
  initial = wl.initial;
  max_active_jobs = wl.max_active_jobs;
  fault_options fopts;
  fopts.enabled = o.faults;
  fopts.dsn = s.dsn;
  fopts.app_name = app_name;
  fopts.self_exe = std::filesystem::read_symlink("/proc/self/exe").string();
  fopts.dir = o.data_dir;
  fopts.seed = o.seed;
  fopts.first_process_chat = s.first_chat + o.chats;
  fopts.process_chats = process_chats;
  fopts.process_kind = products.kinds.back().name;
  if (o.self_test_lost_commit) {
    fopts.stall_replication_ms = 3000;
    fopts.commit_while = [&wl](const std::function<bool()>& stalled) {
      return wl.commit_while(stalled);
    };
  }
  fopts.probe = [&wl] {
    return wl.probe();
  };
  fault_injector faults{rec, servers, s.pg.get(), s.ha.get(), fopts};
  if (auto err = wl.plant(); !err.empty())
    return err;
  planted_chat = wl.planted_chat();
  spdlog::info("chaos: running seed={} duration={}s servers={} chats={}",
               o.seed, o.duration_s, o.servers, o.chats);
  wl.start();
  auto ok = faults.run(std::chrono::steady_clock::now()
                       + std::chrono::seconds(o.duration_s));
  auto short_of = ok ? await_acknowledged(o, rec) : std::string{};
  // A job that a refill overtakes, for --self-test-window-paid-twice: a
  // short run's chats seldom commit across a window's turn.
  std::string straddled;
  if (ok && short_of.empty() && o.self_test_window_paid_twice
      && !wl.straddle_window())
    straddled = "nothing to forge: no planted job straddled a window's turn";
  if (ok && short_of.empty())
    wl.touch_after_refill_interval();
  wl.stop();
  if (!ok)
    return faults.error();
  if (!short_of.empty())
    return short_of;
  if (!straddled.empty())
    return straddled;
  spdlog::info("chaos: workload stopped, waiting for the sweepers");
  drain(s, o.chats, t);
  return {};
}

void setup_logging() {
  auto logger = spdlog::stderr_color_mt("chargeonce-chaos");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z [%l] %v");
}

/// Restart and pause need the embedded cluster, failover a formation: a
/// fault the run's Postgres cannot take is refused if asked for, else
/// left out of the default list.
void check_faults(chaos_options& o) {
  bool embedded = o.postgres.empty() && !o.postgres_ha;
  std::vector<fault> kept;
  for (auto f : o.faults) {
    const char* missing = nullptr;
    if ((f == fault::restart_postgres || f == fault::pause_postgres)
        && !embedded)
      missing = " needs the embedded cluster (drop --postgres and "
                "--postgres-ha)";
    if ((f == fault::failover || f == fault::failover_node) && !o.postgres_ha)
      missing = " needs --postgres-ha";
    if (missing != nullptr && o.faults_given)
      throw usage_error(std::string{"--faults="} + to_string(f) + missing);
    if (missing == nullptr)
      kept.push_back(f);
  }
  o.faults = kept;
}

/// The self-tests' forgeries, written after the run and before the audit,
/// in the whole range (the planted jobs are on the worker processes'
/// chats, which start with 1,000 jobs' worth in every pocket). One that
/// finds nothing to forge (no job of its sort, though the run plants one of
/// each) says "nothing to forge": a harness error, never a verdict of the
/// auditor. Those keyed by a reservation id are repeated while the primary
/// moves; the others pick "the first row of a kind", which a repeat could
/// forge twice, and are not taken with --postgres-ha (parse_options).
std::string forge(const chaos_options& o, const setup& s, recorder& rec,
                  const catalog& products) {
  std::string error;
  auto attempt = [&](bool wanted, const std::string& what, auto&& forgery) {
    if (!wanted || !error.empty())
      return;
    if (auto err = forgery())
      error = (err == ec::not_found ? "nothing to forge: cannot " : "cannot ")
              + what + ": " + error_message(err);
  };
  const auto first = s.first_chat;
  const auto count = o.chats + process_chats;
  // First: the forgeries below rewrite the planted chat's later rows, which
  // this one needs as the run left them.
  attempt(o.self_test_window_paid_twice,
          "make a past window's charge take the new window's pockets too", [&] {
            return persistence::forge_window_paid_twice(s.dsn, first, count);
          });
  attempt(o.self_test_violation, "plant the self-test row", [&] {
    // Computed unsigned, like the seed: past 2^63 - 9e12 the id wraps.
    return forge_charge(
      s.dsn, first + 1,
      static_cast<reservation_id>(9'000'000'000'000 + o.seed));
  });
  attempt(o.self_test_pocket_move, "move the self-test unit", [&] {
    return persistence::forge_pocket_move(s.dsn, first, count,
                                          first_daily_pocket(products));
  });
  attempt(o.self_test_cancel_charged, "charge a cancelled job",
          [&] { return charge_a_cancelled_job(s.dsn, rec); });
  attempt(o.self_test_uncertain_charged, "charge an uncertain job",
          [&] { return charge_an_uncertain_job(s.dsn, rec); });
  attempt(o.self_test_uncertain_left, "reopen an uncertain job", [&] {
    return persistence::forge_reopen_uncertain(s.dsn, first, count);
  });
  attempt(o.self_test_over_capture, "over-capture a commit",
          [&] { return persistence::forge_over_capture(s.dsn, first, count); });
  attempt(o.self_test_ledger_chain, "forge a ledger row's pockets",
          [&] { return persistence::forge_ledger_after(s.dsn, first, count); });
  attempt(o.self_test_grant_left, "charge a grant behind the balance",
          [&] { return persistence::forge_grant_left(s.dsn, first, count); });
  attempt(o.self_test_sole_grant, "name another chat's grant as sole",
          [&] { return persistence::forge_sole_grant(s.dsn, first, count); });
  attempt(
    o.self_test_grant_conserved, "give a grant a credit no row gave",
    [&] { return persistence::forge_grant_conserved(s.dsn, first, count); });
  attempt(o.self_test_hold_expired,
          "move a held grant's expiry before its hold",
          [&] { return persistence::forge_hold_expired(s.dsn, first, count); });
  attempt(o.self_test_grant_order, "make a hold pass over a grant",
          [&] { return persistence::forge_grant_order(s.dsn, first, count); });
  attempt(o.self_test_void_twice, "void a grant twice",
          [&] { return persistence::forge_void_twice(s.dsn, first, count); });
  attempt(o.self_test_lost_event, "lose an event",
          [&] { return persistence::forge_lost_event(s.dsn, first, count); });
  attempt(o.self_test_second_start, "start a job by a second worker",
          [&] { return start_by_a_second_worker(rec); });
  return error;
}

int chaos_main(chaos_options& o) {
  setup_logging();
  std::signal(SIGPIPE, SIG_IGN);
  std::filesystem::create_directories(o.data_dir);
  setup s;
  recorder rec;
  std::map<chat_id, pockets> initial;
  auto limits = limits_of(o.seed, server_timings{});
  std::string catalog_path;
  std::string error;
  chat_id planted_chat = 0;
  auto products = products_for(o, catalog_path, error);
  if (error.empty())
    error = prepare(o, s);
  if (error.empty())
    error = run(o, s, rec, products, catalog_path, initial,
                limits.max_active_jobs, planted_chat);
  audit_result result;
  if (error.empty()) {
    error = forge(o, s, rec, products);
    auto snap = retried_while_primary_moves("reading the audit snapshot", [&] {
      return persistence::read_audit_snapshot(s.dsn, s.first_chat,
                                              o.chats + process_chats);
    });
    if (snap)
      result = audit(rec, initial, *snap, limits);
    else if (error.empty())
      error = "cannot read the audit snapshot: " + error_message(snap.error());
  }
  if (s.pg)
    s.pg->shutdown();
  if (s.ha)
    s.ha->stop();
  bool self_test = o.self_test_violation || o.self_test_pocket_move
                   || o.self_test_over_capture || o.self_test_cancel_charged
                   || o.self_test_uncertain_charged
                   || o.self_test_uncertain_left || o.self_test_ledger_chain
                   || o.self_test_lost_commit || o.self_test_lost_event
                   || o.self_test_second_start || o.self_test_window_paid_twice
                   || o.self_test_grant_left || o.self_test_sole_grant
                   || o.self_test_grant_conserved || o.self_test_hold_expired
                   || o.self_test_grant_order || o.self_test_void_twice;
  run_facts facts{o.seed, o.duration_s, o.servers, o.faults,
                  error,  self_test,    o.catalog, planted_chat};
  auto summary = summarize(facts, rec, result);
  std::cout << render(summary) << std::flush;
  if (!o.json_path.empty())
    std::ofstream{o.json_path} << summary.dump(2) << '\n';
  return error.empty() && result.violations_total == 0 ? exit_ok
                                                       : exit_violation;
}

} // namespace

namespace chargeonce {

int run_chaos(int argc, char** argv) {
  chaos_options o;
  try {
    o = parse_options(argc, argv);
    if (o.help) {
      std::cout << usage_text;
      return exit_ok;
    }
    if (o.worker_process)
      return worker_process_main(o.worker);
    check_faults(o);
  } catch (const usage_error& e) {
    std::cerr << "chargeonce-chaos: " << e.what() << "\n\n" << usage_text;
    return exit_usage;
  }
  return chaos_main(o);
}

} // namespace chargeonce
