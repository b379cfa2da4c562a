// SPDX-License-Identifier: Apache-2.0
// chargeonce-server: wires Postgres, the persistence pool and the registry,
// publishes the API, and shuts down on SIGINT/SIGTERM, or with exit status
// exit_core_down when the supervisor dies (so that systemd restarts it).
#include "main/server/server.hpp"

#include "actors/facade_actor.hpp"
#include "actors/persistence_actor.hpp"
#include "actors/supervisor_actor.hpp"
#include "main/http/options.hpp"
#include "main/http/server.hpp"
#include "main/server/config.hpp"
#include "main/server/embedded_cluster.hpp"
#include "persistence/catalog_kinds.hpp"
#include "persistence/migrations.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <pthread.h>
#include <string_view>
#include <vector>

namespace {

using namespace chargeonce;

/// Sent by the server to its own serving thread when the supervisor ends.
constexpr int core_down_signal = SIGUSR1;

/// Blocks SIGINT/SIGTERM and core_down_signal in every thread (CAF's
/// included, which inherit the mask) so that only the serving thread's
/// sigwait sees them.
sigset_t block_shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, core_down_signal);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

/// The supervisor's end, reported to the thread that waits in sigwait.
struct core_watch {
  std::mutex mtx;
  pthread_t waiter = pthread_self();
  bool armed = true; ///< false once the server stops the supervisor itself
  bool down = false;
  caf::error reason;
};

/// Without it a dead core would leave the ports published and every request
/// failing with request_receiver_down: nothing outside would notice.
std::shared_ptr<core_watch> watch_core(const supervisor_actor& root) {
  auto w = std::make_shared<core_watch>();
  root->attach_functor([w](const caf::error& reason) {
    std::lock_guard<std::mutex> guard{w->mtx};
    if (!w->armed)
      return;
    w->down = true;
    w->reason = reason;
    // Thread-directed: no other thread of the process (a test's) may get
    // a signal whose default action ends the process.
    pthread_kill(w->waiter, core_down_signal);
  });
  return w;
}

/// After this the supervisor's end is ours, not news.
void disarm(core_watch& w) {
  std::lock_guard<std::mutex> guard{w.mtx};
  w.armed = false;
}

/// Waits for SIGINT/SIGTERM or for the supervisor's end; the exit status.
int wait_for_stop(const sigset_t& signals, core_watch& w) {
  for (;;) {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig != core_down_signal) {
      spdlog::info("shutting down signal={}", sig);
      return 0;
    }
    std::lock_guard<std::mutex> guard{w.mtx};
    if (w.down) {
      spdlog::critical("actors down, exiting status={} reason={}",
                       exit_core_down, caf::to_string(w.reason));
      return exit_core_down;
    }
    spdlog::warn("ignoring signal={}: the core is alive", sig);
  }
}

void setup_logging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("chargeonce");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z [%l] %v");
  spdlog::set_level(spdlog::level::from_str(level));
}

/// Starts the embedded cluster when no --postgres was given, then migrates.
std::optional<std::string>
prepare_database(const server_config& cfg,
                 std::unique_ptr<embedded_cluster>& cluster) {
  std::string dsn = cfg.postgres;
  if (dsn.empty()) {
    cluster = std::make_unique<embedded_cluster>(cfg.data_dir);
    auto started = cluster->start();
    if (!started) {
      spdlog::critical("embedded postgres failed error={}",
                       error_message(started.error()));
      return std::nullopt;
    }
    dsn = *started;
  }
  if (auto done = persistence::migrate(dsn); !done) {
    spdlog::critical("cannot migrate error={}", error_message(done.error()));
    return std::nullopt;
  }
  if (auto err = persistence::record_catalog_kinds(dsn, cfg.products())) {
    spdlog::critical("refusing the catalog error={}", error_message(err));
    return std::nullopt;
  }
  return dsn;
}

template <class Duration>
std::chrono::milliseconds ms(Duration x) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(x);
}

persistence::store_options store_options_of(const server_config& cfg,
                                            const std::string& dsn) {
  persistence::store_options out;
  out.dsn = dsn;
  out.statement_timeout = ms(cfg.statement_timeout);
  out.sweep_timeout = ms(cfg.sweep_timeout);
  out.lease_duration = ms(cfg.lease_duration);
  out.release_retention = ms(cfg.release_retention);
  out.event_retention = ms(cfg.event_retention);
  out.expiry_notice = ms(cfg.expiry_notice);
  out.balance_low_threshold = cfg.balance_low_threshold;
  out.refill_interval = ms(cfg.refill_interval);
  out.reactivation_after = ms(cfg.reactivation_after);
  out.products = cfg.products();
  out.free_max_active_jobs = cfg.free_max_active_jobs;
  out.premium_max_active_jobs = cfg.premium_max_active_jobs;
  out.request_retention = ms(cfg.request_retention);
  out.reconcile_timeout = ms(cfg.reconcile_timeout);
  return out;
}

