// SPDX-License-Identifier: Apache-2.0
#include "main/http/input.hpp"

#include "main/http/errors.hpp"
#include "protocol/time.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <httplib.h>

namespace chargeonce::http {

namespace {

const nlohmann::json* field(const nlohmann::json& obj, const char* name) {
  auto i = obj.find(name);
  return i == obj.end() ? nullptr : &*i;
}

[[noreturn]] void missing(const char* name) {
  reject(std::string{"missing field '"} + name + "'");
}

} // namespace

int64_t path_int(const exchange& x, const char* name) {
  const auto& text = x.params.at(name);
  int64_t out = 0;
  auto last = text.data() + text.size();
  auto res = std::from_chars(text.data(), last, out);
  if (res.ec != std::errc{} || res.ptr != last)
    reject(std::string{name} + " must be a 64-bit integer, got '" + text + "'");
  return out;
}

int64_t query_int(const exchange& x, const char* name, int64_t lo, int64_t hi,
                  int64_t fallback) {
  if (!x.req.has_param(name))
    return fallback;
  auto text = x.req.get_param_value(name);
  int64_t out = 0;
  auto last = text.data() + text.size();
  auto res = std::from_chars(text.data(), last, out);
  if (res.ec != std::errc{} || res.ptr != last || out < lo || out > hi)
    reject(std::string{name} + " must be an integer between "
           + std::to_string(lo) + " and " + std::to_string(hi) + ", got '"
           + text + "'");
  return out;
}

nlohmann::json body_object(const exchange& x,
                           std::initializer_list<const char*> allowed) {
  // allow_exceptions=false: a parse error is a discarded value, not a throw.
  auto obj = nlohmann::json::parse(x.body, nullptr, false);
  if (obj.is_discarded())
    throw input_error(400, "malformed_json", "the body is not valid JSON");
  if (!obj.is_object())
    reject("the body must be a JSON object");
  for (const auto& item : obj.items()) {
    auto known = std::any_of(allowed.begin(), allowed.end(),
                             [&](auto name) { return item.key() == name; });
    if (!known)
      reject("unknown field '" + item.key() + "'");
  }
  return obj;
}

int64_t int_field(const nlohmann::json& obj, const char* name, int64_t lo,
                  int64_t hi, caf::optional<int64_t> fallback) {
  auto value = field(obj, name);
  if (value == nullptr) {
    if (!fallback)
      missing(name);
    return *fallback;
  }
  // Floats (1.5, 1e3) and strings are refused: an amount is an integer.
  if (!value->is_number_integer())
    reject(std::string{name} + " must be an integer");
  if (value->is_number_unsigned() && value->get<uint64_t>() > uint64_t(hi))
    reject(std::string{name} + " is out of range");
  auto out = value->get<int64_t>();
  if (out < lo || out > hi)
    reject(std::string{name} + " must be between " + std::to_string(lo)
           + " and " + std::to_string(hi));
  return out;
}

void pockets_field(const nlohmann::json& obj, const char* name, pockets& out) {
  auto value = field(obj, name);
  if (value == nullptr)
    return;
  if (!value->is_object())
    reject(std::string{name} + " must be an object of pocket name to amount");
  for (const auto& item : value->items()) {
    const auto& pocket = item.key();
    auto what = std::string{name} + "." + pocket;
    if (!is_catalog_name(pocket))
      reject(what + ": a pocket name is [a-z][a-z0-9_]{0,31}");
    auto listed = std::any_of(out.items().begin(), out.items().end(),
                              [&](const auto& x) { return x.first == pocket; });
    if (listed)
      reject(pocket + " given twice (as a field and in " + name + ")");
    out.set(pocket, static_cast<int32_t>(
                      int_field(*value, pocket.c_str(), 0, INT32_MAX)));
  }
}

caf::optional<int64_t> nullable_int_field(const nlohmann::json& obj,
                                          const char* name, int64_t lo,
                                          int64_t hi, bool required) {
  auto value = field(obj, name);
  if (value == nullptr && required)
    missing(name);
  if (value == nullptr || value->is_null())
    return caf::none;
  return int_field(obj, name, lo, hi);
}

std::string string_field(const nlohmann::json& obj, const char* name,
                         caf::optional<std::string> fallback) {
  auto value = field(obj, name);
  if (value == nullptr) {
    if (!fallback)
      missing(name);
    return *fallback;
  }
  if (!value->is_string())
    reject(std::string{name} + " must be a string");
  return value->get<std::string>();
}

caf::optional<bool> bool_field(const nlohmann::json& obj, const char* name) {
  auto value = field(obj, name);
  if (value == nullptr)
    return caf::none;
  if (!value->is_boolean())
    reject(std::string{name} + " must be true or false");
  return value->get<bool>();
}

caf::optional<caf::timestamp> time_field(const nlohmann::json& obj,
                                         const char* name, bool required) {
  auto value = field(obj, name);
  if (value == nullptr || (value->is_null() && !required)) {
    if (required)
      missing(name);
    return caf::none;
  }
  if (!value->is_string())
    reject(std::string{name} + " must be an ISO 8601 string");
  auto t = parse_iso8601(value->get<std::string>());
  if (!t)
    reject(std::string{name} + " must be an ISO 8601 timestamp, got '"
           + value->get<std::string>() + "'");
  return t;
}

} // namespace chargeonce::http
