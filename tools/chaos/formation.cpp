// SPDX-License-Identifier: Apache-2.0
#include "tools/chaos/formation.hpp"

#include <spdlog/spdlog.h>

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sys/wait.h>

namespace chargeonce::chaos {

namespace {

/// `text` in single quotes for /bin/sh.
std::string sh_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text)
    out += c == '\'' ? std::string{"'\\''"} : std::string(1, c);
  return out + "'";
}

} // namespace

ha_formation::ha_formation(std::string script, std::string dir, int port_base)
    : script_(std::move(script)), dir_(std::move(dir)), port_base_(port_base) {}

ha_formation::~ha_formation() {
  stop();
}

int ha_formation::port_base_for(uint64_t seed) {
  int lo = 32768;
  int hi = 60999;
  std::ifstream{"/proc/sys/net/ipv4/ip_local_port_range"} >> lo >> hi;
  if (hi <= 64000) {
    auto slots = static_cast<uint64_t>((65533 - hi) / 3 - 1);
    return hi + 1 + static_cast<int>(seed % slots) * 3;
  }
  return 20430 + static_cast<int>(seed % 500) * 3;
}

std::string ha_formation::run(const std::string& command, std::string& error) {
  auto log = log_path();
  std::error_code size_error;
  auto logged = std::filesystem::file_size(log, size_error);
  if (size_error)
    logged = 0;
  auto line = "HA_DIR=" + sh_quoted(dir_)
              + " HA_PORT_BASE=" + std::to_string(port_base_) + " "
              + sh_quoted(script_) + " " + command + " 2>>" + sh_quoted(log);
  auto* pipe = popen(line.c_str(), "r");
  if (pipe == nullptr) {
    error = std::string{"cannot run "} + script_;
    return {};
  }
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, pipe)) > 0;)
    out.append(buf, n);
  auto status = pclose(pipe);
  std::ifstream in{log};
  in.seekg(static_cast<std::streamoff>(logged));
  stderr_.assign(std::istreambuf_iterator<char>{in}, {});
  while (!out.empty() && out.back() == '\n')
    out.pop_back();
  auto last =
    out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
  if (status != 0) {
    error = "ha-cluster " + command + " failed (status "
            + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1)
            + "; see " + dir_ + ".log)";
    return {};
  }
  return last;
}

std::string ha_formation::start(std::string& error) {
  // Whatever start left running is stopped at the end, even if it failed.
  started_ = true;
  auto dsn = run("start", error);
  if (dsn.empty() && error.empty())
    error = "ha-cluster start printed no connection string";
  if (!dsn.empty())
    spdlog::info("chaos: formation up {}", dsn);
  return error.empty() ? dsn : std::string{};
}

std::string ha_formation::failover(bool whole_node, int64_t stall_ms,
                                   int64_t& no_primary_ms, std::string& error) {
  std::string command = whole_node ? "failover --whole-node" : "failover";
  if (stall_ms > 0) {
    auto millis = std::to_string(1000 + stall_ms % 1000).substr(1);
    command +=
      " --stall-replication=" + std::to_string(stall_ms / 1000) + "." + millis;
  }
  auto primary = run(command, error);
  if (primary.rfind("primary=", 0) != 0 && error.empty())
    error = "ha-cluster failover printed '" + primary + "'";
  // "ha-cluster: node_b (port …) promoted 6012 ms after the kill; …"
  no_primary_ms = -1;
  auto at = stderr_.find(" promoted ");
  if (at != std::string::npos) {
    const auto* first = stderr_.data() + at + 10;
    std::from_chars(first, stderr_.data() + stderr_.size(), no_primary_ms);
  }
  return error.empty() ? primary : std::string{};
}

bool ha_formation::wait_ready(std::string& error) {
  auto dsn = run("start", error);
  if (dsn.empty() && error.empty())
    error = "ha-cluster start printed no connection string";
  return error.empty();
}

void ha_formation::stop() {
  if (!started_)
    return;
  started_ = false;
  std::string error;
  run("stop", error);
  if (!error.empty())
    spdlog::warn("chaos: {}", error);
}

} // namespace chargeonce::chaos
