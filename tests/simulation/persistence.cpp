// SPDX-License-Identifier: Apache-2.0
#include "tests/simulation/persistence.hpp"

#include "protocol/batch_request.hpp"
#include "protocol/errors.hpp"

#include <caf/all.hpp>

#include <deque>
#include <functional>
#include <map>

namespace chargeonce::test {

namespace {

/// Ends a stall: the delayed transaction answers now.
using resume_atom = caf::atom_constant<caf::atom("resume")>;

/// An operation's store-timeout passed.
using expire_atom = caf::atom_constant<caf::atom("expire")>;

/// Answers once: like the real persistence actor, a caller still waiting
/// after store-timeout gets storage_unavailable, and the late answer is
/// dropped.
template <class T>
struct sim_promise {
  caf::typed_response_promise<T> rp;
  std::shared_ptr<bool> answered = std::make_shared<bool>(false);

  template <class U>
  void deliver(U&& x) {
    if (*answered)
      return;
    *answered = true;
    rp.deliver(std::forward<U>(x));
  }
};

struct sim_db_state {
  static inline const char* name = "sim-persistence";
  std::shared_ptr<sim_world> w;
  std::deque<std::function<void()>> queue; ///< transactions behind a stall
  bool stalled = false;
  std::function<void()> late_write; ///< the stalled write, if still to come
  std::function<void()> answer;     ///< the stalled reply
  caf::timestamp reconnected_at;    ///< refuses everything until then
  /// Deadline answers by ticket, until their expire message comes.
  std::map<uint64_t, std::function<void()>> deadlines;
  uint64_t tickets = 0;

