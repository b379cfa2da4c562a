// SPDX-License-Identifier: Apache-2.0
// How much of what others send an actor ends up in the log. Any peer on the
// network can send an actor a message it does not expect, as large and as
// often as it likes: the log lines that causes are bounded in size (an
// excerpt) and in number (per peer and window), so a hostile client cannot
// fill the disk or drown everyone else's lines.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace chargeonce {

/// At most `bytes_max` bytes of `text` (cut at a UTF-8 boundary, followed by
/// "... (N bytes)" when cut), with control characters shown as \xNN so a
/// message cannot forge log lines.
std::string log_excerpt(std::string_view text, size_t bytes_max);

/// Decides which of a peer's messages get a log line: at most
/// `lines_per_window_max` per peer per `window`; the rest are counted and
/// reported as one "suppressed" line. Tracks at most `peers_max` peers; while
/// that many are in their window, every further peer shares the entry
/// `other_peers`, so a hostile set of peers cannot grow it without bound.
/// Not thread-safe: one per actor, whose handlers run one at a time.
class log_limiter {
public:
  using clock = std::chrono::steady_clock;

  struct limits {
    size_t lines_per_window_max = 10;
    clock::duration window = std::chrono::minutes(1);
    size_t peers_max = 64;
  };

  struct verdict {
    bool log = false;        ///< write this message's line
    uint64_t suppressed = 0; ///< not logged in the peer's last window: say so
  };

  /// The entry every peer beyond `peers_max` shares.
  static inline const std::string other_peers = "other-peers";

  explicit log_limiter(limits lim) : limits_(lim) {}
  log_limiter() : log_limiter(limits{}) {}

  /// One message from `peer` at `now`.
  verdict admit(const std::string& peer, clock::time_point now);

  /// The counts not reported yet, by peer, and forgets them: for a last
  /// "suppressed" line when the actor ends.
  std::vector<std::pair<std::string, uint64_t>> take_suppressed();

  /// Peers tracked now, `other_peers` included.
  size_t peers() const { return entries_.size(); }

private:
  struct entry {
    clock::time_point window_start;
    size_t lines = 0;
    uint64_t suppressed = 0;
  };

  entry& entry_of(const std::string& peer, clock::time_point now);

  limits limits_;
  std::unordered_map<std::string, entry> entries_;
};

} // namespace chargeonce
