// SPDX-License-Identifier: Apache-2.0
// Client-side batching: operations of many calling threads headed for the
// same server travel as one message. Nothing waits for a batch to fill: an
// operation is sent with whatever else is queued for its server as soon as
// fewer than batches_in_flight_max batches are on the way there.
#pragma once

#include "protocol/batch.hpp"

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <caf/timespan.hpp>

#include <functional>
#include <future>
#include <memory>

namespace chargeonce::client {

struct batcher_options {
  caf::timespan timeout = std::chrono::seconds(15); ///< per batch request
  size_t batches_in_flight_max = 4; ///< per server: keeps the pipe full
  /// Operations per batch message; never above the server's wire limit,
  /// batch_message_operations_max (a larger value is lowered to it).
  size_t batch_operations_max = 256;
};

/// Owns one actor that sends the batches; safe to use from many threads.
class batcher {
public:
  batcher(caf::actor_system& sys, batcher_options opts);
  ~batcher();
  batcher(const batcher&) = delete;
  batcher& operator=(const batcher&) = delete;

  /// Queues `op` for the server behind `to` (a connection that offers
  /// atom::batch); the future holds the server's outcome, or the CAF error
  /// that failed the whole batch (lost connection, timeout).
  std::future<outcome> submit(const caf::actor& to, operation op);

  /// The same, answered by calling `done` once on the sender's thread
  /// (never inside submit). If the batcher is destroyed first, `done` is
  /// destroyed uncalled.
  void submit(const caf::actor& to, operation op,
              std::function<void(outcome)> done);

  /// Batches sent and the operations they held, since construction.
  struct totals {
    uint64_t batches = 0;
    uint64_t operations = 0;
  };
  totals sent() const;

  struct state;

private:
  std::shared_ptr<state> state_;
  caf::actor sender_;
};

} // namespace chargeonce::client
