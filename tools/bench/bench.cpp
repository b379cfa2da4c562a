// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench: closed-loop clients running reserve → start → commit
// cycles through the client library (remote), over HTTP/JSON (http),
// against the actors in this process (in-process), and as one Postgres
// transaction per operation (baseline), each on freshly seeded chats;
// reports cycles/s and latency percentiles per operation; and how fast the
// server's sweep releases stuck reservations (sweep). Exit status: 0
// success, 1 an operation failed unexpectedly (or setup failed), 2 usage
// error.
//
// This file runs the modes; options parses the command line, drivers are
// the ways to the service (baseline: the per-operation design), loop
// measures, audit checks what Postgres holds afterwards, processes runs
// clients as several processes, reference runs the reference kit's pgbench
// scripts, sweep times the sweep, run_meter reads what a run cost (CPU,
// Postgres's statements), report and compare print.
#include "tools/bench/bench.hpp"

#include "actors/supervisor_actor.hpp"
#include "persistence/migrations.hpp"
#include "persistence/store.hpp"
#include "protocol/config.hpp"
#include "protocol/errors.hpp"
#include "tools/bench/async.hpp"
#include "tools/bench/audit.hpp"
#include "tools/bench/drivers.hpp"
#include "tools/bench/http.hpp"
#include "tools/bench/loop.hpp"
#include "tools/bench/options.hpp"
#include "tools/bench/persistence.hpp"
#include "tools/bench/processes.hpp"
#include "tools/bench/reference.hpp"
#include "tools/bench/report.hpp"
#include "tools/bench/run_meter.hpp"
#include "tools/bench/sweep.hpp"
#include "tools/common/seed.hpp"

#include <caf/all.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <thread>

