// SPDX-License-Identifier: Apache-2.0
// chargeonce-cli: sends one request to a chargeonce-server and prints the
// answer as one JSON line. Exit status: 0 success, 1 service error (the
// server said no), 2 usage or connection error.
#include "main/cli/cli.hpp"

#include "client/client.hpp"
#include "protocol/config.hpp"
#include "protocol/errors.hpp"
#include "protocol/interfaces.hpp"
#include "protocol/json.hpp"
#include "protocol/time.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <csignal>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace chargeonce;
using flag_map = std::map<std::string, std::string>;

constexpr int exit_ok = 0;
constexpr int exit_service = 1;
constexpr int exit_usage = 2;      ///< bad command line
constexpr int exit_connection = 2; ///< no server, no answer
constexpr int64_t default_timeout_seconds = 15;
constexpr int64_t max_timeout_seconds = 86400;

constexpr const char* usage_text =
  R"(usage: chargeonce-cli --server=HOST:PORT | --servers=H1:P1,H2:P2
                      [--timeout=SECONDS]
                      [--tls --ca=FILE --cert=FILE --key=FILE]
                      COMMAND [--FLAG=VALUE ...]

commands:
  create-chat --chat=ID [--daily-messages=N] [--daily-images=N]
              [--balance=N] [--premium-until=ISO8601]
  reserve     --chat=ID --kind=text|image [--request-id=S]
  start       --chat=ID --reservation=ID
  heartbeat   --chat=ID --reservation=ID
  commit      --chat=ID --reservation=ID
  fail        --chat=ID --reservation=ID
  cancel      --chat=ID
  status      --chat=ID
  touch       --chat=ID
  top-up      --chat=ID --credits=N --payment-id=S
  set-premium --chat=ID --until=ISO8601
  set-flags   --chat=ID [--started=true|false] [--blocked=true|false]
              [--banned=true|false]
  watch       (prints each event as one JSON line until interrupted)

Prints one JSON object on stdout (watch: one per event). Exit status: 0 success, 1 service error
({"error":"busy",...}), 2 usage or connection error. --timeout (seconds)
defaults to 15. Global flags may come before or after the command.
)";

/// A mistake on the command line.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Which flags a command takes.
struct command_spec {
  std::vector<std::string> required;
  std::vector<std::string> optional;
};

const std::map<std::string, command_spec>& commands() {
  static const std::map<std::string, command_spec> table{
    {"create-chat",
     {{"chat"},
      {"daily-messages", "daily-images", "balance", "premium-until"}}},
    {"reserve", {{"chat", "kind"}, {"request-id"}}},
    {"start", {{"chat", "reservation"}, {}}},
    {"heartbeat", {{"chat", "reservation"}, {}}},
    {"commit", {{"chat", "reservation"}, {}}},
    {"fail", {{"chat", "reservation"}, {}}},
    {"cancel", {{"chat"}, {}}},
    {"status", {{"chat"}, {}}},
    {"touch", {{"chat"}, {}}},
    {"top-up", {{"chat", "credits", "payment-id"}, {}}},
    {"set-premium", {{"chat", "until"}, {}}},
    {"set-flags", {{"chat"}, {"started", "blocked", "banned"}}},
    {"watch", {{}, {}}},
  };
  return table;
}

// -- output -------------------------------------------------------------------

void print_line(const nlohmann::json& x) {
  std::cout << x.dump() << std::endl;
}

int report_usage(const std::string& what) {
  print_line({{"error", "usage"}, {"message", what}});
  std::cerr << "chargeonce-cli: " << what << "\n\n" << usage_text;
  return exit_usage;
}

int report_connection(const std::string& what) {
  print_line({{"error", "connection"}, {"message", what}});
  std::cerr << "chargeonce-cli: connection error: " << what << '\n';
  return exit_connection;
}

// -- parsing ------------------------------------------------------------------

bool wants_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h")
      return true;
  }
  return false;
}

bool is_global(const std::string& name) {
  return name == "server" || name == "servers" || name == "timeout"
         || name == "tls" || name == "ca" || name == "cert" || name == "key";
}

std::pair<std::string, std::string> split_flag(const std::string& arg) {
  if (arg == "--tls") // the one flag without a value
    return {"tls", "true"};
  auto eq = arg.find('=');
  if (arg.rfind("--", 0) != 0 || eq == std::string::npos || eq == 2)
    throw usage_error("expected --name=value, got '" + arg + "'");
  return {arg.substr(2, eq - 2), arg.substr(eq + 1)};
}

