// SPDX-License-Identifier: Apache-2.0
// chargeonce-cli: sends one request to a chargeonce-server and prints the
// answer as one JSON line. Exit status: 0 success, 1 service error (the
// server said no), 2 usage or connection error.
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
  R"(usage: chargeonce-cli --server=HOST:PORT [--timeout=SECONDS]
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
  return name == "server" || name == "timeout" || name == "tls" || name == "ca"
         || name == "cert" || name == "key";
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
  if (inv.globals.count("server") == 0)
    throw usage_error("missing --server=HOST:PORT");
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

/// Where the server listens.
struct endpoint {
  std::string host;
  uint16_t port = 0;

  std::string label() const { return host + ':' + std::to_string(port); }
};

endpoint parse_server(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    throw usage_error("--server must be HOST:PORT, got '" + text + "'");
  endpoint out{text.substr(0, colon), 0};
  if (out.host.size() > 2 && out.host.front() == '[' && out.host.back() == ']')
    out.host = out.host.substr(1, out.host.size() - 2); // [::1]:4242
  out.port = parse_int<uint16_t>("server port", text.substr(colon + 1));
  if (out.port == 0)
    throw usage_error("--server port must not be 0");
  return out;
}

caf::timespan parse_timeout(const flag_map& globals) {
  auto secs = int_flag<int64_t>(globals, "timeout", default_timeout_seconds);
  if (secs < 1 || secs > max_timeout_seconds)
    throw usage_error("--timeout must be between 1 and "
                      + std::to_string(max_timeout_seconds) + " seconds");
  return std::chrono::seconds{secs};
}

std::string seconds_text(caf::timespan t) {
  return std::to_string(t / std::chrono::seconds{1}) + " s";
}

// -- requests -----------------------------------------------------------------

/// A connected server and how long to wait for its answers.
struct session {
  caf::actor_system& sys;
  caf::actor api; ///< the role's facade (or the whole API), interface checked
  caf::timespan timeout;
  std::string label;
};

int report_failure(const session& s, const caf::error& err) {
  if (err.category() == caf::atom(error_category_name)) {
    print_line(to_json(err));
    return exit_service;
  }
  if (err == caf::sec::request_timeout)
    return report_connection("no answer from " + s.label + " within "
                             + seconds_text(s.timeout));
  return report_connection(s.label + ": " + s.sys.render(err));
}

/// Sends one request and prints its answer; returns the exit status.
template <class Result, class... Ts>
int ask(const session& s, const Ts&... xs) {
  caf::scoped_actor self{s.sys};
  int rc = exit_ok;
  self->request(s.api, s.timeout, xs...)
    .receive([](const Result& x) { print_line(to_json(x)); },
             [&](caf::error& err) { rc = report_failure(s, err); });
  return rc;
}

/// A request ready to go: flags are checked before connecting.
using action = std::function<int(const session&)>;

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
  return [spec](const session& s) {
    return ask<chat_status>(s, atom::create_v, spec);
  };
}

action prepare_reserve(const flag_map& flags) {
  auto chat = chat_flag(flags);
  auto k = kind_flag(flags);
  auto i = flags.find("request-id");
  auto request_id = i == flags.end() ? std::string{} : i->second;
  return [=](const session& s) {
    return ask<reservation>(s, atom::reserve_v, chat, k, request_id);
  };
}

/// start, commit and fail: one reservation of one chat.
template <class Result, class Atom>
action prepare_step(const flag_map& flags, Atom op) {
  auto chat = chat_flag(flags);
  auto id = reservation_flag(flags);
  return [=](const session& s) {
    return ask<Result>(s, op, chat, id);
  };
}

/// cancel and status: the chat alone.
template <class Result, class Atom>
action prepare_chat(const flag_map& flags, Atom op) {
  auto chat = chat_flag(flags);
  return [=](const session& s) {
    return ask<Result>(s, op, chat);
  };
}

/// Set when the watched server went away; read after sigwait returns.
std::atomic<bool> server_lost{false};

