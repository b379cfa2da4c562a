// SPDX-License-Identifier: Apache-2.0
// chargeonce-http-floor: what the HTTP transport alone costs, the floor
// under chargeonce's HTTP mode. A child process serves the bench's HTTP
// cycle (reserve, start, commit) with httplib as the product's adapter is
// set up (one pool thread per client and one spare, TCP_NODELAY, kept-alive
// connections), and answers every request at once with the product's JSON
// of a reservation or a receipt, rendered per request as the adapter does:
// no actor, no Postgres. The bench's own HTTP driver makes the cycles.
// Reports cycles/s, the cycle's p50 and the CPU per cycle of the serving
// process and of this one, per client count, as chargeonce-bench does.
#include "main/flags/duration.hpp"
#include "protocol/json.hpp"
#include "tools/bench/drivers.hpp"
#include "tools/bench/histogram.hpp"
#include "tools/bench/http.hpp"
#include "tools/bench/options.hpp"
#include "tools/bench/processes.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <httplib.h>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace chargeonce;
using namespace chargeonce::bench;

namespace {

using steady = std::chrono::steady_clock;

struct floor_options {
  std::vector<size_t> clients{1, 16, 64};
  std::chrono::milliseconds duration{5000};
  std::chrono::milliseconds warmup{1000};
  bool json = false;
};

struct floor_run {
  size_t clients = 0;
  double cycles_per_s = 0;
  uint64_t p50_us = 0;
  uint64_t p99_us = 0;
  double server_cpu_us_per_cycle = 0;
  double bench_cpu_us_per_cycle = 0;
};

/// What the adapter answers, in its own shape.
reservation sample_reservation() {
  reservation x;
  x.id = 123456789;
  x.chat = 4242;
  x.kind = kind::image;
  x.queue = "image_generation";
  x.held = pockets{0, 1, 0};
  x.created_at = caf::make_timestamp();
  return x;
}

receipt sample_receipt() {
  receipt x;
  x.reservation = 123456789;
  x.chat = 4242;
  x.kind = kind::image;
  x.charged = pockets{0, 1, 0};
  x.committed_at = caf::make_timestamp();
  return x;
}

/// The serving child: never returns. Writes its port to `port_out`.
[[noreturn]] void serve(size_t threads, int port_out) {
  httplib::Server svr;
  svr.new_task_queue = [threads] {
    return new httplib::ThreadPool(threads);
  };
  svr.set_tcp_nodelay(true);
  svr.set_keep_alive_max_count(100); // the adapter's keep_alive_requests_max
  auto answer = [](const httplib::Request& req, httplib::Response& res) {
    auto ends_with = [&](const char* tail) {
      std::string t{tail};
      return req.path.size() >= t.size()
             && req.path.compare(req.path.size() - t.size(), t.size(), t) == 0;
    };
    auto body = ends_with("/commit") ? to_json(sample_receipt())
                                     : to_json(sample_reservation());
    res.set_content(body.dump(), "application/json");
  };
  svr.Get(".*", answer);
  svr.Post(".*", answer);
  auto port = svr.bind_to_any_port("127.0.0.1");
  if (write(port_out, &port, sizeof port) != sizeof port)
    _exit(1);
  close(port_out);
  svr.listen_after_bind();
  _exit(0);
}

/// Forks the serving child; its pid and port.
std::pair<pid_t, int> start_server(size_t threads) {
  int fds[2];
  if (pipe(fds) != 0)
    throw std::runtime_error("pipe failed");
  auto pid = fork();
  if (pid < 0)
    throw std::runtime_error("fork failed");
  if (pid == 0) {
    close(fds[0]);
    serve(threads, fds[1]);
  }
  close(fds[1]);
  int port = 0;
  auto n = read(fds[0], &port, sizeof port);
  close(fds[0]);
  if (n != sizeof port || port <= 0)
    throw std::runtime_error("the serving process did not bind a port");
  return {pid, port};
}

void stop_server(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

floor_run measure(const floor_options& o, size_t clients) {
  auto [pid, port] = start_server(clients + 1);
  http_target target{"127.0.0.1", port, "gateway", "worker"};
  std::atomic<bool> measuring{false};
  std::atomic<bool> stop{false};
  std::atomic<bool> failed{false};
  std::mutex mtx;
  histogram latencies;
  uint64_t cycles = 0;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < clients; ++i)
    threads.emplace_back([&, i] {
      auto drv = make_http_driver(target);
      auto chat = static_cast<chat_id>(i + 1);
      drv->connect(chat);
      histogram mine;
      uint64_t done = 0;
      while (!stop) {
        auto t0 = steady::now();
        bool counted = measuring;
        auto id = drv->reserve(chat);
        if (!id || drv->start(chat, *id) || drv->commit(chat, *id)) {
          failed = true;
          break;
        }
        if (counted && measuring) {
          ++done;
          mine.record(static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(steady::now()
                                                                  - t0)
              .count()));
        }
      }
      std::lock_guard<std::mutex> guard{mtx};
      latencies.merge(mine);
      cycles += done;
    });
  std::this_thread::sleep_for(o.warmup);
  auto server0 = read_cpu_s(pid);
  auto bench0 = read_cpu_s(0);
  auto t0 = steady::now();
  measuring = true;
  std::this_thread::sleep_for(o.duration);
  measuring = false;
  auto elapsed = std::chrono::duration<double>(steady::now() - t0).count();
  auto server1 = read_cpu_s(pid);
  auto bench1 = read_cpu_s(0);
  stop = true;
  for (auto& t : threads)
    t.join();
  stop_server(pid);
  if (failed)
    throw std::runtime_error("a request to the floor server failed");
  floor_run r;
  r.clients = clients;
  r.cycles_per_s = static_cast<double>(cycles) / elapsed;
  r.p50_us = latencies.percentile(50);
  r.p99_us = latencies.percentile(99);
  auto per_cycle = [&](auto from, auto to) {
    return from && to && cycles > 0
             ? (*to - *from) * 1e6 / static_cast<double>(cycles)
             : 0.0;
  };
  r.server_cpu_us_per_cycle = per_cycle(server0, server1);
  r.bench_cpu_us_per_cycle = per_cycle(bench0, bench1);
  return r;
}

