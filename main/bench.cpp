// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench: closed-loop clients running reserve → start → commit
// cycles through the client library (remote), against the actors in this
// process (in-process), and as one Postgres transaction per operation
// (baseline), each on freshly seeded chats; reports cycles/s and latency
// percentiles per operation. Exit status: 0 success, 1 an operation failed
// unexpectedly (or setup failed), 2 usage error.
#include "actors/supervisor_actor.hpp"
#include "client/client.hpp"
#include "main/histogram.hpp"
#include "persistence/bulk.hpp"
#include "persistence/migrations.hpp"
#include "persistence/store.hpp"
#include "protocol/config.hpp"
#include "protocol/errors.hpp"
#include "protocol/interfaces.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <array>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace chargeonce;
using clock_type = std::chrono::steady_clock;

constexpr int exit_ok = 0;
constexpr int exit_failed = 1;
constexpr int exit_usage = 2;

constexpr size_t clients_max = 1024;
constexpr int64_t chats_max = 100000000;
constexpr int64_t seconds_max = 3600;
constexpr size_t connections_max = 64;
/// Enough credits that no chat can run dry in any run: insufficient_images
/// would measure the pricing rule, not the service.
constexpr int32_t seed_balance = 1000000;
/// Per request; far above any latency we expect, below "hung forever".
constexpr auto request_timeout = std::chrono::seconds(30);
/// A server checks every reservation again queue-notice-delay (default 5 s)
/// after its reserve. Waiting that out after a remote run keeps those checks
/// off the next run's clock, and off chats we are about to remove.
constexpr auto remote_settle = std::chrono::seconds(6);
/// Unexpected errors printed per run; the rest are only counted.
constexpr int unexpected_printed_max = 5;

constexpr const char* usage_text =
  R"(usage: chargeonce-bench --postgres=DSN
                        (--servers=H1:P1,... | --in-process) [--baseline]
                        [--clients=N[,N...]] [--chats=N] [--duration=SECONDS]
                        [--warmup=SECONDS] [--mix=cancel:N,fail:N,double:N]
                        [--connections=N] [--json]

  --postgres     where chats are seeded (and the baseline runs); remote
                 servers must use the same database
  --servers      remote mode: through the client library, like gateways
  --in-process   the supervisor, registry and pool in this process
  --baseline     also run the workload as one Postgres transaction per
                 operation (persistence::store, one per client thread)
  --clients      closed-loop client threads; a list means one run per value
                 (default 16)
  --chats        chats seeded fresh per run (default 100000)
  --duration     measured seconds per run (default 10)
  --warmup       unmeasured seconds before that (default 1)
  --mix          percent of cycles that cancel instead of start, fail
                 instead of commit, or double-tap reserve (default all 0)
  --connections  Postgres connections of the in-process pool (default 4)
  --json         one JSON object on stdout instead of the table
)";

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// -- options ------------------------------------------------------------------

/// Percent of cycles taking each variant; the rest are plain cycles.
struct workload_mix {
  int cancel = 0;     ///< reserve → cancel
  int fail = 0;       ///< reserve → start → fail
  int double_tap = 0; ///< a second reserve right after the first: busy
};

struct bench_options {
  std::string postgres;
  std::vector<client::endpoint> servers; ///< empty unless remote
  bool in_process = false;
  bool baseline = false;
  std::vector<size_t> clients{16};
  int64_t chats = 100000;
  int64_t duration_s = 10;
  int64_t warmup_s = 1;
  workload_mix mix;
  size_t connections = 4;
  bool json = false;
};

template <class T>
T parse_int(const std::string& name, const std::string& text, T low, T high) {
  T out{};
  auto last = text.data() + text.size();
  auto res = std::from_chars(text.data(), last, out);
  if (text.empty() || res.ec != std::errc{} || res.ptr != last || out < low
      || out > high)
    throw usage_error("--" + name + " must be an integer in "
                      + std::to_string(low) + ".." + std::to_string(high)
                      + ", got '" + text + "'");
  return out;
}

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

