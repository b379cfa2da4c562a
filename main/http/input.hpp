// SPDX-License-Identifier: Apache-2.0
// Reading path parameters and JSON bodies. Every helper throws input_error
// (400 malformed JSON, 422 wrong type or value) before any actor is asked,
// so bad input changes nothing.
#pragma once

#include "main/http/context.hpp"
#include "protocol/types.hpp"

#include <caf/optional.hpp>
#include <caf/timestamp.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <string>

namespace chargeonce::http {

/// The path parameter `name` as a 64-bit integer (422 otherwise).
int64_t path_int(const exchange& x, const char* name);

/// The query parameter `name` as an integer within [lo, hi]; `fallback`
/// when absent (422 otherwise).
int64_t query_int(const exchange& x, const char* name, int64_t lo, int64_t hi,
                  int64_t fallback);

/// The body as a JSON object whose keys are all in `allowed` (a misspelt
/// field is a 422, not silently ignored).
nlohmann::json body_object(const exchange& x,
                           std::initializer_list<const char*> allowed);

/// An integer field within [lo, hi]; `fallback` when absent (none: required).
int64_t int_field(const nlohmann::json& obj, const char* name, int64_t lo,
                  int64_t hi, caf::optional<int64_t> fallback = caf::none);

/// An integer field within [lo, hi] that may be null (none). Absent: none
/// unless `required` (then 422).
caf::optional<int64_t> nullable_int_field(const nlohmann::json& obj,
                                          const char* name, int64_t lo,
                                          int64_t hi, bool required);

/// A string field; `fallback` when absent (none: required).
std::string string_field(const nlohmann::json& obj, const char* name,
                         caf::optional<std::string> fallback = caf::none);

/// An object of pocket name to amount (0 to 2^31-1), e.g. "pockets":
/// {"daily_voice": 2}, added to `out`; absent: `out` unchanged. A pocket
/// `out` already lists (a top-level field) is a 422: given twice. Whether
/// the catalog has the pocket is for the store to say.
void pockets_field(const nlohmann::json& obj, const char* name, pockets& out);

/// A boolean field, none when absent.
caf::optional<bool> bool_field(const nlohmann::json& obj, const char* name);

/// An ISO 8601 timestamp field, none when absent or null unless required.
caf::optional<caf::timestamp> time_field(const nlohmann::json& obj,
                                         const char* name, bool required);

} // namespace chargeonce::http
