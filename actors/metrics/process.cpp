// SPDX-License-Identifier: Apache-2.0
#include "actors/metrics/process.hpp"

#include "actors/metrics/rendering.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <sys/resource.h>
#include <unistd.h>
#include <vector>

namespace chargeonce::metrics {

namespace {

/// The fields of /proc/self/stat after the command name (which may hold
/// spaces and parentheses): the first is field 3, the state.
std::vector<std::string> stat_fields() {
  std::ifstream in{"/proc/self/stat"};
  std::string text{std::istreambuf_iterator<char>{in}, {}};
  auto end_of_name = text.rfind(')');
  if (end_of_name == std::string::npos)
    return {};
  std::istringstream rest{text.substr(end_of_name + 1)};
  return {std::istream_iterator<std::string>{rest}, {}};
}

/// The kernel's boot time (btime of /proc/stat), seconds since the epoch.
double boot_time() {
  std::ifstream in{"/proc/stat"};
  std::string key;
  double value = 0;
  while (in >> key) {
    if (key == "btime" && in >> value)
      return value;
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return -1;
}

double open_fds() {
  std::error_code ec;
  double n = 0;
  for (std::filesystem::directory_iterator i{"/proc/self/fd", ec}, end;
       !ec && i != end; i.increment(ec))
    ++n;
  return ec ? -1 : n;
}

// Field numbers of proc(5), counted from 1; stat_fields() starts at 3.
constexpr size_t utime = 14 - 3;
constexpr size_t stime = 15 - 3;
constexpr size_t starttime = 22 - 3;
constexpr size_t vsize = 23 - 3;
constexpr size_t rss = 24 - 3;

/// One family of one sample without labels; nothing when `value` is
/// unknown (negative).
void single(std::string& out, const char* name, const char* type,
            const char* help, double value) {
  if (value < 0)
    return;
  out.append("# HELP ").append(name).append(" ").append(help).append("\n");
  out.append("# TYPE ").append(name).append(" ").append(type).append("\n");
  out.append(name).append(" ").append(detail::format_value(value)).append("\n");
}

} // namespace

process_sample read_process() {
  process_sample x;
  auto f = stat_fields();
  auto ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  auto page = static_cast<double>(sysconf(_SC_PAGESIZE));
  if (f.size() > rss && ticks > 0) {
    x.cpu_seconds = (std::stod(f[utime]) + std::stod(f[stime])) / ticks;
    x.virtual_bytes = std::stod(f[vsize]);
    x.resident_bytes = std::stod(f[rss]) * page;
    if (auto boot = boot_time(); boot >= 0)
      x.start_time_seconds = boot + std::stod(f[starttime]) / ticks;
  }
  x.open_fds = open_fds();
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    x.max_fds = static_cast<double>(limit.rlim_cur);
  return x;
}

void render_process(std::string& out, const process_sample& x) {
  // The names, types and help texts of the official client libraries.
  single(out, "process_cpu_seconds_total", "counter",
         "Total user and system CPU time spent in seconds.", x.cpu_seconds);
  single(out, "process_virtual_memory_bytes", "gauge",
         "Virtual memory size in bytes.", x.virtual_bytes);
  single(out, "process_resident_memory_bytes", "gauge",
         "Resident memory size in bytes.", x.resident_bytes);
  single(out, "process_start_time_seconds", "gauge",
         "Start time of the process since unix epoch in seconds.",
         x.start_time_seconds);
  single(out, "process_open_fds", "gauge", "Number of open file descriptors.",
         x.open_fds);
  single(out, "process_max_fds", "gauge",
         "Maximum number of open file descriptors.", x.max_fds);
}

} // namespace chargeonce::metrics