std::vector<size_t> parse_clients(const std::string& text) {
  std::vector<size_t> out;
  for (const auto& item : split(text, ','))
    out.push_back(parse_int<size_t>("clients", item, 1, clients_max));
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

/// --name=value, or a bare --name for the switches.
std::pair<std::string, std::string> split_flag(const std::string& arg) {
  if (arg == "--baseline" || arg == "--in-process" || arg == "--json")
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
  } else if (name == "in-process")
    o.in_process = true;
  else if (name == "baseline")
    o.baseline = true;
  else if (name == "json")
    o.json = true;
  else if (name == "clients")
    o.clients = parse_clients(value);
  else if (name == "chats")
    o.chats = parse_int<int64_t>(name, value, 1, chats_max);
  else if (name == "duration")
    o.duration_s = parse_int<int64_t>(name, value, 1, seconds_max);
  else if (name == "warmup")
    o.warmup_s = parse_int<int64_t>(name, value, 0, seconds_max);
  else if (name == "mix")
    o.mix = parse_mix(value);
  else if (name == "connections")
    o.connections = parse_int<size_t>(name, value, 1, connections_max);
  else
    throw usage_error("unknown option --" + name);
}

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
  if (out.postgres.empty())
    throw usage_error("--postgres=DSN is required");
  if (!out.servers.empty() && out.in_process)
    throw usage_error("give --servers or --in-process, not both");
  if (out.servers.empty() && !out.in_process && !out.baseline)
    throw usage_error("give --servers=H:P,..., --in-process or --baseline");
  return out;
}

// -- chats --------------------------------------------------------------------

/// The chats of one run: ids first + 1 … first + count.
struct chat_range {
  chat_id first = 0;
  int64_t count = 0;

  chat_id pick(std::mt19937_64& rng) const {
    std::uniform_int_distribution<int64_t> offset{1, count};
    return first + offset(rng);
  }
};

/// A random base far from hand-made chats, so that runs (and other users of
/// the same database) never share a chat.
chat_id random_base() {
  std::random_device seed;
  std::mt19937_64 rng{(uint64_t{seed()} << 32) | seed()};
  std::uniform_int_distribution<int64_t> base{int64_t{1} << 40,
                                              int64_t{1} << 52};
  return base(rng);
}

/// Fresh chats for one run (persistence/bulk.cpp holds the SQL).
chat_range seed_chats(const std::string& dsn, int64_t count) {
  chat_range out{random_base(), count};
  if (auto err = persistence::seed_chats(dsn, out.first, count, seed_balance))
    throw std::runtime_error(error_message(err));
  return out;
}

/// Removes a run's chats with everything that refers to them, so the
/// database does not grow run after run.
void drop_chats(const std::string& dsn, const chat_range& range) {
  if (auto err = persistence::drop_chats(dsn, range.first, range.count))
    throw std::runtime_error(error_message(err));
}

// -- drivers: one client thread's way to the service --------------------------

template <class T>
caf::error error_of(const caf::expected<T>& x) {
  return x ? caf::error{} : x.error();
}

/// Blocking calls of one client thread; made on that thread.
class driver {
public:
  virtual ~driver() = default;
  virtual caf::expected<reservation_id> reserve(chat_id chat) = 0;
  virtual caf::error start(chat_id chat, reservation_id id) = 0;
  virtual caf::error commit(chat_id chat, reservation_id id) = 0;
  virtual caf::error fail(chat_id chat, reservation_id id) = 0;
  virtual caf::error cancel(chat_id chat) = 0;
  /// Opens connections before the clock starts.
  virtual void connect(chat_id) {}
};

caf::expected<reservation_id> id_of(const caf::expected<reservation>& x) {
  if (!x)
    return x.error();
  return x->id;
}

