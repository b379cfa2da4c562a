// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench's command line: what to run, how long, which mix.
#pragma once

#include "client/client.hpp"
#include "main/flags/flags.hpp"

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace chargeonce::bench {

using clock_type = std::chrono::steady_clock;

constexpr int exit_ok = 0;
constexpr int exit_failed = 1;
constexpr int exit_usage = 2;

/// Per request; far above any latency we expect, below "hung forever".
constexpr auto request_timeout = std::chrono::seconds(30);

/// Percent of cycles taking each variant; the rest are plain cycles. Dealt
/// without replacement: every 100 cycles a client completes in the window
/// take each variant exactly its percent of the time (loop.hpp).
struct workload_mix {
  int cancel = 0;     ///< reserve → cancel
  int fail = 0;       ///< reserve → start → fail
  int double_tap = 0; ///< a second reserve right after the first: busy
};

/// How a cycle picks its chat.
enum class chat_order {
  random,     ///< uniformly from the run's chats
  sequential, ///< the next chat no cycle has taken yet (then wraps around)
};

/// Set only in a client process started by the parent (hidden --child).
struct child_role {
  std::string mode;  ///< remote or baseline
  int64_t first = 0; ///< the chat range's base; its count is --chats
};

/// Where the server's HTTP/JSON API listens and the bearer tokens of the
/// two roles a cycle needs (reserve and cancel: gateway; start, commit and
/// fail: worker).
struct http_target {
  std::string host;
  int port = 0;
  std::string gateway_token;
  std::string worker_token;
};

struct bench_options {
  std::string postgres;
  std::string servers_text;              ///< as given, for child processes
  std::vector<client::endpoint> servers; ///< empty unless remote
  bool in_process = false;
  /// --client-api: remote runs with blocking calls, one thread per client
  /// (mode remote), with asynchronous calls (mode remote_async), and/or
  /// over the HTTP/JSON API (mode http).
  bool blocking_api = true;
  bool async_api = false;
  /// --client-api=http: closed-loop threads over HTTP/JSON (mode http).
  bool http_api = false;
  http_target http; ///< --http and the token flags
  bool baseline = false;
  std::vector<size_t> clients{16};
  int64_t chats = 100000;
  /// --grants-per-chat: the seeded balance split into this many grants.
  int32_t grants_per_chat = 1;
  int64_t duration_s = 10; ///< --duration, in whole seconds
  int64_t warmup_s = 1;    ///< --warmup, in whole seconds
  /// --min-cycles: a run's measured window stays open past --duration
  /// until every client completed this many cycles begun in it (each
  /// --persistence run likewise); 0: --duration alone decides.
  int64_t min_cycles = 0;
  workload_mix mix;
  size_t connections = 4;
  size_t processes = 1;   ///< client processes (remote, baseline)
  int64_t server_pid = 0; ///< whose memory to report; 0: none
  chat_order order = chat_order::random;
  int64_t idle_timeout_s = 0; ///< in-process chat idle timeout; 0: 60 s
  /// --persistence: cycles per statement of each batched run; empty: the
  /// persistence layer is not measured alone.
  std::vector<size_t> persistence_batches;
  /// --sweep: the server's sweep of this many stuck reservations beside one
  /// DELETE ... RETURNING of as many (--sweep-reservations).
  bool sweep = false;
  int64_t sweep_reservations = 10000;
  /// --statements: each run also reports the statements Postgres ran in
  /// its window, per cycle (pg_stat_statements).
  bool statements = false;
  bool json = false;
  bool child = false; ///< this process is a client process
  child_role role;    ///< when child
};

/// A --clients list: counts of 1..1024, comma-separated; throws
/// usage_error.
std::vector<size_t> parse_clients(const std::string& text);

/// Parses argv; throws usage_error.
bench_options parse_args(int argc, char** argv);

/// --help or -h anywhere.
bool wants_help(int argc, char** argv);

extern const char* const usage_text;

const char* name_of(chat_order x);

/// The flags that give a child process the same workload as `o`.
std::vector<std::string> child_args(const bench_options& o,
                                    const std::string& mode, int64_t first,
                                    int64_t chats, size_t clients);

} // namespace chargeonce::bench
