// SPDX-License-Identifier: Apache-2.0
#include "tools/chaos/sql_retry.hpp"

#include "protocol/errors.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>

namespace chargeonce::chaos {

namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return text;
}

bool says_any(const caf::error& err, std::initializer_list<const char*> xs) {
  auto text = lower(error_message(err));
  return std::any_of(xs.begin(), xs.end(), [&](const char* x) {
    return text.find(x) != std::string::npos;
  });
}

} // namespace

bool primary_moved(const caf::error& err) {
  if (err != ec::storage_unavailable)
    return false;
  return says_any(err, {
                         // libpq and libpqxx: no connection, or it broke
                         "connection to server",
                         "server closed the connection",
                         "could not connect",
                         "no connection to",
                         "connection to database failed",
                         "connection lost",
                         "broken connection",
                         // 57P01 … 57P03
                         "terminating connection",
                         "the database system is",
                         // 25006, and a node that target_session_attrs
                         // refused
                         "read-only transaction",
                         "session is read-only",
                         // a commit's wait for the standby cut short
                         "wait for synchronous replication",
                       });
}

bool key_taken(const caf::error& err) {
  return err == ec::storage_unavailable
         && says_any(err, {"duplicate key value violates unique constraint"});
}

void log_retry(const std::string& what, int attempt, const caf::error& err) {
  spdlog::warn("chaos: {} again (attempt {}): {}", what, attempt + 1,
               error_message(err));
}

} // namespace chargeonce::chaos