/// Any API with the client library's blocking calls: the client library
/// itself, or persistence::store (the same names, one transaction each).
template <class Api>
class api_driver : public driver {
public:
  explicit api_driver(Api& api) : api_(api) {}
  caf::expected<reservation_id> reserve(chat_id chat) override {
    return id_of(api_.reserve(chat, kind::image, {}));
  }
  caf::error start(chat_id chat, reservation_id id) override {
    return error_of(api_.start(chat, id));
  }
  caf::error commit(chat_id chat, reservation_id id) override {
    return error_of(api_.commit(chat, id));
  }
  caf::error fail(chat_id chat, reservation_id id) override {
    return error_of(api_.fail(chat, id));
  }
  caf::error cancel(chat_id chat) override {
    return error_of(api_.cancel(chat));
  }

protected:
  Api& api_;
};

/// Through the client library, shared by all threads as a gateway would.
using remote_driver = api_driver<client::client>;

/// Straight to the registry in this process: one scoped actor per thread.
class in_process_driver : public driver {
public:
  in_process_driver(caf::actor_system& sys, api_actor api)
      : self_(sys), api_(std::move(api)) {}
  caf::expected<reservation_id> reserve(chat_id chat) override {
    return id_of(
      ask<reservation>(atom::reserve_v, chat, kind::image, std::string{}));
  }
  caf::error start(chat_id chat, reservation_id id) override {
    return error_of(ask<reservation>(atom::start_v, chat, id));
  }
  caf::error commit(chat_id chat, reservation_id id) override {
    return error_of(ask<receipt>(atom::commit_v, chat, id));
  }
  caf::error fail(chat_id chat, reservation_id id) override {
    return error_of(ask<reservation>(atom::fail_v, chat, id));
  }
  caf::error cancel(chat_id chat) override {
    return error_of(ask<reservation>(atom::cancel_v, chat));
  }

private:
  template <class T, class... Ts>
  caf::expected<T> ask(const Ts&... xs) {
    caf::expected<T> out{caf::sec::none};
    self_->request(api_, request_timeout, xs...)
      .receive([&](T& x) { out = std::move(x); },
               [&](caf::error& err) { out = std::move(err); });
    return out;
  }

  caf::scoped_actor self_;
  api_actor api_;
};

/// Owns the baseline's connection; a base of its own so that it is built
/// before the api_driver that refers to it.
struct store_owner {
  explicit store_owner(const std::string& dsn) : db(baseline_options(dsn)) {}
  /// The straightforward SQL: lock, select, write, one statement at a time.
  static persistence::store_options baseline_options(const std::string& dsn) {
    persistence::store_options out{dsn};
    out.server_functions = false;
    return out;
  }
  persistence::store db;
};

/// The design without actors: each operation one transaction of its own
/// from the caller's thread, one connection per client.
class baseline_driver : private store_owner,
                        public api_driver<persistence::store> {
public:
  explicit baseline_driver(const std::string& dsn)
      : store_owner(dsn), api_driver(db) {}
  void connect(chat_id probe) override { db.status(probe); }
};

using driver_factory = std::function<std::unique_ptr<driver>()>;

// -- measuring ----------------------------------------------------------------

enum class op : size_t {
  reserve,
  start,
  commit,
  cancel,
  fail,
  double_tap, ///< the second reserve of a double tap
  cycle,      ///< a whole cycle, first reserve to last answer
};

constexpr size_t op_count = 7;
constexpr std::array<const char*, op_count> op_names{
  "reserve", "start", "commit", "cancel", "fail", "double", "cycle"};

const char* name_of(op x) {
  return op_names[static_cast<size_t>(x)];
}

