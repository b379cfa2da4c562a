// SPDX-License-Identifier: Apache-2.0
#include "tools/chaos/process.hpp"

#include <spdlog/spdlog.h>

#include <csignal>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

namespace chargeonce::chaos {

namespace {

constexpr auto port_file_wait = std::chrono::seconds(30);
constexpr auto poll_step = std::chrono::milliseconds(20);

bool reaped(pid_t pid) {
  int status = 0;
  return waitpid(pid, &status, WNOHANG) == pid;
}

/// The parent pid of `pid` from /proc, or 0.
pid_t parent_of(pid_t pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
  std::string text;
  std::getline(in, text);
  auto close = text.rfind(')'); // the name may hold spaces and parentheses
  if (close == std::string::npos)
    return 0;
  std::istringstream rest{text.substr(close + 2)};
  char state = 0;
  pid_t ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

/// A duration option's value, e.g. "1500ms".
std::string ms(int64_t x) {
  return std::to_string(x) + "ms";
}

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    auto name = e.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != name.npos)
      continue;
    auto pid = static_cast<pid_t>(std::stol(name));
    if (parent_of(pid) == parent)
      out.push_back(pid);
  }
  return out;
}

} // namespace

pid_t spawn(const std::vector<std::string>& args, const std::string& log,
            int* out_pipe) {
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int log_fd =
    open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  int fds[2] = {-1, -1};
  if (out_pipe != nullptr && pipe2(fds, O_CLOEXEC) != 0)
    return -1;
  auto parent = getpid();
  auto pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls from here on: other threads may hold locks.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(126);
    int null_fd = open("/dev/null", O_RDONLY);
    dup2(null_fd, STDIN_FILENO);
    dup2(out_pipe != nullptr ? fds[1] : log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(log_fd);
  if (out_pipe != nullptr) {
    close(fds[1]);
    *out_pipe = fds[0];
  }
  return pid;
}

bool kill_and_reap(pid_t pid) {
  bool alive = !reaped(pid);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  return alive;
}

void stop_and_reap(pid_t pid, std::chrono::milliseconds grace) {
  kill(pid, SIGTERM);
  auto until = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < until) {
    if (reaped(pid))
      return;
    std::this_thread::sleep_for(poll_step);
  }
  spdlog::warn("chaos: pid={} ignored SIGTERM, killing it", pid);
  kill_and_reap(pid);
}

// -- servers ------------------------------------------------------------------

server_set::server_set(std::string binary, std::string dsn, std::string dir,
                       server_timings timings, size_t count,
                       std::string catalog, std::vector<std::string> extra)
    : binary_(std::move(binary)), dsn_(std::move(dsn)), dir_(std::move(dir)),
      catalog_(std::move(catalog)), extra_(std::move(extra)), timings_(timings),
      pids_(count, -1), server_ports_(count, 0) {
  for (size_t i = 0; i < count; ++i)
    proxies_.push_back(std::make_unique<proxy>(0));
}

server_set::~server_set() {
  stop_all();
}

std::string server_set::log_of(size_t i) const {
  return dir_ + "/server-" + std::to_string(i) + ".log";
}

std::vector<uint16_t> server_set::ports() const {
  std::vector<uint16_t> out;
  for (const auto& p : proxies_)
    out.push_back(p->port());
  return out;
}

