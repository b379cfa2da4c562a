// SPDX-License-Identifier: Apache-2.0
#include "tools/chaos/faults.hpp"

#include "protocol/errors.hpp"
#include "tools/chaos/worker_process.hpp"
#include "tools/common/audit.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace chargeonce::chaos {

namespace {

using std::chrono::steady_clock;

int64_t ms_since(steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
           steady_clock::now() - t0)
    .count();
}

/// The walsenders `ha-cluster failover --stall-replication` names in its
/// log ("… (SIGSTOP of its walsender 123 456)") after byte `from`; empty
/// until it has written that line.
std::vector<pid_t> stalled_walsenders(const std::string& log,
                                      std::streamoff from) {
  static const std::string mark = "(SIGSTOP of its walsender ";
  std::ifstream in{log};
  in.seekg(from);
  std::vector<pid_t> out;
  for (std::string line; std::getline(in, line);) {
    auto at = line.find(mark);
    auto end = line.find(')', at == std::string::npos ? 0 : at);
    if (at == std::string::npos || end == std::string::npos)
      continue;
    std::istringstream pids{
      line.substr(at + mark.size(), end - at - mark.size())};
    for (pid_t pid = 0; pids >> pid;)
      out.push_back(pid);
    break;
  }
  return out;
}

/// True while every one of `pids` is stopped (state T): a SIGSTOPped
/// walsender ships nothing, and the script kills it without resuming it.
bool all_stopped(const std::vector<pid_t>& pids) {
  for (auto pid : pids) {
    std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
    std::string text;
    std::getline(in, text);
    auto close = text.rfind(')'); // the name may hold spaces
    if (close == std::string::npos || close + 2 >= text.size()
        || text[close + 2] != 'T')
      return false;
  }
  return !pids.empty();
}

bool unknown_outcome(const op_record& r) {
  return r.result == static_cast<uint8_t>(outcome::transport)
         || r.result == static_cast<uint8_t>(ec::storage_unavailable);
}

} // namespace

fault_injector::fault_injector(recorder& rec, server_set& servers,
                               postgres_control* pg, ha_formation* ha,
                               fault_options opts)
    : rec_(rec), servers_(servers), pg_(pg), ha_(ha), opts_(std::move(opts)),
      rng_(opts_.seed ^ 0x5eedfa17u) {}

int64_t fault_injector::uniform(int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>{lo, hi}(rng_);
}