/// What one client thread saw in the measured window (merged afterwards).
struct client_stats {
  std::array<histogram, op_count> latency;
  /// outcome name (ok, busy, an error's name) → count, per operation
  std::array<std::map<std::string, uint64_t>, op_count> outcomes;
  uint64_t cycles = 0;     ///< completed in the window, any variant
  uint64_t commits = 0;    ///< of which ended with a commit
  uint64_t unexpected = 0; ///< whole run, warm-up included

  void merge(const client_stats& other) {
    for (size_t i = 0; i < op_count; ++i) {
      latency[i].merge(other.latency[i]);
      for (const auto& [name, n] : other.outcomes[i])
        outcomes[i][name] += n;
    }
    cycles += other.cycles;
    commits += other.commits;
    unexpected += other.unexpected;
  }
};

/// Operations that complete in [from, until) are measured; nothing starts
/// at or after `until`.
struct time_window {
  clock_type::time_point from;
  clock_type::time_point until;

  bool contains(clock_type::time_point t) const {
    return t >= from && t < until;
  }
};

/// Releases all client threads at once, after their connections are open,
/// and hands them the measuring window.
class start_gate {
public:
  explicit start_gate(size_t parties) : waiting_(parties) {}

  time_window arrive_and_wait() {
    std::unique_lock<std::mutex> guard{mtx_};
    if (--waiting_ == 0)
      cv_.notify_all();
    cv_.wait(guard, [this] { return open_; });
    return window_;
  }

  void open_when_ready(const std::function<time_window()>& make_window) {
    std::unique_lock<std::mutex> guard{mtx_};
    cv_.wait(guard, [this] { return waiting_ == 0; });
    window_ = make_window();
    open_ = true;
    cv_.notify_all();
  }

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  size_t waiting_;
  bool open_ = false;
  time_window window_;
};

/// The closed loop of one client thread: the next cycle starts when the
/// previous one ended.
class client_loop {
public:
  client_loop(driver& d, const chat_range& chats, const workload_mix& mix,
              client_stats& stats, uint64_t seed)
      : d_(d), chats_(chats), mix_(mix), stats_(stats), rng_(seed) {}

  void run(const time_window& window) {
    window_ = window;
    while (clock_type::now() < window_.until)
      cycle();
  }

private:
  /// Busy on the first reserve is a chat held by another client: an
  /// outcome, not an error. Every other failure is unexpected.
  void cycle() {
    auto chat = chats_.pick(rng_);
    auto roll = percent();
    auto t0 = clock_type::now();
    auto id = reserve(chat);
    if (!id)
      return;
    bool ok = true;
    if (percent() < mix_.double_tap)
      ok = double_tap(chat);
    bool committed = false;
    if (ok && roll < mix_.cancel)
      ok = step(op::cancel, chat, [&] { return d_.cancel(chat); });
    else if (ok) {
      ok = step(op::start, chat, [&] { return d_.start(chat, *id); });
      bool fails = roll < mix_.cancel + mix_.fail;
      if (ok && fails)
        ok = step(op::fail, chat, [&] { return d_.fail(chat, *id); });
      else if (ok)
        ok = committed =
          step(op::commit, chat, [&] { return d_.commit(chat, *id); });
    }
    if (!ok) {
      d_.fail(chat, *id); // free the chat for later cycles; best effort
      return;
    }
    finish_cycle(t0, committed);
  }

  caf::expected<reservation_id> reserve(chat_id chat) {
    caf::expected<reservation_id> out{caf::sec::none};
    auto err = timed(op::reserve, [&] {
      out = d_.reserve(chat);
      return error_of(out);
    });
    if (err && err != ec::busy)
      unexpected(op::reserve, chat, error_name(err), error_message(err));
    return out;
  }

  /// A second reserve of a chat we hold must be busy, never a reservation.
  bool double_tap(chat_id chat) {
    caf::expected<reservation_id> second{caf::sec::none};
    auto err = timed(op::double_tap, [&] {
      second = d_.reserve(chat);
      return error_of(second);
    });
    if (err == ec::busy)
      return true;
    if (second)
      unexpected(op::double_tap, chat, "not_busy",
                 "a second reserve got reservation " + std::to_string(*second));
    else
      unexpected(op::double_tap, chat, error_name(err), error_message(err));
    return false;
  }

