// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/options.hpp"

#include "main/flags/duration.hpp"
#include "main/flags/token_file.hpp"
#include "persistence/batch.hpp"
#include "protocol/errors.hpp"

#include <charconv>
#include <map>

namespace chargeonce::bench {

namespace {

constexpr size_t clients_max = 1024;
constexpr int64_t chats_max = 100000000;
constexpr int64_t seconds_max = 3600;
constexpr int64_t min_cycles_max = 1000000;
constexpr size_t connections_max = 64;
constexpr size_t processes_max = 64;
constexpr int64_t sweep_reservations_max = 1000000;
constexpr int64_t pid_max = 1 << 22; // Linux's PID_MAX_LIMIT
/// A statement holds K reserves, K starts and K commits.
constexpr size_t batch_cycles_max = persistence::statement_operations_max / 3;

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t from = 0;
  for (auto at = text.find(sep); at != std::string::npos;
       at = text.find(sep, from)) {
    out.push_back(text.substr(from, at - from));
    from = at + 1;
  }
  out.push_back(text.substr(from));
  return out;
}

std::vector<size_t> parse_batches(const std::string& text) {
  std::vector<size_t> out;
  for (const auto& item : split(text, ','))
    out.push_back(parse_int<size_t>("persistence", item, 1, batch_cycles_max));
  return out;
}

workload_mix parse_mix(const std::string& text) {
  workload_mix out;
  for (const auto& item : split(text, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos)
      throw usage_error("--mix takes NAME:PERCENT items, got '" + item + "'");
    auto name = item.substr(0, colon);
    auto pct = parse_int<int>("mix", item.substr(colon + 1), 0, 100);
    if (name == "cancel")
      out.cancel = pct;
    else if (name == "fail")
      out.fail = pct;
    else if (name == "double")
      out.double_tap = pct;
    else
      throw usage_error("--mix knows cancel, fail and double, not '" + name
                        + "'");
  }
  if (out.cancel + out.fail > 100)
    throw usage_error("--mix: cancel + fail exceed 100 %");
  return out;
}

void parse_client_api(bench_options& o, const std::string& text) {
  o.blocking_api = o.async_api = o.http_api = false;
  for (const auto& item : split(text, ',')) {
    if (item == "blocking")
      o.blocking_api = true;
    else if (item == "async")
      o.async_api = true;
    else if (item == "http")
      o.http_api = true;
    else
      throw usage_error("--client-api takes blocking, async and/or http, not '"
                        + item + "'");
  }
}

/// HOST:PORT of the server's HTTP/JSON API.
void parse_http(http_target& t, const std::string& text) {
  auto parsed = client::parse_endpoints(text);
  if (!parsed || parsed->size() != 1)
    throw usage_error("--http takes one HOST:PORT, got '" + text + "'");
  t.host = parsed->front().host;
  t.port = parsed->front().port;
}

std::string token_from_file(const std::string& name, const std::string& path) {
  std::string token;
  if (auto problem = read_token_file(path, token); !problem.empty())
    throw usage_error("--" + name + ": " + problem);
  if (token.empty())
    throw usage_error("--" + name + ": " + path + " is empty");
  return token;
}

/// The token flags of the two roles a cycle needs, given or from a file.
bool apply_token_flag(http_target& t, const std::string& name,
                      const std::string& value) {
  if (name == "http-gateway-token")
    t.gateway_token = value;
  else if (name == "http-worker-token")
    t.worker_token = value;
  else if (name == "http-gateway-token-file")
    t.gateway_token = token_from_file(name, value);
  else if (name == "http-worker-token-file")
    t.worker_token = token_from_file(name, value);
  else
    return false;
  return true;
}

chat_order parse_order(const std::string& text) {
  if (text == "random")
    return chat_order::random;
  if (text == "sequential")
    return chat_order::sequential;
  throw usage_error("--chat-order is random or sequential, not '" + text + "'");
}

/// MODE:FIRST, written by child_args().
child_role parse_child(const std::string& text) {
  auto colon = text.find(':');
  child_role out;
  if (colon != std::string::npos)
    out.mode = text.substr(0, colon);
  if (out.mode != "remote" && out.mode != "baseline")
    throw usage_error("--child takes remote:FIRST or baseline:FIRST");
  out.first =
    parse_int<int64_t>("child", text.substr(colon + 1), 0, int64_t{1} << 62);
  return out;
}

/// --name=value, or a bare --name for the switches.
std::pair<std::string, std::string> split_flag(const std::string& arg) {
  if (arg == "--baseline" || arg == "--in-process" || arg == "--json"
      || arg == "--sweep" || arg == "--statements")
    return {arg.substr(2), "true"};
  auto eq = arg.find('=');
  if (arg.rfind("--", 0) != 0 || eq == std::string::npos || eq == 2)
    throw usage_error("expected --name=value, got '" + arg + "'");
  return {arg.substr(2, eq - 2), arg.substr(eq + 1)};
}

void apply_flag(bench_options& o, const std::string& name,
                const std::string& value) {
  if (name == "postgres")
    o.postgres = value;
  else if (name == "servers") {
    auto parsed = client::parse_endpoints(value);
    if (!parsed)
      throw usage_error("--servers: " + error_message(parsed.error()));
    o.servers = std::move(*parsed);
    o.servers_text = value;
  } else if (name == "in-process")
    o.in_process = true;
  else if (name == "baseline")
    o.baseline = true;
  else if (name == "client-api")
    parse_client_api(o, value);
  else if (name == "http")
    parse_http(o.http, value);
  else if (apply_token_flag(o.http, name, value))
    return;
  else if (name == "json")
    o.json = true;
  else if (name == "clients")
    o.clients = parse_clients(value);
  else if (name == "chats")
    o.chats = parse_int<int64_t>(name, value, 1, chats_max);
  else if (name == "grants-per-chat")
    o.grants_per_chat = parse_int<int32_t>(name, value, 1, 16);
  else if (name == "duration")
    o.duration_s = parse_duration_seconds(name, value, 1, seconds_max);
  else if (name == "warmup")
    o.warmup_s = parse_duration_seconds(name, value, 0, seconds_max);
  else if (name == "min-cycles")
    o.min_cycles = parse_int<int64_t>(name, value, 0, min_cycles_max);
  else if (name == "mix")
    o.mix = parse_mix(value);
  else if (name == "connections")
    o.connections = parse_int<size_t>(name, value, 1, connections_max);
  else if (name == "processes")
    o.processes = parse_int<size_t>(name, value, 1, processes_max);
  else if (name == "server-pid")
    o.server_pid = parse_int<int64_t>(name, value, 1, pid_max);
  else if (name == "chat-order")
    o.order = parse_order(value);
  else if (name == "idle-timeout")
    o.idle_timeout_s = parse_duration_seconds(name, value, 1, seconds_max);
  else if (name == "persistence")
    o.persistence_batches = parse_batches(value);
  else if (name == "sweep")
    o.sweep = true;
  else if (name == "statements")
    o.statements = true;
  else if (name == "sweep-reservations")
    o.sweep_reservations =
      parse_int<int64_t>(name, value, 1, sweep_reservations_max);
  else if (name == "child") {
    o.child = true;
    o.role = parse_child(value);
  } else
    throw usage_error("unknown option --" + name);
}

/// --client-api=http needs the address and both roles' tokens (given
/// without it they are unused: scripts/bench always passes them).
void check_http(const bench_options& o) {
  const auto& t = o.http;
  if (!o.http_api)
    return;
  if (t.port == 0)
    throw usage_error("--client-api=http needs --http=HOST:PORT (the "
                      "server's http-port)");
  if (t.gateway_token.empty() || t.worker_token.empty())
    throw usage_error("--client-api=http needs the gateway's and the "
                      "worker's token: --http-gateway-token-file=PATH and "
                      "--http-worker-token-file=PATH (or --http-*-token)");
  if (o.processes > 1)
    throw usage_error("--client-api=http runs its clients in this process: "
                      "--processes must be 1");
}

void check(const bench_options& o) {
  if (o.postgres.empty())
    throw usage_error("--postgres=DSN is required");
  if (!o.servers.empty() && o.in_process)
    throw usage_error("give --servers or --in-process, not both");
  if (o.servers.empty() && !o.in_process && !o.baseline && !o.child
      && o.persistence_batches.empty() && !o.http_api && !o.sweep)
    throw usage_error("give --servers=H:P,..., --client-api=http, "
                      "--in-process, --baseline, --persistence or --sweep");
  check_http(o);
  for (auto k : o.persistence_batches)
    if (o.chats < static_cast<int64_t>(3 * k))
      throw usage_error("--persistence=" + std::to_string(k) + " keeps "
                        + std::to_string(3 * k)
                        + " chats in flight: --chats must be at least that");
  if (o.in_process && o.processes > 1)
    throw usage_error("--in-process runs its clients as threads of this "
                      "process: --processes must be 1");
  if (o.async_api && o.servers.empty())
    throw usage_error("--client-api=async applies to remote runs: give "
                      "--servers");
  if (o.async_api && o.processes > 1)
    throw usage_error("--client-api=async runs its clients in this process: "
                      "--processes must be 1");
  if (o.idle_timeout_s > 0 && !o.in_process)
    throw usage_error("--idle-timeout applies to --in-process only (remote: "
                      "the server's own option)");
  if (o.child && o.role.mode == "remote" && o.servers.empty())
    throw usage_error("--child=remote:... needs --servers");
  if (o.statements && o.servers.empty() && !o.in_process && !o.baseline
      && !o.http_api)
    throw usage_error("--statements reports the runs' statements: give "
                      "--servers, --client-api=http, --in-process or "
                      "--baseline (not --persistence or --sweep alone)");
}

} // namespace