supervisor_options supervisor_options_of(const server_config& cfg) {
  supervisor_options out;
  out.connections = cfg.connections;
  out.chat =
    chat_options{cfg.store_timeout, cfg.idle_timeout, cfg.queue_notice_delay};
  out.sweep_interval = cfg.sweep_interval;
  out.reactivation_interval = cfg.reactivation_interval;
  out.events.subscriber_timeout = cfg.subscriber_timeout;
  out.events.store_timeout = cfg.store_timeout;
  return out;
}

/// The HTTP adapter's share of the server's options. Its requests wait
/// longer than the chat actors' store timeout, so that those answer first.
http::http_options http_options_of(const server_config& cfg) {
  http::http_options out;
  out.port = cfg.http_port;
  out.address = cfg.http_bind;
  out.gateway_token = cfg.http_gateway_token;
  out.worker_token = cfg.http_worker_token;
  out.admin_token = cfg.http_admin_token;
  out.tls_cert = cfg.tls_cert;
  out.tls_key = cfg.tls_key;
  out.threads = cfg.http_threads;
  out.streams_max = cfg.http_max_streams;
  out.body_max = cfg.http_max_body;
  out.io_timeout = cfg.http_timeout;
  out.request_timeout = cfg.store_timeout + std::chrono::seconds(5);
  return out;
}

/// The registry's handle, from the supervisor that owns it: the published
/// facades relay to it.
caf::expected<core_actor> core_of(caf::actor_system& sys,
                                  const supervisor_actor& root) {
  caf::expected<core_actor> out{caf::sec::none};
  caf::scoped_actor self{sys};
  self->request(root, std::chrono::seconds(10), atom::core_v)
    .receive([&](core_actor& x) { out = std::move(x); },
             [&](caf::error& err) { out = std::move(err); });
  return out;
}

/// One published endpoint: who answers there, for whom, on which port.
struct listener {
  std::string role; ///< api, gateway, worker or admin
  caf::actor handle;
  uint16_t port = 0;
  bool tls = false;
};

/// Publishes a typed handle, so that remote clients can check its interface
/// at connect time.
template <class Handle>
caf::expected<listener>
open_listener(caf::actor_system& sys, const std::string& role, Handle handle,
              int port, const std::string& address, bool tls = false) {
  auto p = static_cast<uint16_t>(port);
  auto bound = tls ? caf::openssl::publish(handle, p, address.c_str(), true)
                   : sys.middleman().publish(handle, p, address.c_str(), true);
  if (!bound)
    return bound.error();
  spdlog::info("listening role={} address={} port={} tls={}", role, address,
               *bound, tls);
  return listener{role, caf::actor_cast<caf::actor>(handle), *bound, tls};
}

/// The all-in-one API on --port (loopback only), plus each role's facade on
/// its own port when configured.
caf::expected<std::vector<listener>> open_listeners(caf::actor_system& sys,
                                                    const server_config& cfg,
                                                    const core_actor& api) {
  std::vector<listener> out;
  auto add = [&](caf::expected<listener> x) -> caf::error {
    if (!x)
      return x.error();
    out.push_back(std::move(*x));
    return caf::none;
  };
  // With role ports, the all-roles API is not published at all: CAF 0.17
  // lets a peer address any actor this node has published by its id, so an
  // all-roles endpoint next to the facades would undo their separation.
  if (!cfg.split_ports())
    if (auto err = add(open_listener(
          sys, "api", sys.spawn(make_api_facade, api), cfg.port, "127.0.0.1")))
      return err;
  if (cfg.gateway_port >= 0)
    if (auto err =
          add(open_listener(sys, "gateway", sys.spawn(make_gateway, api),
                            cfg.gateway_port, cfg.bind, cfg.tls())))
      return err;
  if (cfg.worker_port >= 0)
    if (auto err = add(open_listener(sys, "worker", sys.spawn(make_worker, api),
                                     cfg.worker_port, cfg.bind, cfg.tls())))
      return err;
  if (cfg.admin_port >= 0)
    if (auto err =
          add(open_listener(sys, "admin", sys.spawn(make_admin, api),
                            cfg.admin_port, cfg.admin_bind, cfg.tls())))
      return err;
  return out;
}

/// Line 1: the all-roles API port, 0 when role ports replace it (scripts
/// read `head -n1`); then `role=port` lines, and `http=port` if served.
void write_port_file(const std::string& path, const std::vector<listener>& xs,
                     const http::server* web) {
  auto tmp = path + ".tmp";
  {
    std::ofstream out{tmp};
    out << (xs.front().role == "api" ? xs.front().port : 0) << '\n';
    for (const auto& x : xs)
      if (x.role != "api")
        out << x.role << '=' << x.port << '\n';
    if (web != nullptr)
      out << "http=" << web->port() << '\n';
  }
  std::rename(tmp.c_str(), path.c_str()); // readers never see half a file
}