  template <class F>
  bool step(op which, chat_id chat, F call) {
    auto err = timed(which, call);
    if (err)
      unexpected(which, chat, error_name(err), error_message(err));
    return !err;
  }

  /// Runs `call`, records its latency and outcome if it ended in the window.
  template <class F>
  caf::error timed(op which, F call) {
    auto t0 = clock_type::now();
    caf::error err = call();
    auto t1 = clock_type::now();
    if (window_.contains(t1)) {
      record(which, t0, t1);
      ++outcomes(which)[outcome_name(which, err)];
    }
    return err;
  }

  static std::string outcome_name(op which, const caf::error& err) {
    if (!err)
      return which == op::double_tap ? "not_busy" : "ok";
    return error_name(err);
  }

  void finish_cycle(clock_type::time_point t0, bool committed) {
    auto t1 = clock_type::now();
    if (!window_.contains(t1))
      return;
    record(op::cycle, t0, t1);
    ++stats_.cycles;
    stats_.commits += committed ? 1 : 0;
  }

  void record(op which, clock_type::time_point t0, clock_type::time_point t1) {
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(t1 - t0);
    stats_.latency[static_cast<size_t>(which)].record(
      static_cast<uint64_t>(us.count()));
  }

  std::map<std::string, uint64_t>& outcomes(op which) {
    return stats_.outcomes[static_cast<size_t>(which)];
  }

  void unexpected(op which, chat_id chat, const std::string& name,
                  const std::string& message) {
    if (++stats_.unexpected <= unexpected_printed_max)
      spdlog::error("unexpected outcome op={} chat={} error={} message={}",
                    name_of(which), chat, name, message);
  }

  int percent() { return std::uniform_int_distribution<int>{0, 99}(rng_); }

  driver& d_;
  const chat_range& chats_;
  const workload_mix& mix_;
  client_stats& stats_;
  std::mt19937_64 rng_;
  time_window window_;
};

/// One run's figures, per mode and client count.
struct run_result {
  std::string mode; ///< remote, in_process or baseline
  size_t clients = 0;
  double duration_s = 0;
  client_stats stats;

  double cycles_per_s() const {
    return duration_s > 0 ? static_cast<double>(stats.cycles) / duration_s
                          : 0.0;
  }

  const histogram& latency(op which) const {
    return stats.latency[static_cast<size_t>(which)];
  }
};

/// Starts `clients` threads, each with its own driver, releases them
/// together and merges what they measured.
run_result run_clients(const std::string& mode, size_t clients,
                       const bench_options& o, const chat_range& chats,
                       const driver_factory& make_driver) {
  std::vector<client_stats> per_thread(clients);
  std::vector<std::thread> threads;
  start_gate gate{clients};
  std::random_device seed;
  for (size_t i = 0; i < clients; ++i) {
    auto thread_seed = (uint64_t{seed()} << 32) | seed();
    threads.emplace_back([&, i, thread_seed] {
      auto d = make_driver();
      d->connect(chats.first + 1);
      client_loop loop{*d, chats, o.mix, per_thread[i], thread_seed};
      loop.run(gate.arrive_and_wait());
    });
  }
  gate.open_when_ready([&] {
    auto from = clock_type::now() + std::chrono::seconds(o.warmup_s);
    return time_window{from, from + std::chrono::seconds(o.duration_s)};
  });
  for (auto& t : threads)
    t.join();
  run_result out{mode, clients, static_cast<double>(o.duration_s), {}};
  for (const auto& x : per_thread)
    out.stats.merge(x);
  return out;
}

// -- modes --------------------------------------------------------------------

struct in_process_config : caf::actor_system_config {
  in_process_config() { register_protocol(*this); }
};