std::vector<size_t> parse_clients(const std::string& text) {
  std::vector<size_t> out;
  for (const auto& item : split(text, ','))
    out.push_back(parse_int<size_t>("clients", item, 1, clients_max));
  return out;
}

const char* const usage_text =
  R"(usage: chargeonce-bench --postgres=DSN
                        (--servers=H1:P1,... [--client-api=blocking,async]
                         | --in-process) [--baseline]
                        [--client-api=http --http=HOST:PORT
                         --http-gateway-token-file=PATH
                         --http-worker-token-file=PATH]
                        [--clients=N[,N...]] [--chats=N] [--duration=DURATION]
                        [--warmup=DURATION] [--min-cycles=N]
                        [--mix=cancel:N,fail:N,double:N]
                        [--connections=N] [--processes=N] [--server-pid=PID]
                        [--chat-order=random|sequential]
                        [--idle-timeout=DURATION] [--persistence=K[,K...]]
                        [--sweep [--sweep-reservations=N]] [--statements]
                        [--json]

  --postgres     where chats are seeded (and the baseline runs); remote
                 servers must use the same database
  --servers      remote mode: through the client library, like gateways
  --client-api   remote mode's calls: blocking (default; mode remote, one
                 thread per client), async (mode remote_async: each
                 client's next call is made from the previous one's
                 continuation, no thread per client), http (mode http:
                 one thread per client on its own kept-alive HTTP
                 connection, as a PHP or Python gateway calls the HTTP/JSON
                 API), or several of them
  --http         the server's HTTP/JSON API (its http-port), for http
  --http-gateway-token-file, --http-worker-token-file
                 the bearer tokens of the gateway (reserve, cancel) and
                 worker (start, commit, fail) roles, first line of the file
                 (or --http-gateway-token=T, --http-worker-token=T)
  --in-process   the supervisor, registry and pool in this process
  --baseline     also run the workload as one Postgres transaction per
                 operation (persistence::store, one per client thread)
  --clients      closed-loop client threads; a list means one run per value
                 (default 16)
  --chats        chats seeded fresh per run (default 100000)
  --grants-per-chat
                 each chat's balance split into N grants (1…16, default 1):
                 N-1 that expire 30, 60, … days on and one that never
                 does, so that every hold walks the grants in spending
                 order
  --duration     measured time per run (default 10s, at most 1h)
  --warmup       unmeasured time before that (default 1s, at most 1h)
  --min-cycles   keep a run's measured window open past --duration until
                 every client completed N cycles begun in it (those done
                 go on meanwhile; duration_s is the window's real length;
                 with --processes, per process); each --persistence run
                 likewise (default 0: --duration alone); N >= 100 makes
                 every --mix variant of a nonzero percent come in every
                 client's run
  --mix          percent of cycles that cancel instead of start, fail
                 instead of commit, or double-tap reserve (default all 0);
                 dealt without replacement: each client's cycles, 100 at a
                 time from the window's start, take each variant exactly
                 N of 100 times
  --connections  Postgres connections serving chats in the in-process pool
                 and in --sweep's supervisor (default 4)
  --processes    client processes sharing the clients of a remote or
                 baseline run (default 1: threads of this process)
  --server-pid   remote mode: report this process's peak and current
                 resident memory after each run
  --chat-order   random (default): any chat of the run per cycle;
                 sequential: the next chat no cycle has taken yet
  --idle-timeout in-process chat actors passivate after this long idle
                 (default: the server's 60s)
  --persistence  also measure the persistence layer alone, on one
                 connection, no actors: the cycles one operation per
                 transaction (the baseline's statements, then the
                 server's functions), then K cycles per statement (K reserves, K
                 starts, K commits; a list: one run per K, 1..42); with the
                 Postgres backend's CPU per cycle when Postgres is local
  --sweep        also measure the server's sweep: stuck reservations (an
                 hour old, their workers dead) released by the supervisor
                 in this process, as the server sweeps (its scan
                 connection, each release through the chat's actor on
                 --connections partitions), beside one DELETE ... RETURNING
                 of as many made the same way; releases/s, rows/s, ratio
  --sweep-reservations
                 stuck reservations per measurement (default 10000)
  --statements   also report, per run, the statements Postgres ran in the
                 measured window (pg_stat_statements of --postgres's
                 database, reset when the window opens): calls, execution
                 time and rows per cycle, the costliest 12; needs
                 pg_stat_statements loaded (track = all lists the
                 statements inside functions too) and created in the
                 database, and the right to reset it
  --json         one JSON object on stdout instead of the table

