// SPDX-License-Identifier: Apache-2.0
// The C++ client library for gateways, workers and tools: routes every chat
// to its home server by rendezvous hashing, reconnects, and fails over only
// the operations that are safe to repeat.
#pragma once

#include "client/routing.hpp"
#include "protocol/history.hpp"
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

/// What an asynchronous call runs with its answer. It runs exactly once, on
/// one of the client's own threads and never inside the call that issued
/// it, so it may issue further asynchronous calls. It must not block: the
/// client's threads answer every caller (a blocking call of this client
/// made from a continuation can wait forever). A call still pending when
/// the client is destroyed gets sec::request_receiver_down (one still
/// connecting to its server: once the connect gave up, within `timeout`).
template <class T>
using continuation = std::function<void(caf::expected<T>)>;

/// Blocking calls, safe to use from several threads, and asynchronous
/// variants of the hot path (touch, reserve, cancel, status, start,
/// heartbeat, commit, fail: same names, a continuation instead of a return
/// value), which park no thread while they wait. Both kinds share batches.
/// Service errors (busy, not_found, …) come back as they are; connection
/// errors are CAF's (sec). On a connection error, reserve, start,
/// heartbeat, commit, fail, status, touch, top-up, set-premium and
/// set-flags are tried on the chat's next server; create-chat and cancel
/// are not (a repeat could answer differently): client/retry.hpp says why
/// for each. A reserve without a request_id gets one of the client's own
/// ("auto:…", make_auto_request_id), the same on its retries; where the
/// chat's limit is above 1 the server still asks for the caller's own.
class client {
public:
  client(caf::actor_system& sys, options opts);
  ~client();
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  caf::expected<chat_status> touch(chat_id chat);
  caf::expected<reservation> reserve(chat_id chat, const kind& k,
                                     const std::string& request_id);
  /// A job of `units` units at most (1 to units_max; 0 is
  /// invalid_argument: the form without units holds one).
  caf::expected<reservation> reserve(chat_id chat, const kind& k,
                                     const std::string& request_id,
                                     int32_t units);
  caf::expected<reservation> cancel(chat_id chat);
  /// Cancels the job named by `id` or (id 0) by `request_id`.
  caf::expected<reservation> cancel(chat_id chat, reservation_id id,
                                    const std::string& request_id);
  caf::expected<chat_status> status(chat_id chat);

  caf::expected<reservation> start(chat_id chat, reservation_id id);
  caf::expected<reservation> heartbeat(chat_id chat, reservation_id id);
  caf::expected<receipt> commit(chat_id chat, reservation_id id);
  /// Charges `units` of the hold (1 or more; 0 is invalid_argument: the
  /// form without units charges all of it, and a job that did nothing
  /// fails) and releases the rest.
  caf::expected<receipt> commit(chat_id chat, reservation_id id, int32_t units);
  caf::expected<reservation> fail(chat_id chat, reservation_id id);

  /// The same, naming the worker (any string it chooses for this attempt,
  /// e.g. its queue job id and attempt; at most 256 bytes): the first start
  /// records it, and once the job runs a call naming another worker is
  /// already_started, so that a job the queue delivered twice runs once.
  /// Retried on the next server with the same worker.
  caf::expected<reservation> start(chat_id chat, reservation_id id,
                                   const std::string& worker);
  caf::expected<reservation> heartbeat(chat_id chat, reservation_id id,
                                       const std::string& worker);
  caf::expected<receipt> commit(chat_id chat, reservation_id id,
                                const std::string& worker);
  caf::expected<receipt> commit(chat_id chat, reservation_id id, int32_t units,
                                const std::string& worker);
  caf::expected<reservation> fail(chat_id chat, reservation_id id,
                                  const std::string& worker);

  /// The provider call timed out: outcome_unknown until resolve.
  caf::expected<reservation> uncertain(chat_id chat, reservation_id id,
                                       const std::string& provider_ref);
  caf::expected<reservation> uncertain(chat_id chat, reservation_id id,
                                       const std::string& provider_ref,
                                       const std::string& worker);
  /// "succeeded" (charged as a commit of all held) or "failed".
  caf::expected<resolution> resolve(chat_id chat, reservation_id id,
                                    const std::string& outcome);
  /// "succeeded", charged as a commit of `units` (1 or more; 0 is
  /// invalid_argument).
  caf::expected<resolution> resolve(chat_id chat, reservation_id id,
                                    const std::string& outcome, int32_t units);
  /// Jobs of unknown outcome of every chat after id `after`, by id.
  caf::expected<unresolved_page> unresolved(reservation_id after,
                                            uint32_t limit);