/// The server's actors on a fresh actor system per run: its destructor waits
/// for the pool, so no connection of this run outlives it.
run_result run_in_process(size_t clients, const bench_options& o,
                          const chat_range& chats) {
  in_process_config cfg;
  caf::actor_system sys{cfg};
  supervisor_options sup;
  sup.connections = o.connections;
  persistence::store_options store{o.postgres};
  supervisor_actor root =
    sys.spawn(make_supervisor, make_persistence_factory(sys, store), sup);
  api_actor api;
  caf::scoped_actor self{sys};
  self->request(root, request_timeout, atom::api_v)
    .receive([&](api_actor& x) { api = std::move(x); }, [](caf::error&) {});
  if (!api) {
    caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
    throw std::runtime_error("the supervisor did not hand out its API");
  }
  auto result = run_clients("in_process", clients, o, chats, [&] {
    return std::make_unique<in_process_driver>(sys, api);
  });
  caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
  return result;
}

/// The client side of remote mode, kept for all runs of one invocation.
struct remote_config : caf::actor_system_config {
  remote_config() { client::prepare_config(*this); }
};

/// Fails early and clearly when the servers do not see our database.
void check_servers_see(client::client& api, const chat_range& chats) {
  auto probe = api.status(chats.first + 1);
  if (!probe && probe.error() == ec::not_found)
    throw std::runtime_error("the servers do not know the seeded chats: do "
                             "they use the database of --postgres?");
  if (!probe)
    throw std::runtime_error("cannot reach the servers: "
                             + error_name(probe.error()) + " "
                             + error_message(probe.error()));
}

/// One line on stderr per run, so a long invocation shows where it is.
void progress(const char* mode, size_t clients) {
  std::fprintf(stderr, "chargeonce-bench: run mode=%s clients=%zu\n", mode,
               clients);
}

/// Seeds chats, runs one mode, removes the chats again.
run_result seeded_run(const bench_options& o,
                      const std::function<run_result(const chat_range&)>& f) {
  auto chats = seed_chats(o.postgres, o.chats);
  try {
    auto out = f(chats);
    drop_chats(o.postgres, chats);
    return out;
  } catch (...) {
    try {
      drop_chats(o.postgres, chats); // the original error matters more
    } catch (const std::exception& e) {
      spdlog::error("cannot remove the seeded chats: {}", e.what());
    }
    throw;
  }
}

std::vector<run_result> run_all(const bench_options& o) {
  std::vector<run_result> out;
  std::unique_ptr<remote_config> cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<client::client> api;
  if (!o.servers.empty()) {
    cfg = std::make_unique<remote_config>();
    sys = std::make_unique<caf::actor_system>(*cfg);
    client::options opts;
    opts.servers = o.servers;
    opts.timeout = request_timeout;
    api = std::make_unique<client::client>(*sys, opts);
  }
  for (auto clients : o.clients) {
    if (api)
      out.push_back(seeded_run(o, [&](const chat_range& chats) {
        check_servers_see(*api, chats);
        progress("remote", clients);
        auto result = run_clients("remote", clients, o, chats, [&] {
          return std::make_unique<remote_driver>(*api);
        });
        std::this_thread::sleep_for(remote_settle);
        return result;
      }));
    if (o.in_process)
      out.push_back(seeded_run(o, [&](const chat_range& chats) {
        progress("in_process", clients);
        return run_in_process(clients, o, chats);
      }));
    if (o.baseline)
      out.push_back(seeded_run(o, [&](const chat_range& chats) {
        progress("baseline", clients);
        return run_clients("baseline", clients, o, chats, [&] {
          return std::make_unique<baseline_driver>(o.postgres);
        });
      }));
  }
  return out;
}

// -- reporting ----------------------------------------------------------------

/// chargeonce's cycles/s over the baseline's, per client count.
struct ratio {
  size_t clients = 0;
  std::string mode;
  double cycles_per_s = 0;
  double cycle_p99 = 0;
};