DURATION: a number of seconds (90) or a number with a unit, as the server
takes durations: 1500ms, 90s, 3min, 1h (also ns, us); the bench counts
whole seconds.
)";

bench_options parse_args(int argc, char** argv) {
  bench_options out;
  std::map<std::string, bool> seen;
  for (int i = 1; i < argc; ++i) {
    auto [name, value] = split_flag(argv[i]);
    if (seen[name])
      throw usage_error("--" + name + " given twice");
    seen[name] = true;
    apply_flag(out, name, value);
  }
  if (seen["sweep-reservations"] && !out.sweep)
    throw usage_error("--sweep-reservations applies to --sweep only");
  check(out);
  return out;
}

bool wants_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string{argv[i]} == "--help" || std::string{argv[i]} == "-h")
      return true;
  return false;
}

const char* name_of(chat_order x) {
  return x == chat_order::random ? "random" : "sequential";
}

std::vector<std::string> child_args(const bench_options& o,
                                    const std::string& mode, int64_t first,
                                    int64_t chats, size_t clients) {
  std::vector<std::string> out{"--postgres=" + o.postgres,
                               "--child=" + mode + ":" + std::to_string(first),
                               "--chats=" + std::to_string(chats),
                               "--clients=" + std::to_string(clients),
                               "--duration=" + std::to_string(o.duration_s),
                               "--min-cycles=" + std::to_string(o.min_cycles),
                               "--mix=cancel:" + std::to_string(o.mix.cancel)
                                 + ",fail:" + std::to_string(o.mix.fail)
                                 + ",double:"
                                 + std::to_string(o.mix.double_tap),
                               std::string{"--chat-order="} + name_of(o.order)};
  if (mode == "remote")
    out.push_back("--servers=" + o.servers_text);
  return out;
}

} // namespace chargeonce::bench
