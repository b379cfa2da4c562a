// SPDX-License-Identifier: Apache-2.0
// A deterministic actor system (no threads, virtual clock) and a fake
// persistence actor that records calls and answers when the test says so.
#pragma once

#include "protocol/config.hpp"
#include "protocol/interfaces.hpp"

#include <caf/all.hpp>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace chargeonce::test {

/// What the fake saw and what it still owes.
struct fake_log {
  std::vector<std::string> calls;         ///< "reserve 42", "cancel 42", ...
  std::deque<std::function<void()>> owed; ///< held answers, oldest first
  bool hold = false;                      ///< keep answers until release()
  caf::strong_actor_ptr last_sender;      ///< the chat actor that asked
};

/// Tells the fake to deliver its oldest held answer (test double only).
using release_atom = caf::atom_constant<caf::atom("release")>;

/// Untyped, so that it also takes release_atom; the registry sees it through
/// a persistence_actor handle.
caf::behavior fake_persistence(caf::event_based_actor* self,
                               std::shared_ptr<fake_log> log);

struct deterministic_config : caf::actor_system_config {
  deterministic_config() {
    register_protocol(*this);
    set("scheduler.policy", caf::atom("testing"));
  }
};

struct deterministic_fixture {
  deterministic_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor self{sys, true};
  caf::scheduler::test_coordinator& sched =
    dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  std::shared_ptr<fake_log> log = std::make_shared<fake_log>();
  caf::actor fake_actor = sys.spawn(fake_persistence, log);
  persistence_actor fake = caf::actor_cast<persistence_actor>(fake_actor);

  /// Delivers the fake's oldest held answer, inside the fake's own context.
  void release() {
    caf::anon_send(fake_actor, release_atom::value);
    sched.run();
  }

  /// Collects the one reply already waiting for `self` after sched.run().
  template <class T, class Handle>
  static caf::expected<T> receive(Handle& rh) {
    caf::expected<T> out{caf::sec::none};
    rh.receive([&](T& x) { out = std::move(x); },
               [&](caf::error& e) { out = std::move(e); });
    return out;
  }
};

} // namespace chargeonce::test
