// SPDX-License-Identifier: Apache-2.0
// chargeonce-cli's command line: COMMAND and --name=value flags in any
// order, split into the global flags and the command's own, and the typed
// values read from them. Every mistake is a usage_error naming the flag.
#pragma once

#include "client/client.hpp"
#include "main/flags/flags.hpp"
#include "protocol/types.hpp"

#include <caf/optional.hpp>
#include <caf/timestamp.hpp>

#include <charconv>
#include <map>
#include <string>
#include <vector>

namespace chargeonce::cli {

struct command;

/// Each flag's value; a repeatable flag (--pocket) holds its values one per
/// line, in the order given.
using flag_map = std::map<std::string, std::string>;

/// The command line, split and checked against the command's flags, its
/// values not yet read.
struct invocation {
  const command* cmd = nullptr; ///< an entry of commands()
  flag_map globals;             ///< --server, --timeout, --tls, ...
  flag_map flags;               ///< the command's own
};

/// --help or -h anywhere.
bool wants_help(int argc, char** argv);

/// Splits argv; refuses an unknown command, a flag the command does not
/// take and a required flag it lacks.
invocation parse_args(int argc, char** argv);

/// How to reach the servers: the global flags, read.
struct connection_flags {
  std::vector<client::endpoint> servers;
  caf::timespan timeout;
  client::tls_files tls;
};

/// Reads --server(s), --timeout and the TLS flags, in this order.
connection_flags parse_connection(const flag_map& globals);

// -- flag values --------------------------------------------------------------

/// `text` as a T; the messages the CLI has always given.
template <class T>
T int_value(const std::string& name, const std::string& text) {
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
  return i == flags.end() ? fallback : int_value<T>(name, i->second);
}

/// A repeatable flag's values, in the order given; empty when not given.
std::vector<std::string> list_flag(const flag_map& flags,
                                   const std::string& name);

/// --pocket=NAME=N, repeatable, added to `out`; a pocket `out` already
/// lists (e.g. from --balance) is given twice. Whether the server's catalog
/// has the pocket is for the server to say.
void pocket_flags(const flag_map& flags, pockets& out);

/// --name=true|false, or none when not given.
caf::optional<bool> bool_flag(const flag_map& flags, const std::string& name);

/// --kind=text|image (required).
kind kind_flag(const flag_map& flags);

/// --name=ISO8601, or none when not given.
caf::optional<caf::timestamp> time_flag(const flag_map& flags,
                                        const std::string& name);

/// --name's value, or empty when not given.
std::string text_flag(const flag_map& flags, const std::string& name);

} // namespace chargeonce::cli
