// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/postgres_cpu.hpp"

#include "tools/bench/processes.hpp"

#include <pqxx/pqxx>

#include <cctype>
#include <dirent.h>
#include <fstream>
#include <memory>

namespace chargeonce::bench {

namespace {

bool is_postgres_process(int64_t pid) {
  if (pid <= 0)
    return false;
  std::string comm;
  std::getline(std::ifstream{"/proc/" + std::to_string(pid) + "/comm"}, comm);
  return comm == "postgres";
}

/// libpq's host of a connection: a Unix socket's directory (or abstract
/// socket, '@...'), a name or an address. Empty: libpq's default socket.
bool is_local_host(const std::string& host) {
  return host.empty() || host.front() == '/' || host.front() == '@'
         || host == "localhost" || host == "127.0.0.1" || host == "::1";
}

/// The pids /proc lists: every process of this machine we may see.
template <class F>
void for_each_pid(F f) {
  std::unique_ptr<DIR, int (*)(DIR*)> proc{opendir("/proc"), closedir};
  if (!proc)
    return;
  while (auto* entry = readdir(proc.get()))
    if (std::isdigit(static_cast<unsigned char>(entry->d_name[0])))
      f(std::stoll(entry->d_name));
}

} // namespace

std::optional<double> postgres_process_cpu_s(int64_t pid) {
  if (!is_postgres_process(pid))
    return std::nullopt;
  return read_cpu_s(pid);
}

std::optional<int64_t> local_postmaster(const std::string& dsn) {
  pqxx::connection conn{dsn};
  const char* host = conn.hostname();
  if (!is_local_host(host != nullptr ? host : ""))
    return std::nullopt;
  // A backend's pid means the same process here only if /proc shows a
  // Postgres process under it whose parent is one too (a container's
  // Postgres behind a published port would not).
  auto backend = conn.backendpid();
  auto ticks = read_cpu_ticks(backend);
  if (!is_postgres_process(backend) || !ticks
      || !is_postgres_process(ticks->parent))
    return std::nullopt;
  return ticks->parent;
}

std::optional<double> postgres_cluster_cpu_s(int64_t postmaster) {
  auto root = read_cpu_ticks(postmaster);
  if (!is_postgres_process(postmaster) || !root)
    return std::nullopt;
  // A child that ends between the reading of /proc and that of the
  // postmaster may count twice or not at all: one process's CPU, once.
  int64_t ticks = root->own + root->ended_children;
  for_each_pid([&](int64_t pid) {
    if (pid == postmaster)
      return;
    if (auto child = read_cpu_ticks(pid); child && child->parent == postmaster)
      ticks += child->own;
  });
  return seconds_of_ticks(ticks);
}

} // namespace chargeonce::bench
