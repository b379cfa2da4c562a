// SPDX-License-Identifier: Apache-2.0
// A deterministic actor system (no threads, virtual clock), a fake
// persistence actor that records calls and answers when the test says so,
// and a recorder for published events.
#pragma once

#include "actors/persistence_actor.hpp"
#include "protocol/config.hpp"

#include <caf/all.hpp>
#include <doctest/doctest.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace chargeonce::test {

/// What the fakes saw and what they still owe.
struct fake_log {
  std::vector<std::string> calls; ///< "reserve 42", "cancel 42", ...
  /// Every batchable operation as it reached the store, in arrival order.
  std::vector<operation> applied;
  /// A held answer and the fake that owes it: a
  /// promise is delivered only
  /// from its own actor's context.
  struct owed_answer {
    caf::actor owner;
    std::function<void()> deliver;
    uint64_t ticket = 0;            ///< names the fake's timeout message
    std::function<void()> time_out; ///< storage_unavailable instead
  };
  std::deque<owed_answer> owed; ///< held answers, oldest first
  bool hold = false;            ///< keep answers until delivered
  /// Like the real persistence actor, a held answer becomes
  /// storage_unavailable this long after the call.
  caf::timespan store_timeout = std::chrono::seconds(10);
  uint64_t tickets = 0;              ///< held answers so far
  caf::strong_actor_ptr last_sender; ///< the chat actor that asked
  reservation_id active = 0;         ///< status: the active reservation
  reservation_id reserve_id = 1;     ///< what reserve answers
  /// cancel answers the job started and marked cancel_requested (the
  /// `request` policy), instead of deleted while queued.
  bool cancel_requested = false;
  std::deque<std::vector<sweep_candidate>> pages; ///< sweep answers in order
  std::vector<sweep_cursor> cursors; ///< what each sweep asked after
  /// reactivate answers in order (an empty page, not full, when none is
  /// left), and what each asked after.
  std::deque<caf::expected<reactivation_page>> reactivations;
  std::vector<reactivation_cursor> reactivation_cursors;
  std::vector<caf::actor> spawned; ///< every fake the factory made
  std::vector<std::string> events; ///< what the recorder received
  /// The events table: what release and a marking cancel wrote, by id.
  std::vector<event_record> event_table;

  /// Writes one event, as the real store's triggers do with the change.
  void write_event(const char* event, chat_id chat, reservation_id id,
                   std::string detail = {}) {
    auto next = static_cast<event_id>(event_table.size()) + 1;
    event_record e;
    e.id = next;
    e.event = event;
    e.chat = chat;
    e.reservation = id;
    e.detail = std::move(detail);
    event_table.push_back(std::move(e));
  }
};

/// Tells a fake to deliver its oldest held answer (test double only).
using deliver_atom = caf::atom_constant<caf::atom("deliver")>;

/// Untyped, so that it also takes deliver_atom; the code under test sees it
/// through a persistence_actor handle.
caf::behavior fake_persistence(caf::event_based_actor* self,
                               std::shared_ptr<fake_log> log);

/// Subscribes to nothing by itself: pass it to the event bus.
caf::behavior event_recorder(caf::event_based_actor* self,
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

  /// Delivers the oldest held answer, inside the context of the fake that
  /// owes it.
  void release() {
    REQUIRE_FALSE(log->owed.empty());
    caf::anon_send(log->owed.front().owner, deliver_atom::value);
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