  /// One page of the chat's history, newest first: `limit` ledger rows
  /// below ledger id `before` (0: the newest), reservations merged in.
  caf::expected<history_page> history(chat_id chat, int64_t before,
                                      uint32_t limit);
  /// What support needs of the chat, in one answer.
  caf::expected<chat_explanation> explain(chat_id chat);

  void touch(chat_id chat, continuation<chat_status> then);
  void reserve(chat_id chat, const kind& k, const std::string& request_id,
               continuation<reservation> then);
  void reserve(chat_id chat, const kind& k, const std::string& request_id,
               int32_t units, continuation<reservation> then);
  void cancel(chat_id chat, continuation<reservation> then);
  void cancel(chat_id chat, reservation_id id, const std::string& request_id,
              continuation<reservation> then);
  void status(chat_id chat, continuation<chat_status> then);

  void start(chat_id chat, reservation_id id, continuation<reservation> then);
  void heartbeat(chat_id chat, reservation_id id,
                 continuation<reservation> then);
  void commit(chat_id chat, reservation_id id, continuation<receipt> then);
  void commit(chat_id chat, reservation_id id, int32_t units,
              continuation<receipt> then);
  void fail(chat_id chat, reservation_id id, continuation<reservation> then);
  void start(chat_id chat, reservation_id id, const std::string& worker,
             continuation<reservation> then);
  void heartbeat(chat_id chat, reservation_id id, const std::string& worker,
                 continuation<reservation> then);
  void commit(chat_id chat, reservation_id id, const std::string& worker,
              continuation<receipt> then);
  void commit(chat_id chat, reservation_id id, int32_t units,
              const std::string& worker, continuation<receipt> then);
  void fail(chat_id chat, reservation_id id, const std::string& worker,
            continuation<reservation> then);

  caf::expected<chat_status> create(const chat_spec& spec);
  caf::expected<top_up_receipt> top_up(chat_id chat, int64_t credits,
                                       const std::string& payment_id);
  /// Voids a grant named by id (payment_id empty) or by its top-up's
  /// payment_id (grant 0); answers the grant after the void.
  caf::expected<grant_info> void_grant(chat_id chat, int64_t grant,
                                       const std::string& payment_id);
  /// A top-up whose grant has `terms`: an expiry, a priority, a source.
  caf::expected<top_up_receipt> top_up(chat_id chat, int64_t credits,
                                       const std::string& payment_id,
                                       const grant_terms& terms);
  caf::expected<chat_status> set_premium(chat_id chat, caf::timestamp until);
  caf::expected<chat_status> set_flags(chat_id chat, const flags_update& x);
  /// The chat's own limit of active jobs; none: its plan's again.
  caf::expected<chat_status> set_limits(chat_id chat,
                                        caf::optional<int32_t> max_active_jobs);
  /// The chat's limits that `x` sets: its limit of active jobs and its
  /// balance-low threshold (none: the server's balance-low-threshold).
  caf::expected<chat_status> set_limits(chat_id chat, const limits_update& x);

  /// Subscribes `who` on every server; how many servers accepted. Every
  /// server sends every durable event (they read one events table), so
  /// `who` gets each once per server: deduplicate by event id. `who` is
  /// monitored by this client: the returned count drops to the servers
  /// still connected.
  caf::expected<size_t> subscribe(const caf::actor& who);
  /// The same, first replaying every kept event after id `after` (the last
  /// one `who` handled, e.g. before a restart or a subscription_ended).
  caf::expected<size_t> subscribe(const caf::actor& who, event_id after);

  /// Fires when a connected server goes away (for long-lived watchers).
  void on_server_lost(std::function<void(const endpoint&)> f);

  /// Where `chat`'s requests go first.
  const endpoint& home(chat_id chat) const;

  /// How many batch messages this client sent and how many operations they
  /// held (both 0 with batching off).
  std::pair<uint64_t, uint64_t> batches_sent() const;

  struct impl;

private:
  caf::expected<size_t> subscribe_after(const caf::actor& who,
                                        caf::optional<event_id> after);

  /// Shared: pending asynchronous calls keep a weak reference to it.
  std::shared_ptr<impl> impl_;
};

} // namespace chargeonce::client