  /// Killed with a write in flight: Postgres committed it or not. Like the
  /// real persistence actor, it answers everyone still waiting.
  ~sim_db_state() {
    if (late_write && w->rng() % 2 == 0)
      late_write();
    for (auto& [ticket, time_out] : deadlines)
      time_out();
  }
};

using self_ptr = caf::stateful_actor<sim_db_state>*;

caf::timestamp now_of(caf::actor_clock& clock) {
  return caf::timestamp{
    std::chrono::duration_cast<caf::timespan>(clock.now().time_since_epoch())};
}

caf::error unavailable(const char* why) {
  return caf::make_error(ec::storage_unavailable, why);
}

caf::actor_addr sender_of(self_ptr self) {
  auto ptr = self->current_sender();
  return ptr ? ptr->address() : caf::actor_addr{};
}

template <class T>
void deliver(sim_promise<T>& rp, caf::expected<T>& x) {
  if (x)
    rp.deliver(std::move(*x));
  else
    rp.deliver(x.error());
}

template <class T>
using apply_fn = std::function<caf::expected<T>()>;

/// Stalls this connection for a while; the write happens now or at the end.
template <class T>
void stall(self_ptr self, sim_promise<T> rp, chat_id chat,
           const caf::actor_addr& sender, apply_fn<T> apply) {
  auto& st = self->state;
  auto& w = *st.w;
  auto now = now_of(self->clock());
  auto d = std::chrono::milliseconds(
    200
    + w.rng()
        % std::chrono::duration_cast<std::chrono::milliseconds>(w.stall_max)
            .count());
  auto slot = std::make_shared<caf::expected<T>>(caf::sec::none);
  if (w.rng() % 2 == 0)
    *slot = apply();
  else
    st.late_write = [slot, apply] {
      *slot = apply();
    };
  st.answer = [rp, slot]() mutable {
    deliver(rp, *slot);
  };
  st.stalled = true;
  if (chat != 0 && chat == w.stall_next) {
    w.stall_next = 0;
    w.stalled_chat = sender;
  }
  w.impair("delay", now + d);
  self->delayed_send(self, d, resume_atom::value);
}

/// One transaction, with the fault the generator picks.
template <class T>
void run(self_ptr self, sim_promise<T> rp, chat_id chat,
         const caf::actor_addr& sender, apply_fn<T> apply) {
  auto& st = self->state;
  auto& w = *st.w;
  auto now = now_of(self->clock());
  if (w.outage) {
    rp.deliver(unavailable("simulated outage"));
    return;
  }
  if (now < st.reconnected_at) {
    rp.deliver(unavailable("simulated reconnect"));
    return;
  }
  if (chat != 0 && chat == w.stall_next)
    return stall(self, rp, chat, sender, std::move(apply));
  auto roll = static_cast<int>(w.rng() % 100);
  if (roll >= w.fault_percent) {
    auto out = apply();
    return deliver(rp, out);
  }
  switch (roll % 4) {
  case 0:
    w.impair("error_before_write", now);
    rp.deliver(unavailable("simulated fault before the write"));
    return;
  case 1:
    apply();
    w.impair("error_after_write", now);
    rp.deliver(unavailable("simulated fault after the write"));
    return;
  case 2:
    return stall(self, rp, chat, sender, std::move(apply));
  default:
    if (w.rng() % 2 == 0)
      apply(); // the commit reached Postgres before the connection broke
    st.reconnected_at = now + std::chrono::milliseconds(500 + w.rng() % 2500);
    w.impair("dropped_connection", st.reconnected_at);
    rp.deliver(unavailable("simulated dropped connection"));
    return;
  }
}

void drain(self_ptr self) {
  auto& st = self->state;
  while (!st.stalled && !st.queue.empty()) {
    auto next = std::move(st.queue.front());
    st.queue.pop_front();
    next();
  }
}

void resume(self_ptr self) {
  auto& st = self->state;
  if (st.late_write) {
    st.late_write();
    st.late_write = nullptr;
  }
  // An answer due during an outage cannot reach the caller either.
  auto answer = std::move(st.answer);
  st.answer = nullptr;
  if (!st.w->outage)
    answer();
  st.stalled = false;
  drain(self);
}

/// Queues one transaction behind any stall; answers through a promise.
template <class T>
caf::result<T> submit(self_ptr self, chat_id chat, apply_fn<T> apply) {
  auto& st = self->state;
  auto sender = sender_of(self);
  if (chat != 0)
    st.w->actors[chat] = sender;
  sim_promise<T> p{self->make_response_promise<T>()};
  auto ticket = ++st.tickets;
  st.deadlines.emplace(ticket, [p]() mutable {
    p.deliver(unavailable("Postgres did not answer in time"));
  });
  self->delayed_send(self, st.w->store_timeout, expire_atom::value, ticket);
  st.queue.push_back([self, p, chat, sender, apply]() mutable {
    run<T>(self, p, chat, sender, std::move(apply));
  });
  drain(self);
  return p.rp;
}

/// A transaction's answer as the outcome the real persistence actor gives:
/// a refusal is the outcome's error.
template <class F>
apply_fn<outcome> as_apply(F f) {
  return [f]() -> caf::expected<outcome> {
    auto x = f();
    if (!x)
      return as_outcome(x.error());
    return as_outcome(std::move(*x));
  };
}

/// A commit (of `who`, "" for none); a chat actor killed meanwhile charges
/// twice under its mutant.
caf::result<outcome> sim_commit(self_ptr self, std::shared_ptr<sim_world> w,
                                const operation& op) {
  auto from = sender_of(self);
  auto clk = &self->clock();
  auto c = op.chat;
  auto id = op.reservation;
  return submit<outcome>(
    self, c, as_apply([=] {
      auto out = w->commit(c, id, now_of(*clk), op.units, op.worker);
      if (out && w->mutant == sim_mutant::killed_commit_charges_twice
          && w->killed.count(from) != 0)
        w->charge_again(c, id);
      return out;
    }));
}

/// One of the eight batchable operations, as the model runs it.
caf::result<outcome> sim_apply(self_ptr self, std::shared_ptr<sim_world> w,
                               const operation& op) {
  auto clk = &self->clock();
  auto now = [clk] {
    return now_of(*clk);
  };
  auto c = op.chat;
  auto id = op.reservation;
  switch (op.type) {
  case operation_type::reserve:
    if (w->outage && w->mutant == sim_mutant::outage_says_busy
        && w->active_of(c))
      return as_outcome(
        caf::make_error(ec::busy, "the mutant looked at the index"));
    return submit<outcome>(self, c, as_apply([=] {
                             return w->reserve(c, op.kind, op.request_id, now(),
                                               op.units);
                           }));
  case operation_type::start:
    return submit<outcome>(
      self, c, as_apply([=] { return w->start(c, id, op.worker); }));
  case operation_type::heartbeat:
    return submit<outcome>(
      self, c, as_apply([=] { return w->heartbeat(c, id, now(), op.worker); }));
  case operation_type::commit:
    return sim_commit(self, w, op);
  case operation_type::fail:
    return submit<outcome>(
      self, c, as_apply([=] { return w->fail(c, id, op.worker, now()); }));
  case operation_type::cancel:
    if (id == 0 && op.request_id.empty())
      return submit<outcome>(self, c,
                             as_apply([=] { return w->cancel(c, now()); }));
    return submit<outcome>(self, c, as_apply([=] {
                             return w->cancel(c, id, op.request_id, now());
                           }));
  case operation_type::status:
    return submit<outcome>(self, c,
                           as_apply([=] { return w->status(c, now()); }));
  case operation_type::touch:
    return submit<outcome>(self, c,
                           as_apply([=] { return w->touch(c, now()); }));
  default:
    return as_outcome(caf::make_error(ec::internal, "not a batch operation"));
  }
}

caf::behavior sim_persistence(self_ptr self, std::shared_ptr<sim_world> w) {
  self->state.w = w;
  auto clk = &self->clock();
  auto now = [clk] {
    return now_of(*clk);
  };
  return {
    [=](atom::create, const chat_spec& spec) {
      return submit<chat_status>(self, spec.chat,
                                 [=] { return w->create(spec, now()); });
    },
    [=](atom::apply, const operation& op) { return sim_apply(self, w, op); },
    [=](atom::uncertain, chat_id c, reservation_id id, const std::string& ref) {
      return submit<reservation>(
        self, c, [=] { return w->uncertain_of(c, id, ref, now(), ""); });
    },
    [=](atom::uncertain, chat_id c, reservation_id id, const std::string& ref,
        const std::string& who) {
      return submit<reservation>(
        self, c, [=] { return w->uncertain_of(c, id, ref, now(), who); });
    },
    [=](atom::resolve, chat_id c, reservation_id id, const std::string& outcome,
        int32_t units) {
      return submit<resolution>(
        self, c, [=] { return w->resolve(c, id, outcome, units, now()); });
    },
    [=](atom::unresolved, reservation_id after, uint32_t limit) {
      return submit<unresolved_page>(self, 0,
                                     [=]() -> caf::expected<unresolved_page> {
                                       return w->unresolved(after, limit);
                                     });
    },
    [=](atom::void_grant, chat_id c, int64_t grant, const std::string& pid) {
      return submit<grant_info>(
        self, c, [=] { return w->void_grant(c, grant, pid, now()); });
    },
    [=](atom::top_up, chat_id c, int64_t credits, const std::string& pid,
        const grant_terms& terms) {
      return submit<top_up_receipt>(
        self, c, [=] { return w->top_up(c, credits, pid, terms, now()); });
    },
    [=](atom::premium, chat_id c, caf::timestamp until) {
      return submit<chat_status>(
        self, c, [=] { return w->set_premium(c, until, now()); });
    },
    [=](atom::flags, chat_id c, const flags_update& x) {
      return submit<chat_status>(self, c,
                                 [=] { return w->set_flags(c, x, now()); });
    },
    [=](atom::release, chat_id c, reservation_id id) {
      return submit<reservation_released>(
        self, c, [=] { return w->release(c, id, now()); });
    },
    [=](atom::sweep, const sweep_cursor& after, uint32_t limit) {
      using page = std::vector<sweep_candidate>;
      return submit<page>(self, 0, [=]() -> caf::expected<page> {
        return w->sweep(after, limit, now());
      });
    },
    [=](atom::count) {
      return submit<active_count>(self, 0,
                                  [=] { return w->count_active(now()); });
    },
    [=](atom::expiry) {
      return submit<uint64_t>(self, 0, [=]() -> caf::expected<uint64_t> {
        return w->expire_due(now());
      });
    },
    [=](atom::prune) {
      return submit<uint64_t>(
        self, 0, []() -> caf::expected<uint64_t> { return uint64_t{0}; });
    },
    [=](atom::events, event_id after, uint32_t limit) {
      return submit<event_page>(self, 0, [=]() -> caf::expected<event_page> {
        return w->events_after(after, limit);
      });
    },
    [=](atom::reactivate, const reactivation_cursor& after, uint32_t limit) {
      return submit<reactivation_page>(
        self, 0, [=]() -> caf::expected<reactivation_page> {
          return w->reactivate(after, limit, now());
        });
    },
    [=](resume_atom) { resume(self); },
    [=](expire_atom, uint64_t ticket) {
      auto& deadlines = self->state.deadlines;
      auto i = deadlines.find(ticket);
      if (i == deadlines.end())
        return;
      auto time_out = std::move(i->second);
      deadlines.erase(i);
      time_out();
    },
  };
}

} // namespace

persistence_actor spawn_sim_persistence(caf::actor_system& sys,
                                        std::shared_ptr<sim_world> w) {
  return caf::actor_cast<persistence_actor>(
    sys.spawn(sim_persistence, std::move(w)));
}

} // namespace chargeonce::test
