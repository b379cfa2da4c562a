// SPDX-License-Identifier: Apache-2.0
// The servers the asynchronous-call suites talk to: a real one whose
// all-roles port passes through a gate that can hold its answers, and ports
// that refuse connections or never finish CAF's handshake.
#pragma once

#include "persistence/store.hpp"
#include "protocol/interfaces.hpp"
#include "tests/support/test_db.hpp"
#include "tests/support/threaded_server.hpp"

#include <caf/all.hpp>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace chargeonce::test {

// -- a facade that can hold its answers ---------------------------------------

/// Every role's operations and batches, relayed to the server's real
/// facade; `close` holds what arrives from then on (the test decides when it
/// goes on), `open` relays what was held and everything after.
using gate_actor =
  api_facade_actor::extend<caf::replies_to<caf::close_atom>::with<bool>,
                           caf::reacts_to<caf::open_atom>>;

/// What the gate saw, for the test thread.
struct gate_log {
  std::mutex mtx;
  std::condition_variable cv;
  size_t operations = 0;                     ///< received (batched or not)
  std::vector<std::vector<chat_id>> batches; ///< the chats of each batch

  void arrived(size_t n, std::vector<chat_id> batch, bool is_batch) {
    std::lock_guard<std::mutex> guard{mtx};
    operations += n;
    if (is_batch)
      batches.push_back(std::move(batch));
    cv.notify_all();
  }

  /// Waits until at least `n` operations arrived.
  bool wait_for(size_t n, std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> guard{mtx};
    return cv.wait_for(guard, timeout, [&] { return operations >= n; });
  }

  size_t received() {
    std::lock_guard<std::mutex> guard{mtx};
    return operations;
  }
};

struct gate_state {
  bool hold = false;
  std::vector<std::function<void()>> held;
};

using gate_pointer = gate_actor::stateful_pointer<gate_state>;

/// The gate in front of `inner`; `log` sees what arrives.
gate_actor::behavior_type make_gate(gate_pointer self, api_facade_actor inner,
                                    std::shared_ptr<gate_log> log);

// -- ports that do not answer -------------------------------------------------

/// A port on 127.0.0.1 nobody listens on: connecting fails at once.
uint16_t closed_port();

/// A port whose connections the kernel accepts (into the backlog) and that
/// never says a word: a connect waits for CAF's handshake until it times
/// out.
struct mute_listener {
  int fd = -1;
  uint16_t port = 0;

  mute_listener();
  ~mute_listener();

  mute_listener(const mute_listener&) = delete;
  mute_listener& operator=(const mute_listener&) = delete;
};

// -- the fixture --------------------------------------------------------------

/// One server on real threads and Postgres, published on a gateway port, a
/// worker port and (through the gate) an all-roles port.
struct gate_fixture {
  threaded_server server{store_options()};
  persistence::store setup{store_options()}; ///< the tests' own connection
  uint16_t gateway_port = server.publish(0, make_gateway);
  uint16_t worker_port = server.publish(0, make_worker);
  std::shared_ptr<gate_log> log = std::make_shared<gate_log>();
  gate_actor gate; ///< set by publish_gate
  uint16_t gate_port = publish_gate();

  gate_fixture();

  /// Publishes the gate in front of a fresh facade; its port (0: failed).
  uint16_t publish_gate();

  /// From now on, the gate holds what it receives.
  void close_gate();

  /// The gate relays what it held and everything after (never blocks).
  void open_gate();

  /// A fresh chat with `initial` pockets.
  chat_id make_chat(pockets initial);
};

} // namespace chargeonce::test
