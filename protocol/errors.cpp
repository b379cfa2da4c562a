// SPDX-License-Identifier: Apache-2.0
#include "protocol/errors.hpp"

#include <caf/atom.hpp>
#include <caf/message.hpp>
#include <caf/sec.hpp>

#include <array>

namespace chargeonce {

namespace {

constexpr std::array<const char*, 14> names = {
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
};

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
