// SPDX-License-Identifier: Apache-2.0
// The client's shared state, private to client/: connections and failover
// (connections.cpp), the blocking calls (blocking.cpp) and the asynchronous
// ones (async_calls.cpp).
#pragma once

#include "client/batcher.hpp"
#include "client/client.hpp"
#include "client/retry.hpp"
#include "protocol/batch.hpp"

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/error.hpp>
#include <caf/optional.hpp>
#include <caf/sec.hpp>

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace chargeonce::client {

/// A connection, and whether its endpoint takes batches.
struct connected {
  caf::actor handle;
  bool batches = false;
};

/// What an operation sent on its way runs with its outcome.
using answer_fn = std::function<void(outcome)>;

/// What `remote_actor` does, but bounded by `timeout`: remote_actor waits
/// forever for a peer that accepts TCP and never finishes the handshake.
caf::expected<connected> connect(caf::actor_system& sys, const endpoint& to,
                                 role r, bool tls, caf::timespan timeout);

/// The same without blocking: `then` runs on an actor of its own.
void connect_async(caf::actor_system& sys, const endpoint& to, role r, bool tls,
                   caf::timespan timeout,
                   std::function<void(caf::expected<connected>)> then);

/// True for the server's answers (busy, not_found, …), which are final:
/// only connection errors move a call on to the chat's next server.
bool is_service_error(const caf::error& err);

/// A batchable operation without a kind or request_id.
inline operation operation_of(operation_type type, chat_id chat,
                              reservation_id id = 0) {
  return {type, chat, id, kind::text, {}};
}

/// A worker's operation naming the worker.
inline operation of_worker(operation_type type, chat_id chat, reservation_id id,
                           const std::string& worker) {
  auto op = operation_of(type, chat, id);
  op.worker = worker;
  return op;
}

// -- from a batch's outcome to the caller's type ------------------------------

/// The value an operation's outcome carries for the caller's type.
template <class T>
caf::expected<T> value_of(outcome&& x, caf::optional<T> outcome::*member) {
  if (x.error)
    return std::move(x.error);
  if (!(x.*member))
    return caf::make_error(caf::sec::unexpected_response,
                           "the batch answer lacks the operation's value");
  return std::move(*(x.*member));
}

/// Administration never travels in a batch (its calls pass no operation).
template <class T>
caf::expected<T> from_outcome(outcome&&, T*) {
  return caf::make_error(caf::sec::unexpected_response,
                         "this operation does not travel in batches");
}

inline caf::expected<reservation> from_outcome(outcome&& x, reservation*) {
  return value_of(std::move(x), &outcome::reservation);
}

inline caf::expected<receipt> from_outcome(outcome&& x, receipt*) {
  return value_of(std::move(x), &outcome::receipt);
}

inline caf::expected<chat_status> from_outcome(outcome&& x, chat_status*) {
  return value_of(std::move(x), &outcome::status);
}

// -- state shared with the watcher actor --------------------------------------

struct client::impl : std::enable_shared_from_this<client::impl> {
  caf::actor_system& sys;
  options opts;
  std::mutex mtx;
  std::vector<caf::actor> connections; ///< by server index; null: none yet
  std::vector<bool> batches;           ///< by server index: takes batches
  std::unique_ptr<batcher> batching;   ///< null when batching is off
  std::function<void(const endpoint&)> lost;
  caf::actor watcher; ///< monitors connections, forgets the dead ones

  impl(caf::actor_system& sys, options opts);

  // -- connections (connections.cpp) -----------------------------------------

  /// Called by the watcher: the server at `addr` went away.
  void forget(const caf::actor_addr& addr);

  /// A call met a connection error on `server`: the next one reconnects.
  void forget(size_t server);

  /// The server's connection, connecting first (blocking) if there is none.
  caf::expected<caf::actor> connection(size_t server);

  /// A fresh connection becomes the server's, watched for going away.
  void adopt(size_t server, const connected& fresh);

  /// True if operations for `server` go through the batcher.
  bool takes_batches(size_t server);

  // -- blocking calls (blocking.cpp) -----------------------------------------

  /// A hot-path operation, `xs` its request when it travels alone.
  template <class T, class... Ts>
  caf::expected<T> call(const operation& op, const Ts&... xs);

  /// Administration of `chat`: always a request of its own.
  template <class T, class... Ts>
  caf::expected<T> call_admin(operation_type type, chat_id chat,
                              const Ts&... xs);

  /// Sends to the chat's home; on a connection error, forgets that
  /// connection and, if `may_retry`, tries the chat's next server. `op`,
  /// when given, lets the operation travel in a batch.
  template <class T, class... Ts>
  caf::expected<T> call_ranked(chat_id chat, bool may_retry,
                               const caf::optional<operation>& op,
                               const Ts&... xs);

  /// One operation through the batcher: shares a message with whatever
  /// other threads send to the same server meanwhile.
  template <class T>
  caf::expected<T> batched(const caf::actor& to, const operation& op);

  /// One request of its own.
  template <class T, class... Ts>
  caf::expected<T> single(const caf::actor& to, const Ts&... xs);

  // -- asynchronous calls (async_calls.cpp) ----------------------------------

  struct async_call;
  using call_ptr = std::shared_ptr<async_call>;

  /// Starts `op` on its way through the chat's servers; `then` gets the
  /// answer on one of the client's threads.
  template <class T>
  void async(operation op, continuation<T> then);

  /// Answers `then` with `err`, which the client found itself, on one of
  /// the client's threads as any other answer.
  template <class T>
  void refuse(caf::error err, continuation<T> then);

  /// Tries the call's next server, connecting first if needed; answers
  /// with the last error once no server is left to try.
  void dispatch(const call_ptr& c);

  /// Sends the call to `to`; a connection error forgets that connection and
  /// moves on to the chat's next server, as the blocking calls do.
  void send_async(const call_ptr& c, size_t server, const caf::actor& to,
                  bool batch);
};

} // namespace chargeonce::client
