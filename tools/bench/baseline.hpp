// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench's baseline: the same billing design without actors or
// batching, written as fast as one transaction per operation can be — each
// operation one prepared statement (one round trip, one synchronous commit)
// on the client's own connection. The answers are chargeonce's: the same
// pockets, busy from the same UNIQUE (chat_id, slot) index (one job per
// chat, in slot 0), the same refusals and the same idempotent commit.
#pragma once

#include "protocol/types.hpp"

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include <memory>
#include <string>

namespace chargeonce::bench {

/// One client's connection and its prepared statements. The calls have the
/// names and answers of persistence::store's, so that the bench drives both
/// alike. Blocking; one thread at a time.
class baseline_store {
public:
  explicit baseline_store(std::string dsn);
  ~baseline_store();
  baseline_store(const baseline_store&) = delete;
  baseline_store& operator=(const baseline_store&) = delete;

  /// Locks the chat row, decides the pockets and inserts the reservation in
  /// one statement; busy when the index already holds one for the chat.
  caf::expected<reservation> reserve(chat_id chat, const kind& k,
                                     const std::string& request_id);

  /// queued -> in_progress.
  caf::expected<reservation> start(chat_id chat, reservation_id id);

  /// Takes the held amounts (clamped at zero), writes the ledger row and
  /// deletes the reservation in one statement; a repeated commit returns
  /// the first receipt.
  caf::expected<receipt> commit(chat_id chat, reservation_id id);

  /// Deletes the reservation whatever its status.
  caf::expected<reservation> fail(chat_id chat, reservation_id id);

  /// Deletes the chat's reservation if still queued.
  caf::expected<reservation> cancel(chat_id chat);

  /// Opens the connection and prepares every statement, so that neither is
  /// measured.
  caf::error connect();

  /// connect(), then the Postgres backend's process id (0 when Postgres
  /// cannot be reached), whose CPU time the bench reads from /proc.
  int connect_backend();

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace chargeonce::bench
