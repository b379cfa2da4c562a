// SPDX-License-Identifier: Apache-2.0
// The C++ client library for gateways, workers and tools: routes every chat
// to its home server by rendezvous hashing, reconnects, and fails over only
// the operations that are safe to repeat.
#pragma once

#include "client/routing.hpp"
#include "protocol/types.hpp"

#include <caf/expected.hpp>
#include <caf/fwd.hpp>
#include <caf/timespan.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace chargeonce::client {

/// Which interface the listed ports offer: one role's facade, or all roles
/// (the server's --port).
enum class role { gateway, worker, admin, all };

/// Certificates for mutual TLS (see scripts/dev-certs).
struct tls_files {
  std::string ca;
  std::string cert;
  std::string key;

  bool on() const { return !ca.empty(); }
};

/// What every client's actor system needs: our message types, the
/// middleman (and OpenSSL with `tls`), heartbeats so that a silent server
/// is noticed in seconds rather than at each request's timeout, and the
/// sharing scheduler for latency. Call it before parsing the application's
/// own settings, which then override these.
void prepare_config(caf::actor_system_config& cfg, const tls_files& tls = {});

struct options {
  std::vector<endpoint> servers;
  role facade = role::all;
  caf::timespan timeout = std::chrono::seconds(15); ///< connect and request
  bool tls = false; ///< the system was prepared with tls_files
  /// Operations of concurrent callers headed for one server share a message
  /// (touch, reserve, cancel, status, start, heartbeat, commit, fail), on
  /// servers that offer it. Nothing waits for a batch to fill.
  bool batching = true;
};

/// Blocking calls, safe to use from several threads. Service errors (busy,
/// not_found, …) come back as they are; connection errors are CAF's (sec).
/// On a connection error, reserve with a request_id, start, heartbeat,
/// commit, fail, status, touch, top-up, set-premium and set-flags are tried
/// on the chat's next server; create-chat, cancel and a reserve without a
/// request_id are not (a repeat could answer differently).
class client {
public:
  client(caf::actor_system& sys, options opts);
  ~client();
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  caf::expected<chat_status> touch(chat_id chat);
  caf::expected<reservation> reserve(chat_id chat, kind k,
                                     const std::string& request_id);
  caf::expected<reservation> cancel(chat_id chat);
  caf::expected<chat_status> status(chat_id chat);

  caf::expected<reservation> start(chat_id chat, reservation_id id);
  caf::expected<reservation> heartbeat(chat_id chat, reservation_id id);
  caf::expected<receipt> commit(chat_id chat, reservation_id id);
  caf::expected<reservation> fail(chat_id chat, reservation_id id);

  caf::expected<chat_status> create(const chat_spec& spec);
  caf::expected<top_up_receipt> top_up(chat_id chat, int64_t credits,
                                       const std::string& payment_id);
  caf::expected<chat_status> set_premium(chat_id chat, caf::timestamp until);
  caf::expected<chat_status> set_flags(chat_id chat, const flags_update& x);

  /// Subscribes `who` on every server (each publishes its own chats'
  /// events); how many servers accepted. `who` is monitored by this client:
  /// the returned count drops to the servers still connected.
  caf::expected<size_t> subscribe(const caf::actor& who);

  /// Fires when a connected server goes away (for long-lived watchers).
  void on_server_lost(std::function<void(const endpoint&)> f);

  /// Where `chat`'s requests go first.
  const endpoint& home(chat_id chat) const;

  /// How many batch messages this client sent and how many operations they
  /// held (both 0 with batching off).
  std::pair<uint64_t, uint64_t> batches_sent() const;

  struct impl;

private:
  std::unique_ptr<impl> impl_;
};

} // namespace chargeonce::client
