// SPDX-License-Identifier: Apache-2.0
#include "main/cli/args.hpp"

#include "main/cli/commands.hpp"
#include "main/flags/duration.hpp"
#include "protocol/errors.hpp"
#include "protocol/time.hpp"

#include <algorithm>

namespace chargeonce::cli {

namespace {

constexpr auto timeout_default = std::chrono::seconds{15};
constexpr auto timeout_min = std::chrono::seconds{1};
constexpr auto timeout_max = std::chrono::hours{24};

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

bool takes(const std::vector<flag_spec>& xs, const std::string& name) {
  return std::any_of(xs.begin(), xs.end(),
                     [&](const flag_spec& x) { return x.name == name; });
}

void set_command(invocation& inv, const std::string& arg) {
  if (inv.cmd != nullptr)
    throw usage_error("unexpected argument '" + arg + "' (command is '"
                      + inv.cmd->name + "')");
  inv.cmd = find_command(arg);
  if (inv.cmd == nullptr)
    throw usage_error("unknown command '" + arg + "'");
}

bool is_repeatable(const std::string& name) {
  return name == "pocket";
}

void add_flag(invocation& inv, const std::string& arg) {
  auto [name, value] = split_flag(arg);
  auto& target = is_global(name) ? inv.globals : inv.flags;
  auto [at, added] = target.emplace(name, value);
  if (added)
    return;
  if (!is_repeatable(name))
    throw usage_error("--" + name + " given twice");
  at->second += "\n" + value;
}

void check_flags(const invocation& inv) {
  const auto& cmd = *inv.cmd;
  for (const auto& [name, value] : inv.flags)
    if (!takes(cmd.required, name) && !takes(cmd.optional, name))
      throw usage_error(cmd.name + " does not take --" + name);
  for (const auto& flag : cmd.required)
    if (inv.flags.count(flag.name) == 0)
      throw usage_error(cmd.name + " needs --" + flag.name);
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

caf::timespan parse_timeout(const flag_map& globals) {
  auto i = globals.find("timeout");
  if (i == globals.end())
    return timeout_default;
  return parse_duration("timeout", i->second, timeout_min, timeout_max);
}

/// Mutual TLS towards role ports published with --tls-cert/--tls-key/--tls-ca.
client::tls_files parse_tls(const flag_map& globals) {
  client::tls_files out{text_flag(globals, "ca"), text_flag(globals, "cert"),
                        text_flag(globals, "key")};
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

} // namespace

bool wants_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h")
      return true;
  }
  return false;
}

invocation parse_args(int argc, char** argv) {
  invocation inv;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind('-', 0) == 0)
      add_flag(inv, arg);
    else
      set_command(inv, arg);
  }
  if (inv.cmd == nullptr)
    throw usage_error("missing command");
  check_flags(inv);
  return inv;
}

connection_flags parse_connection(const flag_map& globals) {
  connection_flags out;
  out.servers = parse_servers(globals);
  out.timeout = parse_timeout(globals);
  out.tls = parse_tls(globals);
  return out;
}

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
    throw usage_error("--kind must be a kind of the server's catalog "
                      "([a-z][a-z0-9_]{0,31}), got '"
                      + text + "'");
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

std::vector<std::string> list_flag(const flag_map& flags,
                                   const std::string& name) {
  std::vector<std::string> out;
  auto i = flags.find(name);
  if (i == flags.end())
    return out;
  size_t from = 0;
  for (auto nl = i->second.find('\n'); nl != std::string::npos;
       from = nl + 1, nl = i->second.find('\n', from))
    out.push_back(i->second.substr(from, nl - from));
  out.push_back(i->second.substr(from));
  return out;
}

void pocket_flags(const flag_map& flags, pockets& out) {
  for (const auto& value : list_flag(flags, "pocket")) {
    auto eq = value.find('=');
    auto name = value.substr(0, eq);
    if (eq == std::string::npos || !is_catalog_name(name))
      throw usage_error("--pocket must be NAME=N with NAME a pocket name "
                        "([a-z][a-z0-9_]{0,31}), got '"
                        + value + "'");
    auto listed = std::any_of(out.items().begin(), out.items().end(),
                              [&](const auto& x) { return x.first == name; });
    if (listed)
      throw usage_error("pocket " + name + " given twice");
    out.set(name, int_value<int32_t>("pocket=" + name, value.substr(eq + 1)));
  }
}

std::string text_flag(const flag_map& flags, const std::string& name) {
  auto i = flags.find(name);
  return i == flags.end() ? std::string{} : i->second;
}

} // namespace chargeonce::cli