bool server_set::start(size_t i) {
  auto port_file = dir_ + "/server-" + std::to_string(i) + ".port";
  std::filesystem::remove(port_file);
  // The same port again when we had one: fewer moving parts for clients.
  auto args = std::vector<std::string>{
    binary_,
    "--postgres=" + dsn_,
    "--port=" + std::to_string(server_ports_[i]),
    "--port-file=" + port_file,
    "--sweep-interval=" + ms(timings_.sweep_interval_ms),
    "--max-job-duration=" + ms(timings_.max_job_duration_ms),
    "--sweep-timeout=" + ms(timings_.sweep_timeout_ms),
    "--lease-duration=" + ms(timings_.lease_duration_ms),
    "--store-timeout=" + ms(timings_.store_timeout_ms),
    "--statement-timeout=" + ms(timings_.statement_timeout_ms),
    "--reconcile-timeout=" + ms(timings_.reconcile_timeout_ms),
    "--refill-interval=" + ms(timings_.refill_interval_ms),
    // Reactivation needs chats a user has started, which the workload
    // never marks.
    "--reactivation-after=24h",
    "--log-level=warn",
  };
  if (!catalog_.empty())
    args.push_back("--catalog=" + catalog_);
  args.insert(args.end(), extra_.begin(), extra_.end());
  for (int attempt = 0; attempt < 2; ++attempt) {
    pids_[i] = spawn(args, log_of(i));
    auto t0 = std::chrono::steady_clock::now();
    // A liveness bound: a server listens within a second on a quiet
    // machine.
    auto until = t0 + port_file_wait;
    while (std::chrono::steady_clock::now() < until) {
      std::ifstream in{port_file};
      int port = 0;
      if (in >> port && port > 0) {
        server_ports_[i] = static_cast<uint16_t>(port);
        proxies_[i]->retarget(server_ports_[i]);
        spdlog::info("chaos: server {} listens after {} ms", i,
                     std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now() - t0)
                       .count());
        return true;
      }
      if (reaped(pids_[i]))
        break;
      std::this_thread::sleep_for(poll_step);
    }
    kill_and_reap(pids_[i]);
    pids_[i] = -1;
    spdlog::warn("chaos: server {} did not start (attempt {}), see {}", i,
                 attempt + 1, log_of(i));
    args[2] = "--port=0"; // the old port may be taken: take any
  }
  return false;
}

void server_set::kill(size_t i) {
  if (pids_[i] > 0)
    kill_and_reap(pids_[i]);
  pids_[i] = -1;
}

void server_set::stop_all() {
  for (auto& pid : pids_)
    if (pid > 0) {
      stop_and_reap(pid, std::chrono::seconds(10));
      pid = -1;
    }
}

// -- postgres -----------------------------------------------------------------

postgres_control::postgres_control(std::string dir)
    : cluster_(std::move(dir)) {}

std::string postgres_control::start(std::string& error) {
  auto dsn = cluster_.start();
  if (!dsn) {
    error = caf::to_string(dsn.error());
    return {};
  }
  return *dsn;
}

pid_t postgres_control::postmaster() const {
  std::ifstream in{cluster_.dir() + "/data/postmaster.pid"};
  pid_t pid = 0;
  in >> pid;
  return pid > 0 && ::kill(pid, 0) == 0 ? pid : 0;
}

bool postgres_control::stop() {
  auto pid = postmaster();
  if (pid == 0)
    return false;
  ::kill(pid, SIGINT); // "fast" shutdown, as pg_ctl stop -m fast sends
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < until) {
    if (::kill(pid, 0) != 0)
      return true;
    std::this_thread::sleep_for(poll_step);
  }
  return false;
}

void postgres_control::shutdown() {
  cluster_.stop();
  if (postmaster() != 0)
    stop();
}

std::vector<pid_t> postgres_control::freeze() {
  std::vector<pid_t> out;
  auto pid = postmaster();
  if (pid == 0)
    return out;
  // The postmaster first: a stopped postmaster forks no new backends.
  ::kill(pid, SIGSTOP);
  out.push_back(pid);
  for (auto child : children_of(pid))
    if (::kill(child, SIGSTOP) == 0)
      out.push_back(child);
  return out;
}

void postgres_control::thaw(const std::vector<pid_t>& pids) {
  for (auto it = pids.rbegin(); it != pids.rend(); ++it)
    ::kill(*it, SIGCONT);
}

} // namespace chargeonce::chaos