std::vector<ratio> ratios_of(const std::vector<run_result>& runs) {
  std::vector<ratio> out;
  for (const auto& base : runs) {
    if (base.mode != "baseline" || base.cycles_per_s() <= 0)
      continue;
    for (const auto& ours : runs) {
      if (ours.mode == "baseline" || ours.clients != base.clients)
        continue;
      auto base_p99 = base.latency(op::cycle).percentile(99);
      auto ours_p99 = ours.latency(op::cycle).percentile(99);
      out.push_back(
        {base.clients, ours.mode, ours.cycles_per_s() / base.cycles_per_s(),
         base_p99 > 0 ? static_cast<double>(ours_p99) / base_p99 : 0.0});
    }
  }
  return out;
}

nlohmann::json latency_json(const histogram& h) {
  return {{"count", h.count()},      {"p50", h.percentile(50)},
          {"p99", h.percentile(99)}, {"p999", h.percentile(99.9)},
          {"max", h.max()},          {"mean", h.mean()}};
}

nlohmann::json run_json(const run_result& r) {
  nlohmann::json latency = nlohmann::json::object();
  nlohmann::json by_op = nlohmann::json::object();
  std::map<std::string, uint64_t> outcomes{{"ok", 0}, {"busy", 0}};
  for (size_t i = 0; i < op_count; ++i) {
    latency[op_names[i]] = latency_json(r.stats.latency[i]);
    if (!r.stats.outcomes[i].empty())
      by_op[op_names[i]] = r.stats.outcomes[i];
    for (const auto& [name, n] : r.stats.outcomes[i])
      outcomes[name] += n;
  }
  return {{"mode", r.mode},
          {"clients", r.clients},
          {"duration_s", r.duration_s},
          {"cycles", r.stats.cycles},
          {"commits", r.stats.commits},
          {"cycles_per_s", r.cycles_per_s()},
          {"latency_us", latency},
          {"outcomes", outcomes},
          {"outcomes_by_op", by_op},
          {"unexpected", r.stats.unexpected}};
}

void print_json(const bench_options& o, const std::vector<run_result>& runs) {
  nlohmann::json out;
  out["config"] = {{"chats", o.chats},
                   {"duration_s", o.duration_s},
                   {"warmup_s", o.warmup_s},
                   {"connections", o.connections},
                   {"mix",
                    {{"cancel", o.mix.cancel},
                     {"fail", o.mix.fail},
                     {"double", o.mix.double_tap}}}};
  out["runs"] = nlohmann::json::array();
  for (const auto& r : runs)
    out["runs"].push_back(run_json(r));
  out["ratios"] = nlohmann::json::array();
  for (const auto& x : ratios_of(runs))
    out["ratios"].push_back({{"clients", x.clients},
                             {"mode", x.mode},
                             {"cycles_per_s", x.cycles_per_s},
                             {"cycle_p99", x.cycle_p99}});
  std::cout << out.dump() << std::endl;
}

void print_summary(const std::vector<run_result>& runs) {
  std::printf("%-11s %7s %10s %10s %10s %10s\n", "mode", "clients", "cycles/s",
              "cycle p50", "p99", "p99.9");
  for (const auto& r : runs) {
    const auto& c = r.latency(op::cycle);
    std::printf("%-11s %7zu %10.1f %10llu %10llu %10llu\n", r.mode.c_str(),
                r.clients, r.cycles_per_s(),
                static_cast<unsigned long long>(c.percentile(50)),
                static_cast<unsigned long long>(c.percentile(99)),
                static_cast<unsigned long long>(c.percentile(99.9)));
  }
}

