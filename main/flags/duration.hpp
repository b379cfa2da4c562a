// SPDX-License-Identifier: Apache-2.0
// Durations on the command line of every program, in the syntax the server
// takes for its own durations (CAF's): 1500ms, 90s, 3min, 1h, also ns and us.
// A bare number stays what the tools always took: seconds.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace chargeonce {

/// The accepted forms, for --help and for error messages.
extern const char* const duration_forms;

/// `text` as a duration in [low, high]; throws usage_error naming --`name`
/// and the accepted forms. Refuses what the server would read differently
/// from how it looks (010s is octal to CAF: 8 s) or cannot hold (a signed
/// 64-bit count of nanoseconds, about 292 years).
std::chrono::nanoseconds parse_duration(const std::string& name,
                                        const std::string& text,
                                        std::chrono::nanoseconds low,
                                        std::chrono::nanoseconds high);

/// parse_duration() for options counted in whole seconds: refuses a
/// duration such as 1500ms instead of rounding it.
int64_t parse_duration_seconds(const std::string& name, const std::string& text,
                               int64_t low, int64_t high);

/// `x` in the largest unit that holds it exactly (90s, 1500ms, 3min, 1h), a
/// form parse_duration() and the server both take.
std::string duration_text(std::chrono::nanoseconds x);

} // namespace chargeonce