floor_options parse(int argc, char** argv) {
  floor_options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* name) -> std::optional<std::string> {
      std::string prefix = std::string{name} + "=";
      if (arg.rfind(prefix, 0) != 0)
        return std::nullopt;
      return arg.substr(prefix.size());
    };
    if (auto v = value("--clients"))
      o.clients = parse_clients(*v);
    else if (auto d = value("--duration"))
      o.duration = std::chrono::duration_cast<std::chrono::milliseconds>(
        parse_duration("duration", *d, std::chrono::milliseconds{100},
                       std::chrono::hours{1}));
    else if (arg == "--json")
      o.json = true;
    else
      throw std::invalid_argument(
        "unknown argument '" + arg
        + "' (chargeonce-http-floor [--clients=1,16,64] [--duration=5s] "
          "[--json])");
  }
  return o;
}

} // namespace

int main(int argc, char** argv) {
  try {
    auto o = parse(argc, argv);
    nlohmann::json runs = nlohmann::json::array();
    if (!o.json)
      std::cout << "HTTP floor (httplib as the adapter sets it up, answers "
                   "rendered per request, no actor, no Postgres)\n"
                << "clients   cycles/s   p50 µs   p99 µs   server µs/cycle"
                   "   bench µs/cycle\n";
    for (auto n : o.clients) {
      auto r = measure(o, n);
      runs.push_back({{"clients", r.clients},
                      {"cycles_per_s", r.cycles_per_s},
                      {"cycle_p50_us", r.p50_us},
                      {"cycle_p99_us", r.p99_us},
                      {"server_cpu_us_per_cycle", r.server_cpu_us_per_cycle},
                      {"bench_cpu_us_per_cycle", r.bench_cpu_us_per_cycle}});
      if (!o.json) {
        char line[160];
        std::snprintf(line, sizeof line,
                      "%7zu %10.1f %8llu %8llu %17.0f %16.0f", r.clients,
                      r.cycles_per_s, static_cast<unsigned long long>(r.p50_us),
                      static_cast<unsigned long long>(r.p99_us),
                      r.server_cpu_us_per_cycle, r.bench_cpu_us_per_cycle);
        std::cout << line << "\n" << std::flush;
      }
    }
    if (o.json)
      std::cout << nlohmann::json{{"http_floor", runs}}.dump(2) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "chargeonce-http-floor: " << e.what() << "\n";
    return 2;
  }
}
