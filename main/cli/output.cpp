// SPDX-License-Identifier: Apache-2.0
#include "main/cli/output.hpp"

#include "main/flags/duration.hpp"
#include "protocol/errors.hpp"

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/sec.hpp>

#include <iostream>

namespace chargeonce::cli {

namespace {

/// "15 s" as the CLI always wrote whole seconds; finer timeouts in the
/// unit they were given in.
std::string timeout_text(caf::timespan t) {
  if (t % std::chrono::seconds{1} == caf::timespan{0})
    return std::to_string(t / std::chrono::seconds{1}) + " s";
  return duration_text(t);
}

} // namespace

void print_line(const nlohmann::json& x) {
  std::cout << x.dump() << std::endl;
}

int report_connection(const std::string& what) {
  print_line({{"error", "connection"}, {"message", what}});
  std::cerr << "chargeonce-cli: connection error: " << what << '\n';
  return exit_connection;
}

int report_failure(const session& s, const caf::error& err) {
  if (err.category() == caf::atom(error_category_name)) {
    print_line(to_json(err));
    // Where the answer leaves the outcome open, people get told what to do.
    if (const char* what_now = advice(static_cast<ec>(err.code()));
        *what_now != '\0')
      std::cerr << "chargeonce-cli: " << error_name(err) << ": " << what_now
                << '\n';
    return exit_service;
  }
  if (err == caf::sec::request_timeout)
    return report_connection("no answer from " + s.label + " within "
                             + timeout_text(s.timeout));
  return report_connection("cannot reach " + s.label + ": "
                           + caf::to_string(err));
}

} // namespace chargeonce::cli
