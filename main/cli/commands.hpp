// SPDX-License-Identifier: Apache-2.0
// chargeonce-cli's commands: one table says, per command, the flags it
// takes, the facade it connects to, its line in the usage text and how its
// request is built. Parsing, the usage text and dispatch all read it.
#pragma once

#include "client/client.hpp"
#include "main/cli/args.hpp"
#include "main/cli/output.hpp"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace chargeonce::cli {

/// One --name=VALUE of a command; `value` is what the usage text shows.
struct flag_spec {
  std::string name;
  std::string value;
};

/// A request ready to go, run once connected; the exit status.
using action = std::function<int(session&)>;

struct command {
  std::string name;
  std::vector<flag_spec> required;
  std::vector<flag_spec> optional;
  /// The facade it needs: the CLI connects with that role's interface,
  /// which the all-roles --port offers as well.
  client::role role;
  std::string help; ///< one line for the usage text
  /// Reads the flags into an action, before anything connects, so that a
  /// bad value is a usage error; throws usage_error.
  std::function<action(const flag_map&)> prepare;
  /// Runs until SIGINT/SIGTERM, which must then be blocked in every thread
  /// before the actor system starts (watch).
  bool until_signal = false;
};

/// Every command, in the order of the usage text.
const std::vector<command>& commands();

/// The entry named `name`, or nullptr.
const command* find_command(std::string_view name);

/// gateway, worker, admin or all.
const char* name_of(client::role x);

/// What --help prints; a usage error prints it on stderr.
const std::string& usage_text();

} // namespace chargeonce::cli
