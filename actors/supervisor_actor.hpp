// SPDX-License-Identifier: Apache-2.0
// The supervisor: root of the server's actors. Spawns and restarts the
// persistence pool, owns the registry and the event bus, and sweeps
// reservations left behind by dead workers.
#pragma once

#include "actors/chat_actor.hpp"
#include "actors/events_actor.hpp"
#include "actors/liveness.hpp"
#include "actors/persistence_actor.hpp"
#include "actors/registry_actor.hpp"
#include "protocol/interfaces.hpp"
#include "protocol/type_ids.hpp"

#include <caf/actor_clock.hpp>
#include <caf/replies_to.hpp>
#include <caf/response_promise.hpp>
#include <caf/typed_actor.hpp>

#include <chrono>
#include <cstdint>
#include <vector>

namespace chargeonce {

/// The root of the server: owns the pool, the registry, the event bus and
/// the scheduled scans. `sweep` runs one full sweep now and answers how many
/// reservations it released; `reactivate` runs one reactivation scan now and
/// answers how many chats it refilled; `api` hands out the published API for
/// callers in this process (a facade over the registry); `core` hands out
/// the registry, over which the server builds the facades it publishes;
/// `ping` is answered by the registry, so only while both still run. A scan
/// still running when the supervisor stops fails its callers with
/// `request_receiver_down` at once.
using supervisor_actor =
  caf::typed_actor<caf::replies_to<atom::sweep>::with<uint64_t>,
                   caf::replies_to<atom::reactivate>::with<uint64_t>,
                   caf::replies_to<atom::api>::with<api_actor>,
                   caf::replies_to<atom::core>::with<core_actor>,
                   ping_signature>;

/// Persistence actors serving chats, by default: the server's connections.
inline constexpr size_t default_connections = 1;

struct supervisor_options {
  size_t connections = default_connections;
  chat_options chat;
  caf::timespan sweep_interval = std::chrono::seconds(60);
  uint32_t sweep_chunk_rows = 100; ///< reservations per keyset page
  caf::timespan reactivation_interval = std::chrono::hours(1);
  uint32_t reactivation_chunk_rows = 1000; ///< chats refilled per page
  events_options events; ///< the event bus (it reads on the sweeper's store)
  caf::timespan restart_backoff_min = std::chrono::milliseconds(100);
  caf::timespan restart_backoff_max = std::chrono::seconds(10);
};

/// Adds the supervisor's own timers: the sweep tick, the reactivation tick
/// and a restart.
using supervisor_self_actor =
  supervisor_actor::extend<caf::reacts_to<caf::tick_atom>,
                           caf::reacts_to<atom::reactivate, caf::tick_atom>,
                           caf::reacts_to<atom::store, uint64_t>>;

/// One kind of scheduled scan in progress, and who waits for its end.
struct scan_state {
  bool running = false;
  uint64_t count = 0;                         ///< released / refilled so far
  std::vector<caf::response_promise> waiters; ///< callers asking for a run
};

struct supervisor_state {
  static inline const char* name = "supervisor";
  persistence_factory factory;
  supervisor_options options;
  /// connections chat partitions, then one member for the sweeper's own
  /// scans (so a long scan never delays a chat's transaction), and last one
  /// for the event bus's reads of the events table.
  std::vector<persistence_actor> pool;
  std::vector<caf::timespan> backoff; ///< next restart delay
  std::vector<caf::actor_clock::time_point> last_restart; ///< resets backoff
  registry_actor registry;
  /// The published API for callers in this process, relaying to `registry`.
  api_facade_actor api;
  events_actor events;
  scan_state sweep;        ///< releasing reservations past their deadline
  scan_state reactivation; ///< refilling quiet chats

  /// No caller of a scan waits for its timeout, however the supervisor ends
  /// (a kill skips the exit handler).
  ~supervisor_state();
};

supervisor_self_actor::behavior_type
make_supervisor(supervisor_self_actor::stateful_pointer<supervisor_state> self,
                persistence_factory factory, supervisor_options options);

} // namespace chargeonce
