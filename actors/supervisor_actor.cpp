// SPDX-License-Identifier: Apache-2.0
#include "actors/supervisor_actor.hpp"

#include "actors/events_actor.hpp"
#include "actors/facade_actor.hpp"
#include "actors/log_handlers.hpp"
#include "actors/metrics/recording.hpp"
#include "actors/registry_actor.hpp"
#include "protocol/errors.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <string>

namespace chargeonce {

namespace {

using self_ptr = supervisor_self_actor::stateful_pointer<supervisor_state>;

persistence_actor& sweeper_store(self_ptr self) {
  return self->state.pool[self->state.options.connections];
}

/// The event bus reads on a connection of its own: following the events
/// table never delays a sweep page, nor a sweep the events.
persistence_actor& events_store(self_ptr self) {
  return self->state.pool.back();
}

// -- restarts -----------------------------------------------------------------

/// Monitored, not linked: an exit that cannot be intercepted (kill) would
/// otherwise take the supervisor down with the member.
void spawn_member(self_ptr self, size_t index) {
  auto member = self->state.factory();
  self->monitor(member);
  self->state.pool[index] = member;
}

/// Restarts a dead persistence actor after its backoff, doubling the next
/// delay; a member that lived longer than the maximum starts over.
void schedule_restart(self_ptr self, size_t index) {
  auto& st = self->state;
  auto now = self->clock().now();
  if (now - st.last_restart[index] > st.options.restart_backoff_max)
    st.backoff[index] = st.options.restart_backoff_min;
  auto delay = st.backoff[index];
  metrics::count_persistence_restart();
  st.backoff[index] = std::min(delay * 2, st.options.restart_backoff_max);
  spdlog::error(
    "persistence failed partition={} restart_in_ms={}", index,
    std::chrono::duration_cast<std::chrono::milliseconds>(delay).count());
  self->delayed_send(self, delay, atom::store_v, uint64_t{index});
}

void restart(self_ptr self, uint64_t index) {
  auto& st = self->state;
  st.last_restart[index] = self->clock().now();
  spawn_member(self, index);
  if (index < st.options.connections)
    self->send(st.registry, atom::store_v, index, st.pool[index]);
  else if (index == st.pool.size() - 1)
    self->send(st.events, atom::store_v, st.pool[index]);
}

void on_down(self_ptr self, caf::down_msg& msg) {
  auto& pool = self->state.pool;
  for (size_t i = 0; i < pool.size(); ++i)
    if (pool[i].address() == msg.source) {
      schedule_restart(self, i);
      return;
    }
}

/// Fails whoever waits for a scan that will never finish: the same error as
/// for a request that reached a supervisor already gone, with what was done.
void abandon_scan(scan_state& scan, const char* what, const std::string& why) {
  if (scan.waiters.empty())
    return;
  auto err = caf::make_error(caf::sec::request_receiver_down,
                             "the supervisor stopped (" + why + ") before the "
                               + what + " finished; done so far: "
                               + std::to_string(scan.count));
  for (auto& rp : scan.waiters)
    rp.deliver(err);
  scan.waiters.clear();
}

void abandon_scans(supervisor_state& st, const std::string& why) {
  abandon_scan(st.sweep, "sweep", why);
  abandon_scan(st.reactivation, "reactivation", why);
}

/// The registry or the event bus died, or a shutdown came from outside:
/// stop the pool (monitored, so not stopped by links) and quit.
void on_exit(self_ptr self, caf::exit_msg& msg) {
  auto reason =
    msg.reason ? msg.reason : caf::error{caf::exit_reason::user_shutdown};
  if (reason != caf::exit_reason::user_shutdown)
    spdlog::error("supervisor stopping reason={}", caf::to_string(reason));
  abandon_scans(self->state, caf::to_string(reason));
  for (auto& member : self->state.pool)
    caf::anon_send_exit(member, caf::exit_reason::user_shutdown);
  self->quit(reason);
}

// -- sweeping -----------------------------------------------------------------

void next_chunk(self_ptr self, sweep_cursor after);

void finish_scan(scan_state& scan);

void finish_sweep(self_ptr self) {
  auto& st = self->state;
  metrics::count_sweep();
  if (st.sweep.count > 0)
    spdlog::info("sweep done released={}", st.sweep.count);
  finish_scan(st.sweep);
  self
    ->request(sweeper_store(self), st.options.chat.store_timeout, atom::prune_v)
    .then(
      [](uint64_t n) {
        if (n > 0)
          spdlog::info("released reservations pruned rows={}", n);
      },
      [](caf::error& err) {
        spdlog::warn("prune failed error={}", error_name(err));
      });
  // Grants past their expiry, swept like jobs past their deadline: their
  // chats' next writers would expire them too, but a quiet chat has none.
  self
    ->request(sweeper_store(self), st.options.chat.store_timeout,
              atom::expiry_v)
    .then(
      [](uint64_t n) {
        if (n > 0)
          spdlog::info("grants expired grants={}", n);
      },
      [](caf::error& err) {
        spdlog::warn("expiry scan failed error={}", error_name(err));
      });
  // The gauge counts what Postgres holds (all servers), not our operations.
  self
    ->request(sweeper_store(self), st.options.chat.store_timeout, atom::count_v)
    .then([](const active_count& n) { metrics::set_active_reservations(n); },
          [](caf::error& err) {
            spdlog::warn("counting active reservations failed error={}",
                         error_name(err));
          });
}

/// The next page after `after`, or the next phase, or the end.
void continue_after(self_ptr self, const sweep_cursor& after, size_t got) {
  if (got == self->state.options.sweep_chunk_rows)
    next_chunk(self, after);
  else if (after.phase == sweep_phase::lease)
    next_chunk(self, sweep_cursor{sweep_phase::age, 0, 0});
  else if (after.phase == sweep_phase::age)
    next_chunk(self, sweep_cursor{sweep_phase::unresolved, 0, 0});
  else
    finish_sweep(self);
}

/// Hands each candidate to its chat actor (through the registry) and asks
/// for the next page only when all of them answered: at most one page of
/// releases is in flight, whatever the number of stuck reservations.
void release_chunk(self_ptr self, const std::vector<sweep_candidate>& xs,
                   sweep_cursor after) {
  auto outstanding = std::make_shared<size_t>(xs.size());
  auto got = xs.size();
  auto done = [self, outstanding, after, got] {
    if (--*outstanding == 0)
      continue_after(self, after, got);
  };
  for (const auto& x : xs)
    self
      // Twice the store timeout: the chat actor waits up to one for Postgres
      // and answers either way, so this one never fires first.
      ->request(self->state.registry,
                2 * self->state.options.chat.store_timeout, atom::release_v,
                x.chat, x.cursor.reservation)
      .then(
        [self, done](const reservation_released& r) {
          spdlog::info("reservation released chat={} reservation={} reason={}",
                       r.chat, r.reservation, r.reason);
          ++self->state.sweep.count;
          done();
        },
        [x, done](caf::error& err) {
          // not_found: committed, failed or heartbeated meanwhile.
          if (err != ec::not_found)
            spdlog::warn("release failed chat={} reservation={} error={}",
                         x.chat, x.cursor.reservation, error_name(err));
          done();
        });
}

void next_chunk(self_ptr self, sweep_cursor after) {
  auto& st = self->state;
  self
    ->request(sweeper_store(self), st.options.chat.store_timeout, atom::sweep_v,
              after, st.options.sweep_chunk_rows)
    .then(
      [self, after](std::vector<sweep_candidate>& xs) {
        if (xs.empty())
          continue_after(self, after, 0);
        else
          release_chunk(self, xs, xs.back().cursor);
      },
      [self](caf::error& err) {
        spdlog::error("sweep scan failed error={} message={}", error_name(err),
                      error_message(err));
        finish_sweep(self);
      });
}

void start_sweep(self_ptr self) {
  auto& st = self->state;
  if (st.sweep.running)
    return; // a slow sweep is not stacked by the next tick
  st.sweep.running = true;
  st.sweep.count = 0;
  next_chunk(self, sweep_cursor{sweep_phase::lease, 0, 0});
}

// -- reactivation -------------------------------------------------------------

void finish_scan(scan_state& scan) {
  scan.running = false;
  for (auto& rp : scan.waiters)
    rp.deliver(scan.count);
  scan.waiters.clear();
}

/// How often one page of the reactivation scan is tried before the scan
/// gives up until its next interval: a deadlock or a lost connection costs
/// a page one try, not the scan.
constexpr int reactivation_page_tries = 3;

/// Refills one page of quiet chats (in Postgres, one transaction under their
/// row locks), then invites each back. The refill is committed before any
/// notification, so a failed one never undoes it or stops the scan.
void next_reactivation_page(self_ptr self, reactivation_cursor after,
                            int tries = 1) {
  auto& st = self->state;
  self
    ->request(sweeper_store(self), st.options.chat.store_timeout,
              atom::reactivate_v, after, st.options.reactivation_chunk_rows)
    .then(
      [self](reactivation_page& page) {
        auto& st = self->state;
        for (auto chat : page.chats)
          self->send(st.events, limits_refilled{chat});
        st.reactivation.count += page.chats.size();
        if (page.more) {
          next_reactivation_page(self, page.next);
          return;
        }
        spdlog::info("reactivation done refilled={}", st.reactivation.count);
        finish_scan(st.reactivation);
      },
      [self, after, tries](caf::error& err) {
        if (tries < reactivation_page_tries) {
          spdlog::warn("reactivation page failed, trying it again try={} "
                       "error={} message={}",
                       tries, error_name(err), error_message(err));
          next_reactivation_page(self, after, tries + 1);
          return;
        }
        spdlog::error("reactivation scan failed tries={} error={} message={}",
                      tries, error_name(err), error_message(err));
        finish_scan(self->state.reactivation);
      });
}

void start_reactivation(self_ptr self) {
  auto& scan = self->state.reactivation;
  if (scan.running)
    return; // a slow scan is not stacked by the next tick
  scan.running = true;
  scan.count = 0;
  next_reactivation_page(self, reactivation_cursor{});
}

} // namespace

supervisor_state::~supervisor_state() {
  abandon_scans(*this, "killed or failed");
  // A kill, even one that reaches us through the registry's link, skips
  // on_exit; the pool (monitored only) would keep the actor system alive.
  for (auto& member : pool)
    caf::anon_send_exit(member, caf::exit_reason::user_shutdown);
}

supervisor_self_actor::behavior_type
make_supervisor(supervisor_self_actor::stateful_pointer<supervisor_state> self,
                persistence_factory factory, supervisor_options options) {
  install_log_handlers(self);
  auto& st = self->state;
  st.factory = std::move(factory);
  st.options = options;
  auto members = options.connections + 2;
  st.pool.resize(members);
  st.backoff.assign(members, options.restart_backoff_min);
  st.last_restart.assign(members, self->clock().now());
  for (size_t i = 0; i < members; ++i)
    spawn_member(self, i);
  st.events =
    self->spawn<caf::linked>(make_events, events_store(self), options.events);
  std::vector<persistence_actor> chats_pool(
    st.pool.begin(),
    st.pool.begin() + static_cast<std::ptrdiff_t>(options.connections));
  st.registry = self->spawn<caf::linked>(make_registry, chats_pool, st.events,
                                         options.chat);
  st.api = self->spawn<caf::linked>(make_api_facade, core_actor{st.registry});
  self->set_exit_handler([self](caf::exit_msg& msg) { on_exit(self, msg); });
  self->set_down_handler([self](caf::down_msg& msg) { on_down(self, msg); });
  self->delayed_send(self, options.sweep_interval, caf::tick_atom_v);
  self->delayed_send(self, options.reactivation_interval, atom::reactivate_v,
                     caf::tick_atom_v);
  return {
    [self](atom::sweep) {
      auto rp = self->make_response_promise();
      self->state.sweep.waiters.push_back(rp);
      start_sweep(self);
      return caf::result<uint64_t>{rp};
    },
    [self](atom::reactivate) {
      auto rp = self->make_response_promise();
      self->state.reactivation.waiters.push_back(rp);
      start_reactivation(self);
      return caf::result<uint64_t>{rp};
    },
    [self](atom::reactivate, caf::tick_atom) {
      start_reactivation(self);
      self->delayed_send(self, self->state.options.reactivation_interval,
                         atom::reactivate_v, caf::tick_atom_v);
    },
    [self](atom::api) -> api_actor { return self->state.api; },
    [self](atom::core) -> core_actor { return self->state.registry; },
    // Delegated: a dead registry bounces it to the caller as
    // request_receiver_down, without a timeout.
    [self](atom::ping x) { return self->delegate(self->state.registry, x); },
    [self](caf::tick_atom) {
      start_sweep(self);
      self->delayed_send(self, self->state.options.sweep_interval,
                         caf::tick_atom_v);
    },
    [self](atom::store, uint64_t index) { restart(self, index); },
  };
}

} // namespace chargeonce
