// SPDX-License-Identifier: Apache-2.0
// What chargeonce-cli prints and the exit status that goes with it: one
// JSON object per answer on stdout, a readable line on stderr for people.
#pragma once

#include "client/client.hpp"
#include "protocol/json.hpp"

#include <caf/expected.hpp>
#include <caf/fwd.hpp>

#include <string>

namespace chargeonce::cli {

constexpr int exit_ok = 0;
constexpr int exit_service = 1;    ///< the server said no
constexpr int exit_usage = 2;      ///< bad command line
constexpr int exit_connection = 2; ///< no server, no answer

/// The client library over the listed servers, and how to name them.
struct session {
  client::client& api;
  caf::actor_system& sys; ///< for watch's local event printer
  caf::timespan timeout;
  std::string label; ///< the servers, for messages
};

/// One JSON object on one line, flushed (a pipe sees each line at once).
void print_line(const nlohmann::json& x);

/// {"error":"connection",...} on stdout and the reason on stderr.
int report_connection(const std::string& what);

/// A service error as its JSON object (exit 1), with advice(code) on stderr
/// for the codes that have one (storage_unavailable: retry with the same
/// ids; internal: a bug, not retried); anything else as a connection error
/// (exit 2).
int report_failure(const session& s, const caf::error& err);

/// Prints an answer, or reports why there is none; the exit status.
template <class T>
int print_result(const session& s, const caf::expected<T>& x) {
  if (!x)
    return report_failure(s, x.error());
  print_line(to_json(*x));
  return exit_ok;
}

} // namespace chargeonce::cli
