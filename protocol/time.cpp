// SPDX-License-Identifier: Apache-2.0
#include "protocol/time.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <regex>

namespace chargeonce {

int64_t to_unix_micros(caf::timestamp t) {
  using namespace std::chrono;
  return duration_cast<microseconds>(t.time_since_epoch()).count();
}

caf::timestamp from_unix_micros(int64_t us) {
  return caf::timestamp{std::chrono::microseconds{us}};
}

std::string format_iso8601(caf::timestamp t) {
  auto us = to_unix_micros(t);
  auto secs = static_cast<time_t>(us / 1000000);
  auto frac = us % 1000000;
  if (frac < 0) { // floor division for times before 1970
    frac += 1000000;
    --secs;
  }
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96]; // roomy: the compiler cannot bound tm_year
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ",
                tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                tm.tm_min, tm.tm_sec, static_cast<long>(frac));
  return buf;
}

caf::optional<caf::timestamp> parse_iso8601(const std::string& text) {
  static const std::regex re{
    R"(^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?(Z|[+-]\d{2}:\d{2})?$)"};
  std::smatch m;
  if (!std::regex_match(text, m, re))
    return caf::none;
  auto num = [&](int i) {
    return m[i].matched ? std::stoi(m[i].str()) : 0;
  };
  std::tm tm{};
  tm.tm_year = num(1) - 1900;
  tm.tm_mon = num(2) - 1;
  tm.tm_mday = num(3);
  tm.tm_hour = num(4);
  tm.tm_min = num(5);
  tm.tm_sec = num(6);
  if (tm.tm_mon < 0 || tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31
      || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
    return caf::none;
  auto day_before = tm.tm_mday;
  auto secs = timegm(&tm);
  if (tm.tm_mday != day_before) // timegm normalized e.g. Feb 30
    return caf::none;
  int64_t us = static_cast<int64_t>(secs) * 1000000;
  if (m[7].matched) {
    auto digits = m[7].str();
    digits.resize(6, '0');
    us += std::stoll(digits.substr(0, 6));
  }
  if (m[8].matched && m[8].str() != "Z") {
    auto zone = m[8].str();
    int64_t offset =
      std::stoi(zone.substr(1, 2)) * 3600 + std::stoi(zone.substr(4, 2)) * 60;
    us -= (zone[0] == '+' ? 1 : -1) * offset * 1000000;
  }
  return from_unix_micros(us);
}

} // namespace chargeonce
