// SPDX-License-Identifier: Apache-2.0
// What the HTTP adapter's routes share: the facades they call, the limits
// they enforce, and one request in flight. Internal to main/http_*.cpp.
#pragma once

#include "actors/liveness.hpp"
#include "protocol/interfaces.hpp"

#include <caf/scoped_actor.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace httplib {
struct Request;
struct Response;
} // namespace httplib

namespace chargeonce::http {

/// Who may call a route; `open` needs no token (health and metrics).
enum class role : uint8_t { open = 0, gateway = 1, worker = 2, admin = 3 };

const char* to_string(role x);

/// The last Postgres check of /readyz: probes within `ready_cache_duration`
/// share it, so a flood of unauthenticated probes opens at most one
/// connection a second. The actors are asked on every probe (a message, no
/// connection), so a dead core is never hidden behind a cached answer.
struct readiness_cache {
  std::mutex mtx; ///< also serializes the checks themselves
  std::chrono::steady_clock::time_point checked_at;
  bool checked = false;
  bool ready = false;
  std::string reason;
  std::mutex actors_mtx;     ///< not held during any check
  std::string actors_reason; ///< the last actor failure, logged once
};

/// The scoped actors the billing routes ask their facades from, each used
/// by one request at a time and kept for the next: a scoped actor made per
/// request cost a spawn and its teardown on every request. They die with
/// the backend, after the HTTP pool's threads and before the actor system.
class requesters {
public:
  /// An idle requester, or a new one.
  std::unique_ptr<caf::scoped_actor> take(caf::actor_system& sys);
  /// Keeps `x` for the next request. One whose request timed out is not
  /// given back: its late answer would stay in its mailbox.
  void give_back(std::unique_ptr<caf::scoped_actor> x);

private:
  std::mutex mtx_;
  std::vector<std::unique_ptr<caf::scoped_actor>> idle_;
};

/// The server side of every route: handles, limits and shared state. Lives
/// as long as the httplib server that calls the routes.
struct backend {
  caf::actor_system* sys = nullptr;
  /// The same facades as the CAF role ports: each relays only its role's
  /// operations to the registry.
  gateway_actor gateway;
  worker_actor worker;
  admin_actor admin;
  /// One CAF request per HTTP request waits at most this long; longer than
  /// the chat actors' store-timeout so that they answer first.
  caf::timespan request_timeout = std::chrono::seconds(15);
  std::string dsn;     ///< for /readyz
  liveness_actor core; ///< for /readyz: answers while the registry runs
  /// Bearer tokens by role (index = role); empty: that role's routes are off.
  std::array<std::string, 4> tokens;
  size_t streams_max = 4;         ///< concurrent /v1/events streams
  size_t stream_buffer_max = 256; ///< events queued per stream before a drop
  std::atomic<size_t> streams{0}; ///< open /v1/events streams
  readiness_cache readiness;
  requesters asking; ///< declared last: destroyed before the handles above
};

/// One request in flight.
struct exchange {
  backend& be;
  const httplib::Request& req;
  const std::string& body; ///< read by server.cpp, at most http-max-body
  httplib::Response& res;
  std::map<std::string, std::string> params; ///< path parameters by name
};

} // namespace chargeonce::http
