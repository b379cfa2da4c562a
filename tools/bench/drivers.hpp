// SPDX-License-Identifier: Apache-2.0
// chargeonce-bench's drivers: one client thread's way to the service —
// the client library (remote), the actors in this process (in-process), or
// one Postgres transaction per operation (baseline).
#pragma once

#include "client/client.hpp"
#include "protocol/interfaces.hpp"
#include "protocol/types.hpp"

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace chargeonce::bench {

template <class T>
caf::error error_of(const caf::expected<T>& x) {
  return x ? caf::error{} : x.error();
}

/// Blocking calls of one client thread; made on that thread.
class driver {
public:
  virtual ~driver() = default;
  virtual caf::expected<reservation_id> reserve(chat_id chat) = 0;
  virtual caf::error start(chat_id chat, reservation_id id) = 0;
  virtual caf::error commit(chat_id chat, reservation_id id) = 0;
  virtual caf::error fail(chat_id chat, reservation_id id) = 0;
  virtual caf::error cancel(chat_id chat) = 0;
  /// Opens connections before the clock starts.
  virtual void connect(chat_id) {}
};

using driver_factory = std::function<std::unique_ptr<driver>()>;

/// The client side of remote mode: an actor system of its own and the client
/// library on it, kept for all runs of one invocation.
class remote_session {
public:
  explicit remote_session(const std::vector<client::endpoint>& servers);
  ~remote_session();
  client::client& api() { return *api_; }

private:
  std::unique_ptr<caf::actor_system_config> cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  std::unique_ptr<client::client> api_;
};

/// Through the client library, shared by all threads as a gateway would.
std::unique_ptr<driver> make_remote_driver(client::client& api);

/// Straight to the registry in this process: one scoped actor per thread.
std::unique_ptr<driver> make_in_process_driver(caf::actor_system& sys,
                                               api_actor api);

/// The design without actors: each operation one prepared statement, its
/// own transaction, from the caller's thread; one connection per client
/// (baseline.hpp).
std::unique_ptr<driver> make_baseline_driver(const std::string& dsn);

} // namespace chargeonce::bench
