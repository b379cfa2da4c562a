// SPDX-License-Identifier: Apache-2.0
// ISO 8601 timestamps as the CLI and logs show them.
#pragma once

#include <caf/optional.hpp>
#include <caf/timestamp.hpp>

#include <cstdint>
#include <string>

namespace chargeonce {

/// "2026-11-30T13:07:01.123456Z" (UTC, microseconds).
std::string format_iso8601(caf::timestamp t);

/// Accepts YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS[.f+]] with Z or ±HH:MM (no zone
/// means UTC); none for anything else.
caf::optional<caf::timestamp> parse_iso8601(const std::string& text);

/// Microseconds since the epoch, the form timestamps take in SQL.
int64_t to_unix_micros(caf::timestamp t);
caf::timestamp from_unix_micros(int64_t us);

} // namespace chargeonce