bool contains(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

/// The command line, split but not yet interpreted.
struct invocation {
  std::string command;
  flag_map globals; ///< --server, --timeout
  flag_map flags;   ///< the command's own
};

void set_command(invocation& inv, const std::string& arg) {
  if (!inv.command.empty())
    throw usage_error("unexpected argument '" + arg + "' (command is '"
                      + inv.command + "')");
  if (commands().count(arg) == 0)
    throw usage_error("unknown command '" + arg + "'");
  inv.command = arg;
}

void add_flag(invocation& inv, const std::string& arg) {
  auto [name, value] = split_flag(arg);
  auto& target = is_global(name) ? inv.globals : inv.flags;
  if (!target.emplace(name, value).second)
    throw usage_error("--" + name + " given twice");
}

void check_flags(const invocation& inv) {
  const auto& spec = commands().at(inv.command);
  for (const auto& [name, value] : inv.flags)
    if (!contains(spec.required, name) && !contains(spec.optional, name))
      throw usage_error(inv.command + " does not take --" + name);
  for (const auto& name : spec.required)
    if (inv.flags.count(name) == 0)
      throw usage_error(inv.command + " needs --" + name);
}

invocation parse_args(int argc, char** argv) {
  invocation inv;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("-", 0) == 0)
      add_flag(inv, arg);
    else
      set_command(inv, arg);
  }
  if (inv.command.empty())
    throw usage_error("missing command");
  check_flags(inv);
  return inv;
}

template <class T>
T parse_int(const std::string& name, const std::string& text) {
  T out{};
  auto first = text.data();
  auto last = first + text.size();
  auto res = std::from_chars(first, last, out);
  if (res.ec == std::errc::result_out_of_range)
    throw usage_error("--" + name + " is out of range: '" + text + "'");
  if (text.empty() || res.ec != std::errc{} || res.ptr != last)
    throw usage_error("--" + name + " must be an integer, got '" + text + "'");
  return out;
}

/// The flag's integer value, or `fallback` when it was not given.
template <class T>
T int_flag(const flag_map& flags, const std::string& name, T fallback = {}) {
  auto i = flags.find(name);
  return i == flags.end() ? fallback : parse_int<T>(name, i->second);
}

/// --name=true|false, or none when not given.
caf::optional<bool> bool_flag(const flag_map& flags, const std::string& name) {
  auto i = flags.find(name);
  if (i == flags.end())
    return caf::none;
  if (i->second == "true")
    return true;
  if (i->second == "false")
    return false;
  throw usage_error("--" + name + " must be true or false, got '" + i->second
                    + "'");
}

kind kind_flag(const flag_map& flags) {
  kind out = kind::text;
  const auto& text = flags.at("kind");
  if (!from_string(text, out))
    throw usage_error("--kind must be text or image, got '" + text + "'");
  return out;
}

caf::optional<caf::timestamp> time_flag(const flag_map& flags,
                                        const std::string& name) {
  auto i = flags.find(name);
  if (i == flags.end())
    return caf::none;
  auto t = parse_iso8601(i->second);
  if (!t)
    throw usage_error("--" + name + " must be an ISO 8601 timestamp, got '"
                      + i->second + "'");
  return t;
}

caf::timespan parse_timeout(const flag_map& globals) {
  auto secs = int_flag<int64_t>(globals, "timeout", default_timeout_seconds);
  if (secs < 1 || secs > max_timeout_seconds)
    throw usage_error("--timeout must be between 1 and "
                      + std::to_string(max_timeout_seconds) + " seconds");
  return std::chrono::seconds{secs};
}

/// --servers=H1:P1,H2:P2 or --server=HOST:PORT (one of them).
std::vector<client::endpoint> parse_servers(const flag_map& globals) {
  auto one = globals.find("server");
  auto many = globals.find("servers");
  if ((one == globals.end()) == (many == globals.end()))
    throw usage_error("give --server=HOST:PORT or --servers=H1:P1,H2:P2");
  auto list = one != globals.end() ? one->second : many->second;
  auto parsed = client::parse_endpoints(list);
  if (!parsed)
    throw usage_error(error_message(parsed.error()));
  return std::move(*parsed);
}

/// Mutual TLS towards role ports published with --tls-cert/--tls-key/--tls-ca.
client::tls_files parse_tls(const flag_map& globals) {
  auto get = [&](const char* name) {
    auto i = globals.find(name);
    return i == globals.end() ? std::string{} : i->second;
  };
  client::tls_files out{get("ca"), get("cert"), get("key")};
  bool any = !out.ca.empty() || !out.cert.empty() || !out.key.empty();
  if (globals.count("tls") == 0) {
    if (any)
      throw usage_error("--ca, --cert and --key go with --tls");
    return {};
  }
  if (out.ca.empty() || out.cert.empty() || out.key.empty())
    throw usage_error("--tls needs --ca=FILE --cert=FILE --key=FILE");
  return out;
}