void fault_injector::sleep_ms(int64_t ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

bool fault_injector::run(std::chrono::steady_clock::time_point deadline) {
  if (opts_.enabled.empty()) {
    std::this_thread::sleep_until(deadline);
    return true;
  }
  auto first_round = opts_.enabled;
  std::shuffle(first_round.begin(), first_round.end(), rng_);
  auto enabled_last = static_cast<int64_t>(opts_.enabled.size()) - 1;
  auto t0 = steady_clock::now();
  for (size_t n = 0;; ++n) {
    auto gap =
      std::chrono::milliseconds(uniform(opts_.gap_min_ms, opts_.gap_max_ms));
    // The first round is what a run is checked for (every enabled fault at
    // least once): a slow machine lengthens it rather than cutting it short.
    if (n >= first_round.size() && steady_clock::now() + gap >= deadline)
      break;
    std::this_thread::sleep_for(gap);
    auto f = n < first_round.size() ? first_round[n]
                                    : opts_.enabled[uniform(0, enabled_last)];
    current_ = fault_record{f, now_us(), 0, {}};
    if (!inject(f))
      return false;
    if (current_.end_us == 0)
      current_.end_us = now_us();
    spdlog::info("chaos: fault={} {}", to_string(f), current_.detail);
    rec_.add(current_);
    if (n + 1 == first_round.size())
      spdlog::info("chaos: every enabled fault came once in {} ms",
                   ms_since(t0));
  }
  std::this_thread::sleep_until(deadline);
  return true;
}

bool fault_injector::inject(fault f) {
  switch (f) {
  case fault::kill_server:
    return kill_server();
  case fault::terminate_backend:
    return terminate_backend();
  case fault::restart_postgres:
    return restart_postgres();
  case fault::pause_postgres:
    return pause_postgres();
  case fault::drop_connection:
    return drop_connection();
  case fault::failover:
    return failover(false);
  case fault::failover_node:
    return failover(true);
  case fault::kill_worker:
    return kill_worker();
  }
  return false;
}

bool fault_injector::kill_server() {
  auto last = static_cast<int64_t>(servers_.size()) - 1;
  auto i = static_cast<size_t>(uniform(0, last));
  servers_.kill(i);
  auto down = uniform(300, 2000);
  sleep_ms(down);
  current_.detail =
    "server=" + std::to_string(i) + " down_ms=" + std::to_string(down);
  if (!servers_.start(i)) {
    error_ = "server " + std::to_string(i) + " did not restart; see "
             + servers_.log_of(i);
    return false;
  }
  return true;
}

bool fault_injector::terminate_backend() {
  auto n = persistence::terminate_backends(opts_.dsn, opts_.app_name);
  if (!n) {
    // Not the system under test failing: our own connection did.
    current_.detail = "error=" + error_message(n.error());
    return true;
  }
  current_.detail = "backends=" + std::to_string(*n);
  return true;
}

bool fault_injector::restart_postgres() {
  if (!pg_->stop()) {
    error_ = "Postgres did not stop; see " + pg_->dir() + "/postgres.log";
    return false;
  }
  outage o{now_us(), 0};
  auto down = uniform(500, 2500);
  auto until = steady_clock::now() + std::chrono::milliseconds(down);
  auto probed = probe_outage();
  std::this_thread::sleep_until(until);
  o.to_us = now_us();
  rec_.add(o);
  std::string err;
  if (pg_->start(err).empty()) {
    error_ = "Postgres did not restart: " + err;
    return false;
  }
  current_.detail =
    "down_ms=" + std::to_string((o.to_us - o.from_us) / 1000) + probed;
  return true;
}

bool fault_injector::pause_postgres() {
  auto pids = pg_->freeze();
  if (pids.empty()) {
    error_ = "no postmaster to pause in " + pg_->dir();
    return false;
  }
  outage o{now_us(), 0};
  auto paused = uniform(1500, 4000);
  auto until = steady_clock::now() + std::chrono::milliseconds(paused);
  // Answered by the servers' store-timeout: the pause lasts until then.
  auto probed = probe_outage();
  std::this_thread::sleep_until(until);
  o.to_us = now_us();
  pg_->thaw(pids);
  rec_.add(o);
  current_.detail = "processes=" + std::to_string(pids.size()) + " paused_ms="
                    + std::to_string((o.to_us - o.from_us) / 1000) + probed;
  return true;
}

std::string fault_injector::probe_outage() {
  if (!opts_.probe)
    return {};
  auto t0 = steady_clock::now();
  // Always answered, at worst by the client's timeout: the outage lasts at
  // least until then, so the answer falls inside it.
  auto r = opts_.probe();
  return " probe=" + outcome_name(r.result)
         + " probe_ms=" + std::to_string(ms_since(t0));
}

bool fault_injector::drop_connection() {
  size_t n = 0;
  for (size_t i = 0; i < servers_.size(); ++i)
    n += servers_.proxy_of(i).drop_all();
  current_.detail = "connections=" + std::to_string(n);
  return true;
}

bool fault_injector::kill_worker() {
  worker_process_args a;
  std::string list;
  for (auto port : servers_.ports())
    list += (list.empty() ? "" : ",") + std::string{"127.0.0.1:"}
            + std::to_string(port);
  a.servers = list;
  a.chat = opts_.first_process_chat + 1
           + static_cast<chat_id>(workers_spawned_ % opts_.process_chats);
  a.seed = opts_.seed;
  a.key = ++workers_spawned_;
  a.kind = opts_.process_kind;
  int fd = -1;
  auto pid = spawn(worker_process_command(opts_.self_exe, a),
                   opts_.dir + "/worker-processes.log", &fd);
  if (pid <= 0) {
    error_ = "cannot fork a worker process";
    return false;
  }
  // Mid-job: usually after it reserved and started, sometimes before.
  auto alive = uniform(300, 3000);
  sleep_ms(alive);
  kill_and_reap(pid);
  auto actor = static_cast<uint32_t>(1000 + a.key);
  auto jobs = collect_worker_output(fd, actor, kind{a.kind}, rec_);
  for (auto id : jobs)
    rec_.add_process_release(id);
  current_.detail = "chat=" + std::to_string(a.chat) + " pid="
                    + std::to_string(pid) + " alive_ms=" + std::to_string(alive)
                    + " jobs=" + std::to_string(jobs.size());
  return true;
}

/// The primary's Postgres killed (-9) and kept down, or its whole node
/// (pg_autoctl too) killed, until the monitor has promoted its synchronous
/// standby; the script then lets the old primary rejoin as the new standby.
/// Operations in flight meanwhile answer storage_unavailable and are
/// retried with the same ids. The fault ends with the promotion; the
/// rejoin (a rewind, in the background of a working primary) is waited
/// for after it, so that the next fault, the audit or the final stop never
/// meets a node halfway through it (pg_autoctl stop waits for a rewind or
/// base backup, up to the script's 30 s).
bool fault_injector::failover(bool whole_node) {
  std::atomic<bool> done{false};
  // Requests until one meets the failover (storage_unavailable or no
  // answer): the seconds without a primary are sure to hold one.
  std::string felt = " felt=no";
  std::thread prober;
  if (opts_.probe)
    prober = std::thread{[&] {
      auto t0 = steady_clock::now();
      while (!done) {
        if (unknown_outcome(opts_.probe())) {
          felt = " felt_ms=" + std::to_string(ms_since(t0));
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }};
  // The self-test's loss, made certain: a commit acknowledged while the
  // script holds the walsenders stopped never reaches the standby.
  const bool stalled = opts_.stall_replication_ms > 0 && opts_.commit_while;
  bool lost = false;
  std::string lost_detail;
  std::thread stall_watch;
  if (stalled) {
    std::error_code ignored;
    auto from = std::filesystem::file_size(ha_->log_path(), ignored);
    if (ignored)
      from = 0;
    stall_watch = std::thread{[&, from] {
      std::vector<pid_t> pids;
      while (!done && !all_stopped(pids)) {
        if (pids.empty())
          pids = stalled_walsenders(ha_->log_path(),
                                    static_cast<std::streamoff>(from));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (done)
        return;
      auto t0 = steady_clock::now();
      lost = opts_.commit_while([&] { return all_stopped(pids); });
      lost_detail =
        lost ? " lost_commit_ms=" + std::to_string(ms_since(t0)) : "";
    }};
  }
  std::string error;
  auto primary = ha_->failover(whole_node, opts_.stall_replication_ms,
                               current_.no_primary_ms, error);
  done = true;
  if (prober.joinable())
    prober.join();
  if (stall_watch.joinable())
    stall_watch.join();
  if (primary.empty()) {
    error_ = error;
    return false;
  }
  if (stalled && !lost) {
    error_ = "nothing to forge: no commit was acknowledged while "
             "replication was stalled";
    return false;
  }
  current_.end_us = now_us();
  if (!ha_->wait_ready(error)) {
    error_ = "the old primary did not rejoin: " + error;
    return false;
  }
  current_.detail = primary;
  if (opts_.stall_replication_ms > 0)
    current_.detail +=
      " stalled_ms=" + std::to_string(opts_.stall_replication_ms);
  current_.detail +=
    " no_primary_ms=" + std::to_string(current_.no_primary_ms) + " rejoin_ms="
    + std::to_string((now_us() - current_.end_us) / 1000) + felt + lost_detail;
  return true;
}

} // namespace chargeonce::chaos