void print_operations(const std::vector<run_result>& runs) {
  std::printf("\nper operation (latency in µs)\n");
  std::printf("%-11s %7s %-8s %9s %9s %9s %9s\n", "mode", "clients", "op",
              "count", "p50", "p99", "p99.9");
  for (const auto& r : runs)
    for (size_t i = 0; i < op_count; ++i) {
      const auto& h = r.stats.latency[i];
      if (h.count() == 0 || i == static_cast<size_t>(op::cycle))
        continue;
      std::printf("%-11s %7zu %-8s %9llu %9llu %9llu %9llu\n", r.mode.c_str(),
                  r.clients, op_names[i],
                  static_cast<unsigned long long>(h.count()),
                  static_cast<unsigned long long>(h.percentile(50)),
                  static_cast<unsigned long long>(h.percentile(99)),
                  static_cast<unsigned long long>(h.percentile(99.9)));
    }
}

void print_outcomes(const std::vector<run_result>& runs) {
  std::printf("\noutcomes\n");
  for (const auto& r : runs) {
    std::printf("%-11s %7zu ", r.mode.c_str(), r.clients);
    for (size_t i = 0; i < op_count; ++i)
      for (const auto& [name, n] : r.stats.outcomes[i])
        std::printf(" %s.%s=%llu", op_names[i], name.c_str(),
                    static_cast<unsigned long long>(n));
    std::printf("  unexpected=%llu\n",
                static_cast<unsigned long long>(r.stats.unexpected));
  }
}

void print_table(const bench_options& o, const std::vector<run_result>& runs) {
  std::printf("chargeonce-bench: %lld chats, %lld s per run after %lld s "
              "warm-up, mix cancel %d%% fail %d%% double %d%%; latency in "
              "µs\n\n",
              static_cast<long long>(o.chats),
              static_cast<long long>(o.duration_s),
              static_cast<long long>(o.warmup_s), o.mix.cancel, o.mix.fail,
              o.mix.double_tap);
  print_summary(runs);
  auto ratios = ratios_of(runs);
  if (!ratios.empty())
    std::printf("\n");
  for (const auto& x : ratios)
    std::printf("ratio %s/baseline clients=%zu: cycles/s %.2fx, cycle p99 "
                "%.2fx\n",
                x.mode.c_str(), x.clients, x.cycles_per_s, x.cycle_p99);
  print_operations(runs);
  print_outcomes(runs);
  std::fflush(stdout);
}

// -- main ---------------------------------------------------------------------

/// stdout carries the report (or the JSON), so logs go to stderr. Errors
/// only: in-process, the actors log every operation at info and every busy
/// at warning, which would flood the terminal and be measured as well.
void setup_logging() {
  auto logger = spdlog::stderr_color_mt("chargeonce-bench");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z [%l] %v");
  spdlog::set_level(spdlog::level::err);
}

bool wants_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string{argv[i]} == "--help" || std::string{argv[i]} == "-h")
      return true;
  return false;
}

int bench(const bench_options& o) {
  if (auto done = persistence::migrate(o.postgres); !done) {
    spdlog::critical("cannot migrate error={}", error_message(done.error()));
    return exit_failed;
  }
  auto runs = run_all(o);
  if (o.json)
    print_json(o, runs);
  else
    print_table(o, runs);
  uint64_t unexpected = 0;
  for (const auto& r : runs)
    unexpected += r.stats.unexpected;
  if (unexpected > 0)
    spdlog::error("{} operations failed unexpectedly", unexpected);
  return unexpected > 0 ? exit_failed : exit_ok;
}

} // namespace

int main(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    std::cout << usage_text;
    return exit_ok;
  }
  bench_options opts;
  try {
    opts = parse_args(argc, argv);
  } catch (const usage_error& e) {
    std::cerr << "chargeonce-bench: " << e.what() << " (--help: usage)\n";
    return exit_usage;
  }
  setup_logging();
  try {
    return bench(opts);
  } catch (const std::exception& e) {
    spdlog::critical("bench failed: {}", e.what());
    return exit_failed;
  }
}