/// Which facade a command needs: the CLI connects with that role's
/// interface, which the all-roles --port offers as well.
client::role role_of(const std::string& command) {
  using client::role;
  static const std::map<std::string, role> table{
    {"touch", role::gateway},    {"reserve", role::gateway},
    {"cancel", role::gateway},   {"status", role::gateway},
    {"watch", role::gateway},    {"start", role::worker},
    {"heartbeat", role::worker}, {"commit", role::worker},
    {"fail", role::worker},      {"create-chat", role::admin},
    {"top-up", role::admin},     {"set-premium", role::admin},
    {"set-flags", role::admin},
  };
  return table.at(command);
}

std::string seconds_text(caf::timespan t) {
  return std::to_string(t / std::chrono::seconds{1}) + " s";
}

// -- requests -----------------------------------------------------------------

/// The client library over the listed servers, and how to name them.
struct session {
  client::client& api;
  caf::timespan timeout;
  std::string label; ///< the servers, for messages
};

int report_failure(const session& s, const caf::error& err) {
  if (err.category() == caf::atom(error_category_name)) {
    print_line(to_json(err));
    return exit_service;
  }
  if (err == caf::sec::request_timeout)
    return report_connection("no answer from " + s.label + " within "
                             + seconds_text(s.timeout));
  return report_connection("cannot reach " + s.label + ": "
                           + caf::to_string(err));
}

/// Prints an answer, or reports why there is none; the exit status.
template <class T>
int print_result(const session& s, const caf::expected<T>& x) {
  if (!x)
    return report_failure(s, x.error());
  print_line(to_json(*x));
  return exit_ok;
}

/// A request ready to go: flags are checked before connecting.
using action = std::function<int(session&)>;

chat_id chat_flag(const flag_map& flags) {
  return int_flag<chat_id>(flags, "chat");
}

reservation_id reservation_flag(const flag_map& flags) {
  return int_flag<reservation_id>(flags, "reservation");
}

action prepare_create(const flag_map& flags) {
  chat_spec spec;
  spec.chat = chat_flag(flags);
  spec.initial.daily_messages = int_flag<int32_t>(flags, "daily-messages");
  spec.initial.daily_images = int_flag<int32_t>(flags, "daily-images");
  spec.initial.balance = int_flag<int32_t>(flags, "balance");
  spec.premium_until = time_flag(flags, "premium-until");
  return [spec](session& s) {
    return print_result(s, s.api.create(spec));
  };
}

action prepare_reserve(const flag_map& flags) {
  auto chat = chat_flag(flags);
  auto k = kind_flag(flags);
  auto i = flags.find("request-id");
  auto request_id = i == flags.end() ? std::string{} : i->second;
  return [=](session& s) {
    return print_result(s, s.api.reserve(chat, k, request_id));
  };
}

/// start, heartbeat, commit and fail: one reservation of one chat.
template <class F>
action prepare_step(const flag_map& flags, F call) {
  auto chat = chat_flag(flags);
  auto id = reservation_flag(flags);
  return [=](session& s) {
    return print_result(s, call(s.api, chat, id));
  };
}

/// cancel, status and touch: the chat alone.
template <class F>
action prepare_chat(const flag_map& flags, F call) {
  auto chat = chat_flag(flags);
  return [=](session& s) {
    return print_result(s, call(s.api, chat));
  };
}

action prepare_top_up(const flag_map& flags) {
  auto chat = chat_flag(flags);
  // int64: an amount beyond the balance's range reaches the server, which
  // names the limit, instead of failing to parse here.
  auto credits = int_flag<int64_t>(flags, "credits");
  auto payment_id = flags.at("payment-id");
  return [=](session& s) {
    return print_result(s, s.api.top_up(chat, credits, payment_id));
  };
}

action prepare_set_premium(const flag_map& flags) {
  auto chat = chat_flag(flags);
  auto until = *time_flag(flags, "until");
  return [=](session& s) {
    return print_result(s, s.api.set_premium(chat, until));
  };
}

action prepare_set_flags(const flag_map& flags) {
  auto chat = chat_flag(flags);
  flags_update x{bool_flag(flags, "started"), bool_flag(flags, "blocked"),
                 bool_flag(flags, "banned")};
  return [=](session& s) {
    return print_result(s, s.api.set_flags(chat, x));
  };
}

