// SPDX-License-Identifier: Apache-2.0
// What both metrics suites need from rendered text: a strict validator of
// Prometheus' text format 0.0.4 (GET /metrics must parse) and a reader of
// one series' value.
#pragma once

#include <string>

namespace chargeonce::test {

/// Empty when `text` is valid exposition format; else the first problem,
/// with its line.
std::string validate(const std::string& text);

/// The value of one series in rendered text (`name{labels}` exactly as
/// rendered), or -1 when it is absent.
double value_of(const std::string& text, const std::string& series);

/// The series of chargeonce_operations_total for `op` and `outcome`.
std::string ops(const char* op, const char* outcome);

/// The series of one chargeonce_operation_duration_seconds bucket.
std::string duration_bucket(const char* op, const char* le);

} // namespace chargeonce::test
