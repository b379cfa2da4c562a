// SPDX-License-Identifier: Apache-2.0
#include "protocol/errors.hpp"

#include <caf/atom.hpp>
#include <caf/message.hpp>
#include <caf/sec.hpp>

#include <array>
#include <atomic>

namespace chargeonce {

namespace {

constexpr std::array<const char*, 17> names = {
  "none",
  "busy",
  "insufficient_messages",
  "insufficient_images",
  "not_found",
  "too_late",
  "invalid_state",
  "invalid_argument",
  "storage_unavailable",
  "chat_blocked",
  "chat_banned",
  "already_exists",
  "expired",
  "overloaded",
  "internal",
  "insufficient_funds",
  "already_started",
};

static_assert(names.size() == static_cast<size_t>(ec::already_started) + 1,
              "every ec code needs its name, in code order");

} // namespace

const char* to_string(ec x) {
  auto i = static_cast<size_t>(x);
  return i < names.size() ? names[i] : "unknown";
}

bool from_string(const std::string& name, ec& out) {
  for (size_t i = 1; i < names.size(); ++i)
    if (name == names[i]) {
      out = static_cast<ec>(i);
      return true;
    }
  return false;
}

const char* advice(ec x) {
  switch (x) {
  case ec::storage_unavailable:
    return "the operation may or may not have been written (it can still "
           "commit): retry with the same ids (reserve with the same "
           "request_id, commit with the same reservation)";
  case ec::overloaded:
    return "nothing was done: retry later, preferably after a delay";
  case ec::internal:
    return "a bug in the server, logged there under the id the message "
           "names: the operation may or may not have been written; it is not "
           "retried "
           "automatically (check with status before retrying with the same "
           "ids)";
  default:
    return "";
  }
}

uint64_t next_incident_id() {
  static std::atomic<uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

std::string error_message(const caf::error& err) {
  const auto& ctx = err.context();
  if (ctx.size() == 1 && ctx.match_element<std::string>(0))
    return ctx.get_as<std::string>(0);
  return ctx.empty() ? std::string{} : caf::to_string(ctx);
}

std::string error_name(const caf::error& err) {
  if (err.category() == caf::atom(error_category_name))
    return to_string(static_cast<ec>(err.code()));
  if (err.category() == caf::atom("system"))
    return caf::to_string(static_cast<caf::sec>(err.code()));
  return caf::to_string(err);
}

} // namespace chargeonce
