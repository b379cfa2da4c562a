// SPDX-License-Identifier: Apache-2.0
// Every billing operation as one Postgres transaction. Blocking: call it
// from a detached actor or a test thread, never from CAF's scheduler.
#pragma once

#include "protocol/types.hpp"

#include <caf/expected.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace chargeonce::persistence {

struct store_options {
  std::string dsn; ///< libpq connection string
  /// Postgres cancels a statement (lock waits included) after this long, so
  /// a stuck query becomes storage_unavailable instead of a hang.
  std::chrono::milliseconds statement_timeout{5000};
};

/// One connection, (re)opened lazily. Errors are typed chargeonce::ec values:
/// business outcomes (busy, not_found, ...) as such, every other failure
/// (lost connection, timeout, unexpected SQL error) as storage_unavailable.
/// A result is returned only after its transaction committed.
class store {
public:
  explicit store(store_options opts);
  ~store();
  store(const store&) = delete;
  store& operator=(const store&) = delete;

  caf::expected<chat_status> create_chat(const chat_spec& spec);

  /// Locks the chat row, decides the pockets, inserts the reservation. The
  /// UNIQUE (chat_id) violation, recognised by SQLSTATE 23505, is busy.
  caf::expected<reservation> reserve(chat_id chat, kind k,
                                     const std::string& request_id);

  /// queued -> in_progress; starting an in_progress one again returns it.
  caf::expected<reservation> start(chat_id chat, reservation_id id);

  /// Subtracts exactly the held amounts (clamped at 0) under the chat row's
  /// lock, writes the ledger row and deletes the reservation. Committing a
  /// committed reservation returns the first receipt and charges nothing.
  caf::expected<receipt> commit(chat_id chat, reservation_id id);

  /// Deletes the reservation whatever its status; returns what it held.
  caf::expected<reservation> fail(chat_id chat, reservation_id id);

  /// Deletes the chat's reservation if still queued; too_late otherwise.
  caf::expected<reservation> cancel(chat_id chat);

  caf::expected<chat_status> status(chat_id chat);

  /// The server process id of the current connection (0 if none); lets tests
  /// kill exactly this backend.
  int backend_pid() const;

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace chargeonce::persistence
