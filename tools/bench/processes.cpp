// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/processes.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace chargeonce::bench {

namespace {

/// The first line of a child's stats; a new format gets a new tag.
constexpr const char* stats_tag = "stats3";
constexpr const char* ready_line = "ready";

/// One child process and the pipes to its stdin and from its stdout.
struct child_process {
  pid_t pid = -1;
  FILE* to = nullptr;   ///< the child's stdin: the window
  FILE* from = nullptr; ///< the child's stdout: ready, then its stats
};

/// fork + exec of this very binary, so that the child starts without the
/// parent's threads and actor system.
child_process spawn(std::vector<std::string> args) {
  int in[2];
  int out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0)
    throw std::runtime_error("pipe2 failed");
  args.insert(args.begin(), "chargeonce-bench");
  auto argv = argv_of(args); // before fork: only exec-safe calls after it
  auto pid = fork();
  if (pid < 0)
    throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    execv("/proc/self/exe", argv.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  return {pid, fdopen(in[1], "w"), fdopen(out[0], "r")};
}

std::string read_line(FILE* f) {
  std::string out;
  for (int c = std::fgetc(f); c != EOF && c != '\n'; c = std::fgetc(f))
    out.push_back(static_cast<char>(c));
  return out;
}

std::string read_all(FILE* f) {
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;)
    out.append(buf, n);
  return out;
}

/// Waits for the child; true if it exited with status 0.
bool reap(child_process& c) {
  if (c.to)
    std::fclose(c.to);
  if (c.from)
    std::fclose(c.from);
  c.to = c.from = nullptr;
  int status = 0;
  if (waitpid(c.pid, &status, 0) != c.pid)
    return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

void kill_all(std::vector<child_process>& children) {
  for (auto& c : children) {
    kill(c.pid, SIGTERM);
    reap(c);
  }
}

int64_t ns_of(clock_type::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           t.time_since_epoch())
    .count();
}

/// The window as the child reads it: steady_clock is CLOCK_MONOTONIC,
/// one clock for every process of the machine.
clock_type::time_point time_of(int64_t ns) {
  return clock_type::time_point{
    std::chrono::duration_cast<clock_type::duration>(
      std::chrono::nanoseconds{ns})};
}

/// Child i's share of the run: its clients, and its chats — all of them
/// in random order, a slice of its own in sequential order (so that every
/// chat is still taken once).
std::vector<std::string> args_of(const bench_options& o,
                                 const std::string& mode, size_t clients,
                                 const chat_range& chats, size_t n, size_t i) {
  auto share = clients / n + (i < clients % n ? 1 : 0);
  if (o.order == chat_order::random)
    return child_args(o, mode, chats.first, chats.count, share);
  auto per = chats.count / static_cast<int64_t>(n);
  auto first = chats.first + per * static_cast<int64_t>(i);
  auto count = i + 1 == n ? chats.count - per * static_cast<int64_t>(i) : per;
  return child_args(o, mode, first, count, share);
}

} // namespace

std::vector<char*> argv_of(std::vector<std::string>& args) {
  std::vector<char*> out;
  out.reserve(args.size() + 1);
  for (auto& x : args)
    out.push_back(x.data());
  out.push_back(nullptr);
  return out;
}

run_result run_processes(const std::string& mode, size_t clients,
                         const bench_options& o, const chat_range& chats,
                         const window_maker& make_window) {
  auto n = std::min(o.processes, clients);
  // A child that died must fail the run, not kill us on our next write.
  std::signal(SIGPIPE, SIG_IGN);
  std::vector<child_process> children;
  try {
    for (size_t i = 0; i < n; ++i)
      children.push_back(spawn(args_of(o, mode, clients, chats, n, i)));
    for (auto& c : children)
      if (read_line(c.from) != ready_line)
        throw std::runtime_error("a client process exited before it was "
                                 "ready (see its log above)");
  } catch (...) {
    kill_all(children);
    throw;
  }
  auto window = make_window();
  for (auto& c : children) {
    std::fprintf(c.to, "%lld %lld\n",
                 static_cast<long long>(ns_of(window.from)),
                 static_cast<long long>(ns_of(window.until)));
    std::fflush(c.to);
  }
  // Each child holds its own window open for its clients' --min-cycles:
  // the run spans the longest.
  run_result out{mode, clients, n, 0.0, {}, {}, {}, {}, {}, {}, {}};
  bool failed = false;
  for (auto& c : children) {
    auto report = deserialize_report(read_all(c.from));
    failed |= !reap(c) || !report;
    if (!report)
      continue;
    out.stats.merge(report->stats);
    out.duration_s = std::max(out.duration_s, report->duration_s);
  }
  if (failed)
    throw std::runtime_error("a client process failed (see its log above)");
  return out;
}