/// Prints every event as one JSON line (`std::endl` flushes, so a pipe sees
/// each line as it happens). The server going down ends the watch.
caf::behavior event_printer(caf::event_based_actor* self, caf::actor api) {
  self->monitor(api);
  self->set_down_handler([](caf::down_msg&) {
    server_lost = true;
    kill(getpid(), SIGTERM);
  });
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

/// Subscribes a local printer and waits for SIGINT/SIGTERM (exit 0) or the
/// server going away (exit 2).
int watch(const session& s) {
  auto printer = s.sys.spawn(event_printer, s.api);
  caf::scoped_actor self{s.sys};
  bool subscribed = false;
  caf::error failure;
  self->request(s.api, s.timeout, atom::subscribe_v, printer)
    .receive([&](bool ok) { subscribed = ok; },
             [&](caf::error& err) { failure = std::move(err); });
  if (!subscribed) {
    caf::anon_send_exit(printer, caf::exit_reason::user_shutdown);
    return failure ? report_failure(s, failure)
                   : report_connection("subscription refused");
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

action prepare_top_up(const flag_map& flags) {
  auto chat = chat_flag(flags);
  // int64: an amount beyond the balance's range reaches the server, which
  // names the limit, instead of failing to parse here.
  auto credits = int_flag<int64_t>(flags, "credits");
  auto payment_id = flags.at("payment-id");
  return [=](const session& s) {
    return ask<top_up_receipt>(s, atom::top_up_v, chat, credits, payment_id);
  };
}

action prepare_set_premium(const flag_map& flags) {
  auto chat = chat_flag(flags);
  auto until = *time_flag(flags, "until");
  return [=](const session& s) {
    return ask<chat_status>(s, atom::premium_v, chat, until);
  };
}

action prepare_set_flags(const flag_map& flags) {
  auto chat = chat_flag(flags);
  flags_update x{bool_flag(flags, "started"), bool_flag(flags, "blocked"),
                 bool_flag(flags, "banned")};
  return [=](const session& s) {
    return ask<chat_status>(s, atom::flags_v, chat, x);
  };
}

action prepare(const invocation& inv) {
  const auto& cmd = inv.command;
  const auto& f = inv.flags;
  if (cmd == "create-chat")
    return prepare_create(f);
  if (cmd == "reserve")
    return prepare_reserve(f);
  if (cmd == "start")
    return prepare_step<reservation>(f, atom::start_v);
  if (cmd == "heartbeat")
    return prepare_step<reservation>(f, atom::heartbeat_v);
  if (cmd == "watch")
    return watch;
  if (cmd == "commit")
    return prepare_step<receipt>(f, atom::commit_v);
  if (cmd == "fail")
    return prepare_step<reservation>(f, atom::fail_v);
  if (cmd == "cancel")
    return prepare_chat<reservation>(f, atom::cancel_v);
  if (cmd == "touch")
    return prepare_chat<chat_status>(f, atom::touch_v);
  if (cmd == "top-up")
    return prepare_top_up(f);
  if (cmd == "set-premium")
    return prepare_set_premium(f);
  if (cmd == "set-flags")
    return prepare_set_flags(f);
  return prepare_chat<chat_status>(f, atom::status_v);
}

// -- main ---------------------------------------------------------------------

/// CAF never sees argv: its parser rejects options it does not know.
/// Mutual TLS towards role ports published with --tls-cert/--tls-key/--tls-ca.
struct tls_files {
  std::string ca;
  std::string cert;
  std::string key;

  bool on() const { return !ca.empty(); }
};

tls_files parse_tls(const flag_map& globals) {
  auto get = [&](const char* name) {
    auto i = globals.find(name);
    return i == globals.end() ? std::string{} : i->second;
  };
  tls_files out{get("ca"), get("cert"), get("key")};
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

struct cli_config : caf::actor_system_config {
  explicit cli_config(const tls_files& tls) {
    register_protocol(*this);
    load<caf::io::middleman>();
    if (tls.on()) {
      load<caf::openssl::manager>();
      set("openssl.cafile", tls.ca);
      set("openssl.certificate", tls.cert);
      set("openssl.key", tls.key);
    }
    set("scheduler.max-threads", 2);
    // The server sends a heartbeat every second: a frozen or unreachable
    // server ends a watch (exit 2) instead of leaving it silently deaf.
    set("middleman.heartbeat-interval", caf::timespan{std::chrono::seconds(1)});
    set("middleman.connection-timeout", caf::timespan{std::chrono::seconds(5)});
  }
};

/// Which facade a command needs: it connects with that role's interface,
/// which the all-in-one --port also satisfies.
enum class role { gateway, worker, admin };

role role_of(const std::string& command) {
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

bool offers(caf::actor_system& sys, role r, const std::set<std::string>& ifs) {
  switch (r) {
  case role::gateway:
    return sys.assignable<gateway_actor>(ifs);
  case role::worker:
    return sys.assignable<worker_actor>(ifs);
  default:
    return sys.assignable<admin_actor>(ifs);
  }
}

/// What `middleman::remote_actor<Role>` does, but bounded by `timeout`:
/// remote_actor waits forever for a peer that accepts TCP and never answers
/// the handshake (e.g. a stopped server).
caf::expected<caf::actor> connect(caf::actor_system& sys,
                                  const endpoint& target, role r, bool tls,
                                  caf::timespan timeout) {
  caf::expected<caf::actor> out{caf::sec::none};
  caf::scoped_actor self{sys};
  auto manager =
    tls ? sys.openssl_manager().actor_handle() : sys.middleman().actor_handle();
  self->request(manager, timeout, caf::connect_atom_v, target.host, target.port)
    .receive(
      [&](const caf::node_id&, caf::strong_actor_ptr& ptr,
          const std::set<std::string>& ifs) {
        if (!ptr)
          out = caf::make_error(caf::sec::no_actor_published_at_port);
        else if (!offers(sys, r, ifs))
          out = caf::make_error(caf::sec::unexpected_actor_messaging_interface,
                                "this port does not offer the command's role");
        else
          out = caf::actor_cast<caf::actor>(std::move(ptr));
      },
      [&](caf::error& err) { out = std::move(err); });
  return out;
}

int run(const endpoint& target, role r, const tls_files& tls,
        caf::timespan timeout, const action& act) {
  cli_config cfg{tls};
  caf::actor_system sys{cfg};
  auto api = connect(sys, target, r, tls.on(), timeout);
  if (!api && api.error() == caf::sec::request_timeout)
    return report_connection("no handshake from " + target.label() + " within "
                             + seconds_text(timeout));
  if (!api)
    return report_connection("cannot connect to " + target.label() + ": "
                             + sys.render(api.error()));
  return act(session{sys, *api, timeout, target.label()});
}

} // namespace

int main(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    std::cout << usage_text;
    return exit_ok;
  }
  try {
    auto inv = parse_args(argc, argv);
    auto target = parse_server(inv.globals.at("server"));
    auto timeout = parse_timeout(inv.globals);
    auto tls = parse_tls(inv.globals);
    auto act = prepare(inv);
    if (inv.command == "watch") {
      auto signals = watch_signals();
      pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    }
    return run(target, role_of(inv.command), tls, timeout, act);
  } catch (const usage_error& e) {
    return report_usage(e.what());
  }
}
