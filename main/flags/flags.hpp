// SPDX-License-Identifier: Apache-2.0
// Command-line pieces shared by chargeonce-cli, chargeonce-bench and
// chargeonce-chaos (durations: duration.hpp).
#pragma once

#include <charconv>
#include <stdexcept>
#include <string>

namespace chargeonce {

/// A mistake on the command line (exit 2).
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// `text` as an integer in [low, high], or a usage_error naming --`name`.
template <class T>
T parse_int(const std::string& name, const std::string& text, T low, T high) {
  T out{};
  auto last = text.data() + text.size();
  auto res = std::from_chars(text.data(), last, out);
  if (text.empty() || res.ec != std::errc{} || res.ptr != last || out < low
      || out > high)
    throw usage_error("--" + name + " must be an integer in "
                      + std::to_string(low) + ".." + std::to_string(high)
                      + ", got '" + text + "'");
  return out;
}

} // namespace chargeonce