void close_listeners(caf::actor_system& sys, const std::vector<listener>& xs) {
  for (const auto& x : xs) {
    if (x.tls) // caf::openssl::unpublish does not compile in 0.17.6
      caf::scoped_actor {
        sys
        } -> request(sys.openssl_manager().actor_handle(),
                     std::chrono::seconds(5), caf::unpublish_atom_v,
                     x.handle.address(), x.port)
          .receive([] {}, [](caf::error&) {});
    else
      sys.middleman().unpublish(x.handle, x.port);
    // Every published handle is a facade of ours (never the registry).
    caf::anon_send_exit(x.handle, caf::exit_reason::user_shutdown);
  }
}

int serve(caf::actor_system& sys, const server_config& cfg,
          const std::string& dsn, const sigset_t& signals,
          const server_hooks& hooks) {
  auto factory = make_persistence_factory(
    sys, store_options_of(cfg, dsn),
    persistence_limits{cfg.persistence_batch_max, cfg.persistence_queue_max,
                       cfg.store_timeout});
  supervisor_actor root =
    sys.spawn(make_supervisor, factory, supervisor_options_of(cfg));
  auto watch = watch_core(root);
  int rc = 0;
  auto api = core_of(sys, root);
  auto listeners = api ? open_listeners(sys, cfg, *api)
                       : caf::expected<std::vector<listener>>{api.error()};
  // The HTTP adapter (off unless --http-port); stopped before the listeners.
  auto web =
    listeners ? http::server::start(sys, http_options_of(cfg), *api, dsn, root)
              : caf::expected<std::unique_ptr<http::server>>{listeners.error()};
  if (listeners && !web)
    close_listeners(sys, *listeners);
  if (!listeners || !web) {
    spdlog::critical("cannot listen error={}",
                     sys.render(listeners ? web.error() : listeners.error()));
    rc = 1;
  } else {
    spdlog::info("serving connections={} sweep_timeout={} "
                 "max_job_duration={}",
                 cfg.connections, caf::deep_to_string(cfg.sweep_timeout),
                 caf::deep_to_string(cfg.max_job_duration));
    if (cfg.allow_plain_tcp)
      spdlog::warn("plain TCP allowed beyond loopback bind={} admin_bind={}: "
                   "anyone who reaches these ports can bill",
                   cfg.bind, cfg.admin_bind);
    if (!cfg.port_file.empty())
      write_port_file(cfg.port_file, *listeners, web->get());
    if (hooks.serving)
      hooks.serving(sys, caf::actor_cast<caf::actor>(root));
    rc = wait_for_stop(signals, *watch);
    web->reset();
    close_listeners(sys, *listeners);
  }
  disarm(*watch);
  // Linked: the registry, its chats, the event bus and the pool follow.
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  return rc;
}

} // namespace

namespace chargeonce {

int run_server(int argc, char** argv, const server_hooks& hooks) {
  auto signals = block_shutdown_signals();
  // A command like --dump-config rather than an option: taken out before
  // CAF parses the rest, whose quota options fill what it prints.
  std::vector<char*> args(argv, argv + argc);
  auto print = std::find_if(args.begin(), args.end(), [](const char* arg) {
    return std::string_view{arg} == "--print-default-catalog";
  });
  bool print_catalog = print != args.end();
  if (print_catalog)
    args.erase(print);
  server_config cfg;
  if (auto err =
        cfg.parse_with_days(static_cast<int>(args.size()), args.data())) {
    std::cerr << "chargeonce-server: " << caf::actor_system_config::render(err)
              << "\n";
    return 2;
  }
  if (cfg.cli_helptext_printed)
    return 0;
  if (auto problem = cfg.finalize(); !problem.empty()) {
    std::cerr << "chargeonce-server: " << problem << "\n";
    return 2;
  }
  if (print_catalog) {
    std::cout << to_json(cfg.builtin_products()).dump(2) << "\n";
    return 0;
  }
  setup_logging(cfg.log_level);
  std::unique_ptr<embedded_cluster> cluster;
  auto dsn = prepare_database(cfg, cluster);
  if (!dsn)
    return 1;
  int rc = 0;
  {
    caf::actor_system sys{cfg};
    rc = serve(sys, cfg, *dsn, signals, hooks);
  } // waits for every actor, so Postgres outlives its last transaction
  if (cluster)
    cluster->stop();
  spdlog::info("stopped");
  return rc;
}

} // namespace chargeonce