int child_main(const bench_options& o) {
  chat_range chats{o.role.first, o.chats};
  auto gate = [] {
    std::printf("%s\n", ready_line);
    std::fflush(stdout);
    long long from = 0;
    long long until = 0;
    if (std::scanf("%lld %lld", &from, &until) != 2)
      throw std::runtime_error("no window from the parent process");
    return time_window{time_of(from), time_of(until)};
  };
  run_result r;
  if (o.role.mode == "remote") {
    remote_session session{o.servers};
    r = run_clients(
      "remote", o.clients.front(), o, chats,
      [&] { return make_remote_driver(session.api()); }, gate);
  } else {
    r = run_clients(
      "baseline", o.clients.front(), o, chats,
      [&] { return make_baseline_driver(o.postgres); }, gate);
  }
  std::fputs(serialize(child_report{r.stats, r.duration_s}).c_str(), stdout);
  std::fflush(stdout);
  return exit_ok;
}

std::string serialize(const child_report& report) {
  const auto& stats = report.stats;
  std::ostringstream out;
  out.precision(17); // the duration read back exactly
  out << stats_tag << '\n'
      << stats.cycles << ' ' << stats.commits << ' ' << stats.unexpected << ' '
      << stats.touched << ' ' << stats.acknowledged << ' ' << report.duration_s
      << '\n';
  for (size_t i = 0; i < op_count; ++i) {
    out << stats.latency[i].serialize() << '\n';
    out << stats.outcomes[i].size();
    for (const auto& [name, n] : stats.outcomes[i])
      out << ' ' << name << ' ' << n; // error names have no spaces
    out << '\n';
  }
  return out.str();
}

std::optional<child_report> deserialize_report(const std::string& text) {
  std::istringstream in{text};
  child_report report;
  auto& out = report.stats;
  std::string line;
  if (!std::getline(in, line) || line != stats_tag
      || !(in >> out.cycles >> out.commits >> out.unexpected >> out.touched
           >> out.acknowledged >> report.duration_s))
    return std::nullopt;
  std::getline(in, line); // the rest of the counts' line
  for (size_t i = 0; i < op_count; ++i) {
    if (!std::getline(in, line))
      return std::nullopt;
    auto h = histogram::deserialize(line);
    size_t names = 0;
    if (!h || !(in >> names))
      return std::nullopt;
    out.latency[i] = std::move(*h);
    for (size_t k = 0; k < names; ++k) {
      std::string name;
      uint64_t n = 0;
      if (!(in >> name >> n))
        return std::nullopt;
      out.outcomes[i][name] = n;
    }
    std::getline(in, line);
  }
  return report;
}

std::optional<memory_figures> read_memory(int64_t pid, std::string process) {
  auto path = pid == 0 ? std::string{"/proc/self/status"}
                       : "/proc/" + std::to_string(pid) + "/status";
  std::ifstream in{path};
  memory_figures out{std::move(process), -1, -1};
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields{line};
    std::string key;
    int64_t kib = 0;
    if (!(fields >> key >> kib))
      continue;
    if (key == "VmHWM:")
      out.peak_rss_kib = kib;
    else if (key == "VmRSS:")
      out.rss_kib = kib;
  }
  if (out.peak_rss_kib < 0 || out.rss_kib < 0)
    return std::nullopt;
  return out;
}

std::optional<process_cpu_ticks> read_cpu_ticks(int64_t pid) {
  auto path = pid == 0 ? std::string{"/proc/self/stat"}
                       : "/proc/" + std::to_string(pid) + "/stat";
  std::string stat;
  std::getline(std::ifstream{path}, stat);
  // Fields after the parenthesised name: state is field 3, ppid 4, utime
  // 14, stime 15, cutime 16, cstime 17 (proc(5)); the name itself may hold
  // spaces.
  auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size())
    return std::nullopt;
  std::istringstream rest{stat.substr(close + 2)};
  std::string field;
  process_cpu_ticks out;
  int i = 3;
  for (; i <= 17 && rest >> field; ++i) {
    if (i == 4)
      out.parent = std::stoll(field);
    else if (i == 14 || i == 15)
      out.own += std::stoll(field);
    else if (i == 16 || i == 17)
      out.ended_children += std::stoll(field);
  }
  if (i <= 17)
    return std::nullopt;
  return out;
}

double seconds_of_ticks(int64_t ticks) {
  return static_cast<double>(ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

std::optional<double> read_cpu_s(int64_t pid) {
  auto ticks = read_cpu_ticks(pid);
  if (!ticks)
    return std::nullopt;
  return seconds_of_ticks(ticks->own);
}

bool reset_peak_rss() {
  std::ofstream out{"/proc/self/clear_refs"};
  out << "5"; // 5: reset the peak RSS (Linux 4.0+)
  out.flush();
  return static_cast<bool>(out);
}

} // namespace chargeonce::bench
