// SPDX-License-Identifier: Apache-2.0
// The bounded queue between a /v1/events subscriber actor (producer) and the
// httplib thread writing the stream (consumer).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string>

namespace chargeonce::http {

/// SSE frames waiting for the stream's thread, at most `frames_max`. One
/// more sets `overflow` instead of growing: the stream then ends, because
/// a client that far behind would only get ever staler events.
struct stream_queue {
  explicit stream_queue(size_t max) : frames_max(max) {}

  std::mutex mtx;
  std::condition_variable cv;
  std::deque<std::string> frames;
  size_t frames_max;
  bool overflow = false; ///< the client fell behind: the stream ends
  bool ended = false;    ///< the event bus cut the subscription off

  /// The last frame was pushed: the stream ends after writing it.
  void end() {
    {
      std::lock_guard<std::mutex> guard{mtx};
      ended = true;
    }
    cv.notify_one();
  }

  /// Called by the subscriber actor; never blocks it for long.
  void push(std::string frame) {
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (frames.size() >= frames_max)
        overflow = true;
      else
        frames.push_back(std::move(frame));
    }
    cv.notify_one();
  }
};

} // namespace chargeonce::http
