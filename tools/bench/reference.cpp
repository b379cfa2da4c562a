// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/reference.hpp"

#include "tools/bench/processes.hpp"
#include "tools/bench/reference_log.hpp"

#include <pqxx/pqxx>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace chargeonce::bench {

namespace {

namespace fs = std::filesystem;

/// The reference kit's defaults (its run.sh): chats holding an open
/// reservation besides the measured ones, so that reservations is never
/// empty; cycles per batch_set transaction; pgbench threads (-j) at most,
/// on a machine of two cores.
constexpr int64_t parked_chats = 10000;
constexpr size_t batch_cycles = 100;
constexpr size_t pgbench_threads_max = 2;
/// Lines of a failed tool's output worth printing.
constexpr size_t tail_lines = 10;

/// Our environment with `extra` (NAME=value) in place of any same name.
std::vector<std::string> environment_with(const std::string& extra) {
  auto name = extra.substr(0, extra.find('=') + 1);
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::string{*e}.rfind(name, 0) != 0)
      out.emplace_back(*e);
  out.push_back(extra);
  return out;
}

std::string tail_of(const std::string& path) {
  std::ifstream in{path};
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  std::string out;
  auto from = lines.size() > tail_lines ? lines.size() - tail_lines : 0;
  for (auto i = from; i < lines.size(); ++i)
    out += lines[i] + "\n";
  return out;
}

/// Runs `sql` on its own connection outside a transaction (CREATE and DROP
/// DATABASE refuse to run inside one).
pqxx::result exec_alone(const std::string& dsn, const std::string& sql) {
  pqxx::connection conn{dsn};
  pqxx::nontransaction tx{conn};
  return tx.exec(sql);
}

std::string make_work_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
    std::string{tmp && *tmp ? tmp : "/tmp"} + "/chargeonce-reference.XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error("cannot create a directory for the reference");
  return pattern;
}

bool batch_set_fits(int64_t chats, size_t clients) {
  return chats % static_cast<int64_t>(batch_cycles) == 0
         && static_cast<int64_t>(clients)
              <= chats / static_cast<int64_t>(batch_cycles);
}

} // namespace

reference_bench::reference_bench(const bench_options& o, reference_options r)
    : o_(o), r_(std::move(r)) {
  if (access(r_.pgbench.c_str(), X_OK) != 0)
    throw std::runtime_error(
      "--reference needs pgbench, not found at " + r_.pgbench
      + " (Debian: apt-get install postgresql-15, or give --pgbench=PATH)");
  dir_ = make_work_dir();
  for (const auto& f : reference_files())
    std::ofstream{dir_ + "/" + f.name} << f.text;
  // The process id keeps two benches on one cluster apart.
  db_ = "chargeonce_reference_" + std::to_string(getpid());
  dsn_ = o_.postgres + " dbname=" + db_;
  exec_alone(o_.postgres, "DROP DATABASE IF EXISTS " + db_ + " WITH (FORCE)");
  exec_alone(o_.postgres, "CREATE DATABASE " + db_);
  if (tool("psql", {"-f", dir_ + "/schema.sql"}, dir_ + "/schema.log") != 0)
    throw std::runtime_error("the reference's schema.sql failed:\n"
                             + tail_of(dir_ + "/schema.log"));
}

reference_bench::~reference_bench() {
  try {
    exec_alone(o_.postgres, "DROP DATABASE IF EXISTS " + db_ + " WITH (FORCE)");
  } catch (const std::exception& e) {
    spdlog::error("cannot drop the reference's database {}: {}", db_, e.what());
  }
  std::error_code ignored;
  fs::remove_all(dir_, ignored);
}

/// pgbench, or psql next to it, against the reference's database; output
/// to `log`. Returns the exit status (127: it did not start).
int reference_bench::tool(const std::string& program,
                          std::vector<std::string> args,
                          const std::string& log) {
  auto path = fs::path{r_.pgbench}.parent_path() / program;
  args.insert(args.begin(), path.string());
  if (program == "psql")
    args.insert(args.begin() + 1, {"-X", "-q", "-v", "ON_ERROR_STOP=1"});
  args.push_back(dsn_); // pgbench and psql take a connection string there
  // The kit's connection setting: one generic plan per statement, no
  // per-connection warm-up of custom plans.
  auto env =
    environment_with("PGOPTIONS=-c plan_cache_mode=force_generic_plan");
  auto argv = argv_of(args); // before fork: only exec-safe calls after it
  auto envp = argv_of(env);
  auto pid = fork();
  if (pid < 0)
    throw std::runtime_error("fork failed");
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid)
    return 127;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// The kit's fresh start before every run: truncate, insert, VACUUM