namespace {

using namespace chargeonce;
using namespace chargeonce::bench;

/// Enough credits that no chat can run dry in any run: insufficient_images
/// would measure the pricing rule, not the service.
constexpr int32_t seed_balance = 1000000;
/// A server checks every reservation again queue-notice-delay (default 5 s)
/// after its reserve. Waiting that out after a remote run keeps those checks
/// off the next run's clock, and off chats we are about to remove.
constexpr auto remote_settle = std::chrono::seconds(6);

// -- chats --------------------------------------------------------------------

/// A random base far from hand-made chats, so that runs (and other users of
/// the same database) never share a chat.
chat_id random_base() {
  std::random_device seed;
  std::mt19937_64 rng{(uint64_t{seed()} << 32) | seed()};
  std::uniform_int_distribution<int64_t> base{int64_t{1} << 40,
                                              int64_t{1} << 52};
  return base(rng);
}

/// Fresh chats for one run (tools/common/seed.cpp holds the SQL).
chat_range seed_chats(const std::string& dsn, int64_t count, int32_t grants) {
  chat_range out{random_base(), count};
  if (auto err =
        persistence::seed_chats(dsn, out.first, count, seed_balance, grants))
    throw std::runtime_error(error_message(err));
  return out;
}

/// Removes a run's chats with everything that refers to them, so the
/// database does not grow run after run.
void drop_chats(const std::string& dsn, const chat_range& range) {
  if (auto err = persistence::drop_chats(dsn, range.first, range.count))
    throw std::runtime_error(error_message(err));
}

// -- modes --------------------------------------------------------------------

struct in_process_config : caf::actor_system_config {
  in_process_config() { register_protocol(*this); }
};

/// The server's actors on a fresh actor system per run: its destructor waits
/// for the pool, so no connection of this run outlives it. Reports this
/// process's peak RSS over the run (and RSS at its end, before shutdown).
run_result run_in_process(size_t clients, const bench_options& o,
                          const chat_range& chats, postgres_watch& pg) {
  reset_peak_rss(); // else the peak of an earlier run (or the seeding)
  in_process_config cfg;
  caf::actor_system sys{cfg};
  supervisor_options sup;
  sup.connections = o.connections;
  if (o.idle_timeout_s > 0)
    sup.chat.idle_timeout = std::chrono::seconds(o.idle_timeout_s);
  persistence::store_options store{o.postgres};
  supervisor_actor root =
    sys.spawn(make_supervisor, make_persistence_factory(sys, store), sup);
  api_actor api;
  caf::scoped_actor self{sys};
  self->request(root, request_timeout, atom::api_v)
    .receive([&](api_actor& x) { api = std::move(x); }, [](caf::error&) {});
  if (!api) {
    caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
    throw std::runtime_error("the supervisor did not hand out its API");
  }
  run_meter meter{o, pg, 0};
  auto result = run_clients(
    "in_process", clients, o, chats,
    [&] { return make_in_process_driver(sys, api); }, meter.window());
  meter.finish(result);
  result.memory = read_memory(0, "bench");
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  return result;
}

/// Fails early and clearly when the servers do not see our database.
void check_servers_see(client::client& api, const chat_range& chats) {
  auto probe = api.status(chats.first + 1);
  if (!probe && probe.error() == ec::not_found)
    throw std::runtime_error("the servers do not know the seeded chats: do "
                             "they use the database of --postgres?");
  if (!probe)
    throw std::runtime_error("cannot reach the servers: "
                             + error_name(probe.error()) + " "
                             + error_message(probe.error()));
}

/// One line on stderr per run, so a long invocation shows where it is.
void progress(const char* mode, size_t clients) {
  std::fprintf(stderr, "chargeonce-bench: run mode=%s clients=%zu\n", mode,
               clients);
}

/// Seeds chats, runs one mode, removes the chats again.
template <class F>
auto seeded_run(const bench_options& o, F f) {
  auto chats = seed_chats(o.postgres, o.chats, o.grants_per_chat);
  try {
    auto out = f(chats);
    drop_chats(o.postgres, chats);
    return out;
  } catch (...) {
    try {
      drop_chats(o.postgres, chats); // the original error matters more
    } catch (const std::exception& e) {
      spdlog::error("cannot remove the seeded chats: {}", e.what());
    }
    throw;
  }
}

/// Client threads in this process, or --processes children, in
/// `make_window`'s window.
run_result run_mode(const std::string& mode, size_t clients,
                    const bench_options& o, const chat_range& chats,
                    const driver_factory& make_driver,
                    const window_maker& make_window) {
  if (o.processes > 1)
    return run_processes(mode, clients, o, chats, make_window);
  return run_clients(mode, clients, o, chats, make_driver, make_window);
}

/// After a run against a server: its memory and CPU, then a pause.
void finish_remote_run(run_result& result, run_meter& meter,
                       const bench_options& o) {
  meter.finish(result);
  if (o.server_pid > 0)
    result.memory = read_memory(o.server_pid, "server");
  std::this_thread::sleep_for(remote_settle);
}

run_result run_remote(remote_session& session, size_t clients,
                      const bench_options& o, const chat_range& chats,
                      postgres_watch& pg) {
  check_servers_see(session.api(), chats);
  progress("remote", clients);
  run_meter meter{o, pg, o.server_pid};
  auto result = run_mode(
    "remote", clients, o, chats,
    [&] { return make_remote_driver(session.api()); }, meter.window());
  finish_remote_run(result, meter, o);
  return result;
}

/// --client-api=async: the same clients as continuations instead of threads.
run_result run_remote_async(remote_session& session, size_t clients,
                            const bench_options& o, const chat_range& chats,
                            postgres_watch& pg) {
  check_servers_see(session.api(), chats);
  progress("remote_async", clients);
  run_meter meter{o, pg, o.server_pid};
  auto result =
    run_async_clients(session.api(), clients, o, chats, meter.window());
  finish_remote_run(result, meter, o);
  return result;
}

/// --client-api=http: threads on kept-alive HTTP connections.
run_result run_http(size_t clients, const bench_options& o,
                    const chat_range& chats, postgres_watch& pg) {
  check_http_sees(o.http, chats.first + 1);
  progress("http", clients);
  run_meter meter{o, pg, o.server_pid};
  auto result = run_clients(
    "http", clients, o, chats, [&] { return make_http_driver(o.http); },
    meter.window());
  finish_remote_run(result, meter, o);
  return result;
}

/// --baseline: one Postgres transaction per operation, no server.
run_result run_baseline(size_t clients, const bench_options& o,
                        const chat_range& chats, postgres_watch& pg) {
  progress("baseline", clients);
  run_meter meter{o, pg, 0};
  auto result = run_mode(
    "baseline", clients, o, chats,
    [&] { return make_baseline_driver(o.postgres); }, meter.window());
  meter.finish(result);
  return result;
}

/// --persistence: the persistence layer alone, mode after mode.
std::vector<persistence_run> run_persistence_all(const bench_options& o) {
  std::vector<persistence_run> out;
  if (o.persistence_batches.empty())
    return out; // not asked for: the JSON leaves it out too
  for (const auto& m : persistence_modes(o)) {
    std::fprintf(stderr,
                 "chargeonce-bench: run mode=persistence/%s batch_cycles=%zu\n",
                 m.mode.c_str(), m.batch_cycles);
    out.push_back(seeded_run(o, [&](const chat_range& chats) {
      return run_persistence(m, o, chats);
    }));
  }
  return out;
}

/// --sweep: the sweep of stuck reservations beside one DELETE of as many,
/// each on chats of its own.
std::optional<sweep_run> run_sweep_if_asked(const bench_options& o) {
  if (!o.sweep)
    return std::nullopt; // not asked for: the JSON leaves it out too
  std::fprintf(stderr,
               "chargeonce-bench: run mode=sweep reservations=%lld "
               "connections=%zu\n",
               static_cast<long long>(o.sweep_reservations), o.connections);
  return run_sweep(o, chat_range{random_base(), o.sweep_reservations},
                   chat_range{random_base(), o.sweep_reservations});
}

/// Seeds chats, runs one mode on them, and before they go checks that
/// Postgres charged exactly what the clients were told.
template <class F>
run_result audited_run(const bench_options& o, F f) {
  return seeded_run(o, [&](const chat_range& chats) {
    auto out = f(chats);
    out.audit = audit_run(o.postgres, chats.first, chats.count, seed_balance,
                          out.stats.acknowledged);
    return out;
  });
}

/// Every run of one invocation, in the order they ran.
struct all_runs {
  std::vector<run_result> runs;
  std::vector<reference_run> reference;
};

void run_reference(reference_bench& ref, size_t clients, all_runs& out) {
  for (const auto& variant : reference_variants) {
    progress(("reference/" + variant).c_str(), clients);
    if (auto r = ref.run(variant, clients))
      out.reference.push_back(std::move(*r));
  }
}

/// Per client count, every mode one after the other, so that the ratios
/// compare runs minutes apart rather than invocations hours apart.
all_runs run_all(const bench_options& o, const reference_options& r,
                 postgres_watch& pg) {
  all_runs out;
  std::unique_ptr<remote_session> session;
  if (!o.servers.empty())
    session = std::make_unique<remote_session>(o.servers);
  std::unique_ptr<reference_bench> ref;
  if (r.enabled)
    ref = std::make_unique<reference_bench>(o, r);
  for (auto clients : o.clients) {
    if (session && o.blocking_api)
      out.runs.push_back(audited_run(o, [&](const chat_range& chats) {
        return run_remote(*session, clients, o, chats, pg);
      }));
    if (session && o.async_api)
      out.runs.push_back(audited_run(o, [&](const chat_range& chats) {
        return run_remote_async(*session, clients, o, chats, pg);
      }));
    if (o.http_api)
      out.runs.push_back(audited_run(o, [&](const chat_range& chats) {
        return run_http(clients, o, chats, pg);
      }));
    if (o.in_process)
      out.runs.push_back(audited_run(o, [&](const chat_range& chats) {
        progress("in_process", clients);
        return run_in_process(clients, o, chats, pg);
      }));
    if (o.baseline)
      out.runs.push_back(audited_run(o, [&](const chat_range& chats) {
        return run_baseline(clients, o, chats, pg);
      }));
    if (ref)
      run_reference(*ref, clients, out);
  }
  return out;
}

/// Operations that failed, answers Postgres does not back, failed pgbench
/// runs, stuck reservations the sweep left: each makes the invocation fail.
uint64_t failures_of(const all_runs& all,
                     const std::vector<persistence_run>& alone,
                     const std::optional<sweep_run>& sweep) {
  uint64_t unexpected = 0;
  uint64_t audits = 0;
  uint64_t pgbench = 0;
  for (const auto& r : all.runs) {
    unexpected += r.stats.unexpected;
    audits += r.audit && !r.audit->ok() ? 1 : 0;
  }
  for (const auto& r : alone)
    unexpected += r.unexpected;
  for (const auto& r : all.reference)
    pgbench += r.pgbench_status != 0 ? 1 : 0;
  if (unexpected > 0)
    spdlog::error("{} operations failed unexpectedly", unexpected);
  if (audits > 0)
    spdlog::error("{} runs left Postgres holding other charges than their "
                  "clients were answered (see the audit)",
                  audits);
  if (pgbench > 0)
    spdlog::error("{} reference runs failed (see pgbench's output above)",
                  pgbench);
  uint64_t unswept = sweep && !sweep->ok() ? 1 : 0;
  if (unswept > 0)
    spdlog::error("the sweep did not release all {} stuck reservations "
                  "(released {}, left {}), or the DELETE removed {}",
                  sweep->reservations, sweep->released_rows, sweep->left,
                  sweep->deleted);
  return unexpected + audits + pgbench + unswept;
}

// -- main ---------------------------------------------------------------------

/// stdout carries the report (or the JSON), so logs go to stderr. Errors
/// only: in-process, the actors log every operation at info and every busy
/// at warning, which would flood the terminal and be measured as well.
void setup_logging() {
  auto logger = spdlog::stderr_color_mt("chargeonce-bench");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z [%l] %v");
  spdlog::set_level(spdlog::level::err);
}

int bench_main(const bench_options& o, const reference_options& r) {
  if (auto done = persistence::migrate(o.postgres); !done) {
    spdlog::critical("cannot migrate error={}", error_message(done.error()));
    return exit_failed;
  }
  // Before any run: --statements fails here when it cannot be had.
  auto pg = postgres_watch::of(o);
  auto all = run_all(o, r, pg);
  auto alone = run_persistence_all(o);
  auto sweep = run_sweep_if_asked(o);
  auto track = pg.statements ? pg.statements->track() : std::string{};
  if (o.json)
    print_json(o, track, all.runs, alone, all.reference, sweep);
  else
    print_table(o, track, all.runs, alone, all.reference, sweep);
  return failures_of(all, alone, sweep) > 0 ? exit_failed : exit_ok;
}

} // namespace

namespace chargeonce {

int run_bench(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    std::cout << usage_text << reference_usage;
    return exit_ok;
  }
  bench_options opts;
  reference_options ref;
  try {
    // The reference's flags are its own; the rest is bench_options'.
    std::vector<std::string> args{argv, argv + argc};
    ref = take_reference_flags(args);
    std::vector<char*> rest;
    rest.reserve(args.size());
    for (auto& x : args)
      rest.push_back(x.data());
    opts = parse_args(static_cast<int>(rest.size()), rest.data());
  } catch (const usage_error& e) {
    std::cerr << "chargeonce-bench: " << e.what() << " (--help: usage)\n";
    return exit_usage;
  }
  setup_logging();
  try {
    return opts.child ? child_main(opts) : bench_main(opts, ref);
  } catch (const std::exception& e) {
    spdlog::critical("bench failed: {}", e.what());
    return exit_failed;
  }
}

} // namespace chargeonce
