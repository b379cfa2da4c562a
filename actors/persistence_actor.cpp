// SPDX-License-Identifier: Apache-2.0
#include "actors/persistence_actor.hpp"

#include "actors/log_handlers.hpp"
#include "protocol/batch_request.hpp"
#include "protocol/errors.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

namespace chargeonce {

namespace {

using self_ptr = persistence_self_actor::stateful_pointer<persistence_state>;
using persistence::batch_result;
using persistence::store;
using time_point = caf::actor_clock::time_point;

/// The name of an operation in logs and errors.
const char* name_of(const queued_operation& x) {
  return x.name ? x.name : to_string(x.op.type);
}

/// Operations waiting for Postgres: queued, or staged for the next batch.
size_t waiting(const persistence_state& st) {
  return st.queue.size() + st.staged.size();
}

void publish_depth(self_ptr self) {
  self->state.depth.set(static_cast<int64_t>(waiting(self->state)));
}

// -- deadlines ----------------------------------------------------------------

/// Answers one operation that Postgres did not answer in time.
void time_out(queued_operation& x, const char* what_happened) {
  spdlog::warn("store_timeout op={} chat={} reservation={} {}", name_of(x),
               x.op.chat, x.op.reservation, what_happened);
  x.answer(caf::make_error(ec::storage_unavailable,
                           std::string{name_of(x)}
                             + ": Postgres did not answer in time; "
                             + what_happened));
  x.answer = nullptr;
}

/// The first unanswered operation's deadline.
template <class Container>
std::optional<time_point> first_deadline(const Container& xs) {
  auto i = std::find_if(xs.begin(), xs.end(),
                        [](const auto& x) { return bool{x.answer}; });
  if (i == xs.end())
    return std::nullopt;
  return i->deadline;
}

std::optional<time_point> earliest_deadline(const persistence_state& st) {
  // Operations join a job in arrival order: the running job's are the
  // earliest, then the staged ones, then the queue's.
  if (auto out = first_deadline(st.running))
    return out;
  if (auto out = first_deadline(st.staged))
    return out;
  if (!st.queue.empty())
    return st.queue.front().deadline;
  return std::nullopt;
}

/// One expire message at most is on its way, for the earliest deadline: a
/// CAF timer per operation would cost the clock thread a wake-up each.
void arm_expiry(self_ptr self) {
  auto& st = self->state;
  if (st.expiry_pending)
    return;
  auto earliest = earliest_deadline(st);
  if (!earliest)
    return;
  st.expiry_pending = true;
  auto delay =
    std::max(*earliest - self->clock().now(), time_point::duration::zero());
  self->delayed_send(self, delay, atom::expire_v);
}

/// Staged operations the connection took already (a prefix) may still
/// commit; the others are withdrawn unwritten, under the lock the
/// connection takes them with.
void expire_staged(persistence_state& st, time_point now) {
  auto& job = *st.job;
  std::lock_guard<std::mutex> guard{job.mtx};
  auto first_untaken = st.staged.size() - job.staged.size();
  for (size_t i = 0; i < first_untaken; ++i)
    if (st.staged[i].answer && st.staged[i].deadline <= now)
      time_out(st.staged[i], "it may still commit");
  // In arrival order, so are their deadlines.
  size_t expired = 0;
  while (first_untaken + expired < st.staged.size()
         && st.staged[first_untaken + expired].deadline <= now) {
    auto& x = st.staged[first_untaken + expired];
    if (x.answer)
      time_out(x, "nothing was written");
    ++expired;
  }
  auto from = st.staged.begin() + static_cast<ptrdiff_t>(first_untaken);
  st.staged.erase(from, from + static_cast<ptrdiff_t>(expired));
  job.staged.erase(job.staged.begin(),
                   job.staged.begin() + static_cast<ptrdiff_t>(expired));
}

void expire(self_ptr self) {
  auto& st = self->state;
  st.expiry_pending = false;
  auto now = self->clock().now();
  for (auto& x : st.running)
    if (x.answer && x.deadline <= now)
      time_out(x, "it may still commit");
  expire_staged(st, now);
  // The queue is in arrival order, so are its deadlines.
  while (!st.queue.empty() && st.queue.front().deadline <= now) {
    time_out(st.queue.front(), "nothing was written");
    st.queue.pop_front();
  }
  publish_depth(self);
  arm_expiry(self);
}

// -- batches ------------------------------------------------------------------

/// Hands the connection, idle now, its next job: what was staged after it
/// last took the staged operations, else the head of the queue (one
/// operation that runs alone, or the hot operations up to the next such
/// one, at most statement_operations_max).
void start_job(self_ptr self) {
  auto& st = self->state;
  auto& job = *st.job;
  job.ops.clear();
  job.run = nullptr;
  st.running.clear();
  if (!st.staged.empty()) {
    {
      std::lock_guard<std::mutex> guard{job.mtx};
      job.ops.swap(job.staged);
    }
    std::move(st.staged.begin(), st.staged.end(),
              std::back_inserter(st.running));
    st.staged.clear();
  } else if (st.queue.front().run) {
    job.run = st.queue.front().run;
    st.running.push_back(std::move(st.queue.front()));
    st.queue.pop_front();
  } else {
    while (!st.queue.empty() && !st.queue.front().run
           && st.running.size() < st.limits.statement_operations_max) {
      job.ops.push_back(st.queue.front().op);
      st.running.push_back(std::move(st.queue.front()));
      st.queue.pop_front();
    }
  }
  st.busy = true;
  self->send(st.connection, atom::apply_v);
}

/// While the connection works: hands it the hot operations at the head of
/// the queue as its next batch, up to one that runs alone (order is kept:
/// it waits until the connection is idle) or statement_operations_max.
void stage(self_ptr self) {
  auto& st = self->state;
  auto& job = *st.job;
  if (st.queue.empty() || st.queue.front().run)
    return;
  std::lock_guard<std::mutex> guard{job.mtx};
  while (!st.queue.empty() && !st.queue.front().run
         && job.staged.size() < st.limits.statement_operations_max) {
    job.staged.push_back(st.queue.front().op);
    st.staged.push_back(std::move(st.queue.front()));
    st.queue.pop_front();
  }
}

/// Runs when the flush message comes up or the connection is done: every
/// operation that arrived before it is queued, and nothing waits for a
/// batch to fill.
void dispatch(self_ptr self) {
  auto& st = self->state;
  if (!st.busy && (!st.staged.empty() || !st.queue.empty()))
    start_job(self);
  if (st.busy)
    stage(self);
  publish_depth(self);
}

/// Answers the operations of a finished job that still wait for it.
void answer(std::vector<queued_operation>& finished, finished_job& done) {
  if (done.alone) {
    for (auto& x : finished)
      if (x.answer)
        x.finish();
    return;
  }
  metrics::observe_persistence_batch(finished.size());
  bool outage = false;
  for (size_t i = 0; i < finished.size(); ++i) {
    if (auto err = std::get_if<caf::error>(&done.results[i]))
      outage = outage || *err == ec::storage_unavailable;
    if (finished[i].answer)
      finished[i].answer(std::move(done.results[i]));
  }
  if (outage)
    metrics::count_storage_error();
}

/// Schedules the next probe while the connection finds no writable
/// Postgres, each wait twice the last (probe_delay_min … probe_delay_max).
void schedule_probe(self_ptr self) {
  auto& st = self->state;
  if (!st.unavailable.get() || st.probe_pending)
    return;
  st.probe_pending = true;
  self->delayed_send(self, st.probe_delay, atom::probe_v);
  st.probe_delay = std::min(st.probe_delay * 2, probe_delay_max);
}

/// What a finished job says of the connection: each connection its store
/// opened after the first is a reconnect; a job that found no writable
/// Postgres starts (or continues) this actor's time without a primary, one
/// that reached it ends it. While none is reachable the actor probes on its
/// own, so that a partition no client writes to reconnects too, and its
/// time without a primary ends when the primary is back.
void note_connection(self_ptr self, const finished_job& done) {
  auto& st = self->state;
  if (done.connections_made > st.connections_seen) {
    if (st.connections_seen > 0)
      metrics::count_reconnects(done.connections_made - st.connections_seen);
    st.connections_seen = done.connections_made;
  }
  st.unavailable.set(done.unavailable);
  if (!done.unavailable)
    st.probe_delay = probe_delay_min;
  schedule_probe(self);
}

/// The connection finished a job. It went on with the staged operations
/// it took, if any; otherwise it gets its next job (what was queued since)
/// before this job's answers go out, so that Postgres does not wait for
/// them.
void on_done(self_ptr self) {
  auto& st = self->state;
  finished_job done;
  {
    std::lock_guard<std::mutex> guard{st.job->mtx};
    if (!st.busy || st.job->finished.empty())
      return;
    done = std::move(st.job->finished.front());
    st.job->finished.pop_front();
  }
  std::vector<queued_operation> finished;
  finished.swap(st.running);
  auto taken = std::min(done.taken, st.staged.size());
  auto taken_end = st.staged.begin() + static_cast<std::ptrdiff_t>(taken);
  std::move(st.staged.begin(), taken_end, std::back_inserter(st.running));
  st.staged.erase(st.staged.begin(), taken_end);
  st.busy = taken > 0;
  dispatch(self);
  note_connection(self, done);
  answer(finished, done);
}

// -- queueing -----------------------------------------------------------------

caf::error overloaded(self_ptr self, const queued_operation& x) {
  auto& st = self->state;
  spdlog::warn("overloaded op={} chat={} reservation={} queued={}", name_of(x),
               x.op.chat, x.op.reservation, waiting(st));
  return caf::make_error(ec::overloaded, "persistence queue full ("
                                           + std::to_string(waiting(st))
                                           + " operations waiting)");
}

void push(self_ptr self, queued_operation x) {
  auto& st = self->state;
  x.deadline = self->clock().now() + st.limits.store_timeout;
  st.queue.push_back(std::move(x));
  // While the connection works, the operation joins the next batch at once
  // (what cannot be staged yet is dispatched when the connection is done):
  // waiting for a flush could leave the connection idle if it finishes
  // first. For an idle connection, the flush gathers what arrives together.
  if (st.busy) {
    stage(self);
  } else if (!st.flush_pending) {
    st.flush_pending = true;
    self->send(self, atom::flush_v);
  }
  publish_depth(self);
  arm_expiry(self);
}

/// Queues one hot operation for the next batch; `overloaded` when the queue
/// is full. A refusal, a timeout and an outage are the outcome's error.
caf::result<outcome> enqueue(self_ptr self, operation op) {
  queued_operation x;
  x.op = std::move(op);
  if (waiting(self->state) >= self->state.limits.queue_operations_max)
    return as_outcome(overloaded(self, x));
  auto promise = self->make_response_promise<outcome>();
  x.answer = [promise](batch_result&& r) mutable {
    promise.deliver(
      std::visit([](auto& x) { return as_outcome(std::move(x)); }, r));
  };
  push(self, std::move(x));
  return promise;
}

/// A ping through the queue, after what waits (which may find the primary
/// first). Nobody waits for its answer, and its failure is no client's:
/// not counted as a storage error.
void probe(self_ptr self) {
  self->state.probe_pending = false;
  if (!self->state.unavailable.get())
    return;
  queued_operation x;
  x.name = "probe";
  x.op = operation_on(operation_type::status, 0, 0);
  x.run = [](store& db) {
    (void)db.ping();
  };
  x.answer = [](batch_result&&) {
  };
  x.finish = [] {
  };
  push(self, std::move(x));
}

/// Queues an operation that runs alone, after what was queued before it, so
/// the actor still answers in arrival order.
template <class T, class F>
caf::result<T> enqueue_alone(self_ptr self, const char* name, chat_id chat,
                             reservation_id id, F run) {
  queued_operation x;
  x.name = name;
  x.op = operation_on(operation_type::status, chat, id);
  if (waiting(self->state) >= self->state.limits.queue_operations_max)
    return overloaded(self, x);
  auto promise = self->make_response_promise<T>();
  auto slot = std::make_shared<caf::expected<T>>(caf::sec::none);
  x.run = [slot, run](store& db) {
    *slot = run(db);
  };
  x.answer = [promise](batch_result&& r) mutable {
    promise.deliver(std::get<caf::error>(std::move(r)));
  };
  x.finish = [promise, slot]() mutable {
    if (*slot) {
      promise.deliver(std::move(**slot));
      return;
    }
    if (slot->error() == ec::storage_unavailable)
      metrics::count_storage_error();
    promise.deliver(slot->error());
  };
  push(self, std::move(x));
  return promise;
}

/// One of the eight batchable operations: the hot ones share the next
/// statement, touch runs alone (it may register the chat and open its
/// window, which the batch function does not do).
caf::result<outcome> apply(self_ptr self, operation op) {
  if (!is_valid(op.type))
    return as_outcome(
      caf::make_error(ec::internal, std::string{"not an operation of a batch: "}
                                      + to_string(op.type)));
  if (traits_of(op.type).in_statement)
    return enqueue(self, std::move(op));
  return enqueue_alone<outcome>(
    self, "touch", op.chat, 0,
    [chat = op.chat](store& db) -> caf::expected<outcome> {
      auto x = db.touch(chat);
      if (!x)
        return x.error();
      return as_outcome(std::move(*x));
    });
}

} // namespace

persistence_state::~persistence_state() {
  auto stopped = [](queued_operation& x, const char* what_happened) {
    if (x.answer)
      x.answer(caf::make_error(ec::storage_unavailable,
                               std::string{"persistence actor stopped "}
                                 + what_happened));
  };
  for (auto& x : running)
    stopped(x, "while Postgres worked; the outcome is unknown");
  for (auto& x : staged)
    stopped(x, "with the operation handed to Postgres; the outcome is "
               "unknown");
  for (auto& x : queue)
    stopped(x, "before the batch ran; nothing was written");
}

persistence_self_actor::behavior_type
make_persistence(self_ptr self, persistence::store_options opts,
                 persistence_limits limits) {
  install_log_handlers(self);
  auto& st = self->state;
  st.limits = limits;
  metrics::set_persistence_queue_max(limits.queue_operations_max);
  st.job = std::make_shared<connection_job>(std::move(opts));
  st.connection = self->spawn<caf::detached + caf::linked>(
    make_connection, st.job, caf::actor_cast<connection_owner>(self));
  return {
    [self](atom::flush) {
      self->state.flush_pending = false;
      dispatch(self);
    },
    [self](atom::done) { on_done(self); },
    [self](atom::expire) { expire(self); },
    [self](atom::probe) { probe(self); },
    [self](atom::apply, operation& op) { return apply(self, std::move(op)); },
    [self](atom::create, const chat_spec& spec) {
      return enqueue_alone<chat_status>(
        self, "create", spec.chat, 0,
        [spec](store& db) { return db.create_chat(spec); });
    },
    [self](atom::uncertain, chat_id chat, reservation_id id,
           const std::string& provider_ref) {
      return enqueue_alone<reservation>(
        self, "uncertain", chat, id, [chat, id, provider_ref](store& db) {
          return db.uncertain(chat, id, provider_ref);
        });
    },
    [self](atom::uncertain, chat_id chat, reservation_id id,
           const std::string& provider_ref, const std::string& worker) {
      return enqueue_alone<reservation>(
        self, "uncertain", chat, id,
        [chat, id, provider_ref, worker](store& db) {
          return db.uncertain(chat, id, provider_ref, worker);
        });
    },
    [self](atom::resolve, chat_id chat, reservation_id id,
           const std::string& outcome, int32_t units) {
      return enqueue_alone<resolution>(
        self, "resolve", chat, id, [chat, id, outcome, units](store& db) {
          return db.resolve(chat, id, outcome, units);
        });
    },
    [self](atom::unresolved, reservation_id after, uint32_t limit) {
      return enqueue_alone<unresolved_page>(
        self, "unresolved", 0, after,
        [after, limit](store& db) { return db.unresolved(after, limit); });
    },
    [self](atom::history, chat_id chat, int64_t before, uint32_t limit) {
      return enqueue_alone<history_page>(
        self, "history", chat, 0, [chat, before, limit](store& db) {
          return db.history(chat, before, limit);
        });
    },
    [self](atom::explain, chat_id chat) {
      return enqueue_alone<chat_explanation>(
        self, "explain", chat, 0,
        [chat](store& db) { return db.explain(chat); });
    },
    [self](atom::release, chat_id chat, reservation_id id) {
      return enqueue_alone<reservation_released>(
        self, "release", chat, id,
        [chat, id](store& db) { return db.release(chat, id); });
    },
    [self](atom::sweep, const sweep_cursor& after, uint32_t limit) {
      return enqueue_alone<std::vector<sweep_candidate>>(
        self, "sweep", 0, 0,
        [after, limit](store& db) { return db.sweep_chunk(after, limit); });
    },
    [self](atom::events, event_id after, uint32_t limit) {
      return enqueue_alone<event_page>(
        self, "events", 0, 0,
        [after, limit](store& db) { return db.events_after(after, limit); });
    },
    [self](atom::expiry) {
      return enqueue_alone<uint64_t>(
        self, "expire_grants", 0, 0,
        [](store& db) { return db.expire_grants(); });
    },
    [self](atom::prune) {
      return enqueue_alone<uint64_t>(self, "prune", 0, 0,
                                     [](store& db) { return db.prune(); });
    },
    [self](atom::count) {
      return enqueue_alone<active_count>(
        self, "count", 0, 0, [](store& db) { return db.count_active(); });
    },
    [self](atom::top_up, chat_id chat, int64_t credits,
           const std::string& payment_id, const grant_terms& terms) {
      return enqueue_alone<top_up_receipt>(
        self, "top_up", chat, 0, [chat, credits, payment_id, terms](store& db) {
          return db.top_up(chat, credits, payment_id, terms);
        });
    },
    [self](atom::void_grant, chat_id chat, int64_t grant,
           const std::string& payment_id) {
      return enqueue_alone<grant_info>(
        self, "void_grant", chat, 0, [chat, grant, payment_id](store& db) {
          return db.void_grant(chat, grant, payment_id);
        });
    },
    [self](atom::premium, chat_id chat, caf::timestamp until) {
      return enqueue_alone<chat_status>(
        self, "set_premium", chat, 0,
        [chat, until](store& db) { return db.set_premium(chat, until); });
    },
    [self](atom::flags, chat_id chat, const flags_update& x) {
      return enqueue_alone<chat_status>(
        self, "set_flags", chat, 0,
        [chat, x](store& db) { return db.set_flags(chat, x); });
    },
    [self](atom::limits, chat_id chat, const limits_update& x) {
      return enqueue_alone<chat_status>(
        self, "set_limits", chat, 0,
        [chat, x](store& db) { return db.set_limits(chat, x); });
    },
    [self](atom::reactivate, const reactivation_cursor& after, uint32_t limit) {
      return enqueue_alone<reactivation_page>(
        self, "reactivate", 0, 0, [after, limit](store& db) {
          return db.reactivation_chunk(after, limit);
        });
    },
  };
}

persistence_factory make_persistence_factory(caf::actor_system& sys,
                                             persistence::store_options opts,
                                             persistence_limits limits) {
  return [&sys, opts = std::move(opts), limits]() -> persistence_actor {
    return sys.spawn(make_persistence, opts, limits);
  };
}

} // namespace chargeonce
