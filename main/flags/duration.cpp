// SPDX-License-Identifier: Apache-2.0
#include "main/flags/duration.hpp"

#include "main/flags/flags.hpp"

#include <array>
#include <charconv>
#include <limits>
#include <string_view>

namespace chargeonce {

const char* const duration_forms =
  "a number of seconds (90) or a number with a unit, as the server takes "
  "durations: 1500ms, 90s, 3min, 1h, 30d (also ns, us)";

namespace {

using std::chrono::nanoseconds;

struct unit {
  std::string_view suffix;
  nanoseconds size;
  /// CAF's own parser takes it: duration_text() writes only these, so that
  /// what it prints the server's options take too.
  bool caf = true;
};

/// CAF's timespan suffixes (caf/detail/parser/read_timespan.hpp), largest
/// first for duration_text(); the empty suffix and days are ours.
constexpr std::array<unit, 8> units{{
  {"d", std::chrono::hours{24}, false},
  {"h", std::chrono::hours{1}},
  {"min", std::chrono::minutes{1}},
  {"s", std::chrono::seconds{1}},
  {"", std::chrono::seconds{1}},
  {"ms", std::chrono::milliseconds{1}},
  {"us", std::chrono::microseconds{1}},
  {"ns", nanoseconds{1}},
}};

[[noreturn]] void refuse_form(const std::string& name,
                              const std::string& text) {
  throw usage_error("--" + name + " takes " + duration_forms + ", got '" + text
                    + "'");
}

[[noreturn]] void refuse_range(const std::string& name, const std::string& text,
                               nanoseconds low, nanoseconds high) {
  throw usage_error("--" + name + " must be between " + duration_text(low)
                    + " and " + duration_text(high) + ", got '" + text + "'");
}

const unit* find_unit(std::string_view suffix) {
  for (const auto& u : units)
    if (u.suffix == suffix)
      return &u;
  return nullptr;
}

} // namespace

nanoseconds parse_duration(const std::string& name, const std::string& text,
                           nanoseconds low, nanoseconds high) {
  auto digits = text.find_first_not_of("0123456789");
  auto number = std::string_view{text}.substr(0, digits);
  auto suffix = digits == std::string::npos
                  ? std::string_view{}
                  : std::string_view{text}.substr(digits);
  const auto* u = find_unit(suffix);
  if (number.empty() || u == nullptr)
    refuse_form(name, text);
  if (number.size() > 1 && number.front() == '0')
    throw usage_error("--" + name
                      + " takes no leading 0 (the server's syntax reads it as "
                        "octal: 010s is 8s), got '"
                      + text + "'");
  int64_t count = 0;
  auto res =
    std::from_chars(number.data(), number.data() + number.size(), count);
  if (res.ec == std::errc::result_out_of_range
      || count > std::numeric_limits<int64_t>::max() / u->size.count())
    refuse_range(name, text, low, high);
  auto out = count * u->size;
  if (out < low || out > high)
    refuse_range(name, text, low, high);
  return out;
}

int64_t parse_duration_seconds(const std::string& name, const std::string& text,
                               int64_t low, int64_t high) {
  auto x = parse_duration(name, text, std::chrono::seconds{low},
                          std::chrono::seconds{high});
  if (x % std::chrono::seconds{1} != nanoseconds{0})
    throw usage_error("--" + name + " counts whole seconds, got '" + text
                      + "'");
  return std::chrono::duration_cast<std::chrono::seconds>(x).count();
}

std::string duration_text(nanoseconds x) {
  if (x == nanoseconds{0})
    return "0s";
  for (const auto& u : units)
    if (!u.suffix.empty() && u.caf && x % u.size == nanoseconds{0})
      return std::to_string(x / u.size) + std::string{u.suffix};
  return std::to_string(x.count()) + "ns"; // not reached: 1 ns divides all
}

} // namespace chargeonce