// -- watch --------------------------------------------------------------------

/// Set when a watched server went away; read after sigwait returns.
std::atomic<bool> server_lost{false};

/// Prints every event as one JSON line (`std::endl` flushes, so a pipe sees
/// each line as it happens).
caf::behavior event_printer() {
  return {
    [](const queue_notice& x) { print_line(to_json(x)); },
    [](const reservation_released& x) { print_line(to_json(x)); },
    [](const limits_refilled& x) { print_line(to_json(x)); },
  };
}

/// The signals that end a watch; blocked in every thread before the actor
/// system starts, so that only sigwait sees them.
sigset_t watch_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  return signals;
}

/// Subscribes a local printer on every server and waits for SIGINT/SIGTERM
/// (exit 0) or for a server going away (exit 2).
int watch(session& s, caf::actor_system& sys) {
  auto printer = sys.spawn(event_printer);
  s.api.on_server_lost([](const client::endpoint&) {
    server_lost = true;
    kill(getpid(), SIGTERM);
  });
  auto subscribed = s.api.subscribe(printer);
  if (!subscribed) {
    caf::anon_send_exit(printer, caf::exit_reason::user_shutdown);
    return report_failure(s, subscribed.error());
  }
  std::cerr << "chargeonce-cli: watching " << s.label << std::endl;
  auto signals = watch_signals();
  int sig = 0;
  sigwait(&signals, &sig);
  caf::anon_send_exit(printer, caf::exit_reason::user_shutdown);
  if (server_lost)
    return report_connection(s.label + " went away");
  return exit_ok;
}

action prepare(const invocation& inv) {
  const auto& cmd = inv.command;
  const auto& f = inv.flags;
  using c = client::client;
  if (cmd == "create-chat")
    return prepare_create(f);
  if (cmd == "reserve")
    return prepare_reserve(f);
  if (cmd == "start")
    return prepare_step(
      f, [](c& x, chat_id ch, reservation_id id) { return x.start(ch, id); });
  if (cmd == "heartbeat")
    return prepare_step(f, [](c& x, chat_id ch, reservation_id id) {
      return x.heartbeat(ch, id);
    });
  if (cmd == "commit")
    return prepare_step(
      f, [](c& x, chat_id ch, reservation_id id) { return x.commit(ch, id); });
  if (cmd == "fail")
    return prepare_step(
      f, [](c& x, chat_id ch, reservation_id id) { return x.fail(ch, id); });
  if (cmd == "cancel")
    return prepare_chat(f, [](c& x, chat_id ch) { return x.cancel(ch); });
  if (cmd == "touch")
    return prepare_chat(f, [](c& x, chat_id ch) { return x.touch(ch); });
  if (cmd == "top-up")
    return prepare_top_up(f);
  if (cmd == "set-premium")
    return prepare_set_premium(f);
  if (cmd == "set-flags")
    return prepare_set_flags(f);
  if (cmd == "watch")
    return {}; // needs the actor system: see run()
  return prepare_chat(f, [](c& x, chat_id ch) { return x.status(ch); });
}

// -- main ---------------------------------------------------------------------

/// CAF never sees argv: its parser rejects options it does not know.
struct cli_config : caf::actor_system_config {
  explicit cli_config(const client::tls_files& tls) {
    client::prepare_config(*this, tls);
    set("scheduler.max-threads", 2);
  }
};

std::string label_of(const std::vector<client::endpoint>& servers) {
  std::string out;
  for (const auto& x : servers)
    out += (out.empty() ? "" : ",") + x.label();
  return out;
}

int run(const invocation& inv, const action& act) {
  auto tls = parse_tls(inv.globals);
  client::options opts;
  opts.servers = parse_servers(inv.globals);
  opts.facade = role_of(inv.command);
  opts.timeout = parse_timeout(inv.globals);
  opts.tls = tls.on();
  cli_config cfg{tls};
  caf::actor_system sys{cfg};
  client::client api{sys, opts};
  session s{api, opts.timeout, label_of(opts.servers)};
  return act ? act(s) : watch(s, sys);
}

} // namespace

namespace chargeonce {

int run_cli(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    std::cout << usage_text;
    return exit_ok;
  }
  try {
    auto inv = parse_args(argc, argv);
    parse_servers(inv.globals); // usage errors before anything connects
    parse_timeout(inv.globals);
    parse_tls(inv.globals);
    auto act = prepare(inv);
    if (inv.command == "watch") {
      auto signals = watch_signals();
      pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    }
    return run(inv, act);
  } catch (const usage_error& e) {
    return report_usage(e.what());
  }
}

} // namespace chargeonce
