// SPDX-License-Identifier: Apache-2.0
// The rendering half of the process-wide metrics: Prometheus' text
// exposition format, served by the HTTP adapter on GET /metrics. It reads
// the series while actors keep recording into them (relaxed atomics), which
// Prometheus tolerates: a scrape is a snapshot of no single instant.
#pragma once

#include <string>
#include <string_view>

namespace chargeonce::metrics {

/// Every metric of this process, in Prometheus text format 0.0.4.
std::string render();

/// The Content-Type header that goes with render().
inline constexpr const char* content_type =
  "text/plain; version=0.0.4; charset=utf-8";

namespace detail {

/// Label value escaping of the text format: backslash, double quote and
/// line feed.
std::string escape_label_value(std::string_view x);

/// HELP text escaping: backslash and line feed.
std::string escape_help(std::string_view x);

/// A sample value: integral numbers without exponent, +Inf/-Inf/NaN spelled
/// as Prometheus does.
std::string format_value(double x);

} // namespace detail

} // namespace chargeonce::metrics