/// ANALYZE, CHECKPOINT.
void reference_bench::seed() {
  auto log = dir_ + "/seed.log";
  if (tool("psql",
           {"-v", "nchats=" + std::to_string(o_.chats), "-v",
            "parked=" + std::to_string(parked_chats), "-f", dir_ + "/seed.sql"},
           log)
      != 0)
    throw std::runtime_error("the reference's seed.sql failed:\n"
                             + tail_of(log));
}

std::optional<reference_run> reference_bench::run(const std::string& variant,
                                                  size_t clients) {
  if (variant == "batch_set" && !batch_set_fits(o_.chats, clients)) {
    // On stderr with the progress lines: the logger shows errors only.
    std::fprintf(stderr,
                 "chargeonce-bench: reference batch_set skipped at "
                 "clients=%zu: it needs --chats divisible by %zu and %zu "
                 "chats per client\n",
                 clients, batch_cycles, batch_cycles);
    return std::nullopt;
  }
  seed();
  auto tag = variant + "_c" + std::to_string(clients);
  auto prefix = dir_ + "/log_" + tag;
  auto threads = std::min(clients, pgbench_threads_max);
  auto seconds = o_.warmup_s + o_.duration_s;
  reference_run out;
  out.variant = variant;
  out.clients = clients;
  out.duration_s = static_cast<double>(o_.duration_s);
  out.pgbench_status =
    tool("pgbench",
         {"-n", "-M", "prepared", "-c", std::to_string(clients), "-j",
          std::to_string(threads), "-T", std::to_string(seconds), "-l",
          "--log-prefix=" + prefix, "-D", "nchats=" + std::to_string(o_.chats),
          "-D", "batch=" + std::to_string(batch_cycles), "-D",
          "nclients=" + std::to_string(clients), "-f",
          dir_ + "/cycle_" + variant + ".sql"},
         dir_ + "/pgbench_" + tag + ".txt");
  if (out.pgbench_status != 0)
    spdlog::error("reference {} pgbench exited with {}:\n{}", tag,
                  out.pgbench_status,
                  tail_of(dir_ + "/pgbench_" + tag + ".txt"));
  // One log file per pgbench thread: <prefix>.<pid>[.<thread>].
  std::vector<pgbench_tx> txs;
  for (const auto& entry : fs::directory_iterator{dir_}) {
    auto name = entry.path().filename().string();
    if (name.rfind("log_" + tag + ".", 0) != 0)
      continue;
    std::ifstream in{entry.path()};
    read_pgbench_log(in, txs);
    fs::remove(entry.path());
  }
  auto window = window_of(txs, o_.warmup_s, o_.duration_s);
  out.transactions = window.transactions;
  out.transactions_total = txs.size();
  out.latency_us = std::move(window.latency_us);
  out.ledger_rows =
    exec_alone(dsn_, "SELECT count(*) FROM ledger")[0][0].as<uint64_t>();
  return out;
}

// -- flags --------------------------------------------------------------------

const char* const reference_usage =
  R"(
The reference, beside the runs above: [--reference [--pgbench=PATH]]
  --reference    also run the reference kit's pgbench scripts per client
                 count (tools/bench/reference): cycle_per_op.sql (the
                 per-operation design on plain PostgreSQL) and
                 cycle_batch_set.sql (100 cycles per transaction: the
                 set-based ceiling), on a database of their own in the
                 cluster of --postgres (created and dropped again; needs
                 CREATEDB), same warm-up and duration
  --pgbench      pgbench to run (default
                 /usr/lib/postgresql/15/bin/pgbench); psql from its directory
)";

reference_options take_reference_flags(std::vector<std::string>& args) {
  reference_options out;
  bool pgbench_given = false;
  std::vector<std::string> rest;
  for (auto& arg : args) {
    if (arg == "--reference") {
      if (out.enabled)
        throw usage_error("--reference given twice");
      out.enabled = true;
    } else if (arg.rfind("--pgbench=", 0) == 0) {
      if (pgbench_given)
        throw usage_error("--pgbench given twice");
      pgbench_given = true;
      out.pgbench = arg.substr(10);
      if (out.pgbench.empty())
        throw usage_error("--pgbench needs a path");
    } else {
      rest.push_back(std::move(arg));
    }
  }
  if (pgbench_given && !out.enabled)
    throw usage_error("--pgbench applies to --reference");
  args = std::move(rest);
  return out;
}

} // namespace chargeonce::bench
