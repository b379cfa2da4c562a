// SPDX-License-Identifier: Apache-2.0
#include "actors/chat_actor.hpp"

#include "actors/log_handlers.hpp"
#include "protocol/batch_request.hpp"
#include "protocol/errors.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

namespace chargeonce {

namespace {

using self_ptr = chat_self_actor::stateful_pointer<chat_state>;

/// Restarts the idle countdown. One timer at most is pending per actor: a
/// timer per operation would keep millions of stale timers in the clock at
/// a few thousand operations per second (each also a message when it
/// fires). The pending one re-arms itself if there was activity since.
void arm_idle_timer(self_ptr self) {
  auto& st = self->state;
  st.last_activity = self->clock().now();
  if (st.idle_timer_pending)
    return;
  st.idle_timer_pending = true;
  self->delayed_send(self, st.options.idle_timeout, atom::idle_v);
}

/// The idle timer fired: passivation is asked for only after a full
/// idle-timeout without operations and with no queue notice armed (its
/// handler re-arms the countdown when done).
void on_idle_timer(self_ptr self) {
  auto& st = self->state;
  st.idle_timer_pending = false;
  auto quiet = self->clock().now() - st.last_activity;
  if (quiet < st.options.idle_timeout) {
    st.idle_timer_pending = true;
    self->delayed_send(self, st.options.idle_timeout - quiet, atom::idle_v);
    return;
  }
  if (st.notices_pending == 0)
    self->send(st.registry, atom::idle_v, st.id, st.received);
}

/// One notice per reservation, even if a reserve is answered twice with it.
void arm_queue_notice(self_ptr self, const reservation& x) {
  if (x.id == self->state.noticed)
    return;
  self->state.noticed = x.id;
  ++self->state.notices_pending;
  self->send(self->state.notice_timer, atom::notice_v, x.id);
}

reservation_id reservation_of(const reservation& x) {
  return x.id;
}

reservation_id reservation_of(const receipt& x) {
  return x.reservation;
}

reservation_id reservation_of(const chat_status& x) {
  return x.active ? x.active->id : 0;
}

reservation_id reservation_of(const reservation_released& x) {
  return x.reservation;
}

reservation_id reservation_of(const resolution& x) {
  return x.reservation;
}

reservation_id reservation_of(const top_up_receipt&) {
  return 0;
}

reservation_id reservation_of(const grant_info&) {
  return 0;
}

reservation_id reservation_of(const outcome& x) {
  if (x.reservation)
    return x.reservation->id;
  if (x.receipt)
    return reservation_of(*x.receipt);
  return x.status ? reservation_of(*x.status) : 0;
}

/// The refusal an answer carries: only an outcome carries one.
template <class T>
const caf::error* refusal_of(const T&) {
  return nullptr;
}

const caf::error* refusal_of(const outcome& x) {
  return x.error ? &x.error : nullptr;
}

/// Our own codes pass through; anything CAF reports about the persistence
/// actor (timeout, actor down) means the database did not answer.
caf::error as_storage_error(const char* op_name, caf::error err) {
  if (err.category() == caf::atom(error_category_name))
    return err;
  auto why = err == caf::sec::request_timeout
               ? std::string{"Postgres did not answer in time"}
               : "persistence failed: " + caf::to_string(err);
  return caf::make_error(ec::storage_unavailable,
                         std::string{op_name} + ": " + why);
}

void log_refusal(self_ptr self, const char* op_name, reservation_id id,
                 const caf::error& err) {
  // busy, insufficient_*, too_late, … are answers, not trouble; an
  // outage is (and store.cpp logged its cause at error level).
  auto level =
    err == ec::storage_unavailable ? spdlog::level::warn : spdlog::level::info;
  spdlog::log(level, "{} refused chat={} reservation={} error={} message={}",
              op_name, self->state.id, id, error_name(err), error_message(err));
}

/// Sends one operation to Postgres and suspends the behavior until the answer
/// arrives (await), so no other operation of this chat can interleave.
/// `on_success` runs after the transaction committed, before the reply.
/// An operation answered as an `outcome` is answered so when it fails too.
/// No timeout of its own: the persistence actor answers within
/// store-timeout (and CAF answers for it if it dies), while a CAF request
/// timeout would cost the clock thread two wake-ups per operation.
template <class T, class OnSuccess, class... Ts>
caf::result<T> serialize(self_ptr self, const char* op_name, reservation_id id,
                         OnSuccess on_success, Ts&&... xs) {
  ++self->state.received;
  self->state.pending = self->make_response_promise();
  auto result = self->state.pending;
  self->request(self->state.store, caf::infinite, std::forward<Ts>(xs)...)
    .await(
      [self, op_name, id, on_success](T& x) {
        if (auto err = refusal_of(x)) {
          log_refusal(self, op_name, id, *err);
        } else {
          // Debug: at info, three lines per paid job cost the server 8 % of
          // its CPU under load (a flushed stderr write each); the ledger is
          // the record of what was charged.
          spdlog::debug("{} ok chat={} reservation={}", op_name, self->state.id,
                        reservation_of(x));
          on_success(x);
        }
        self->state.pending.deliver(std::move(x));
        arm_idle_timer(self);
      },
      [self, op_name, id](caf::error& err) {
        err = as_storage_error(op_name, std::move(err));
        log_refusal(self, op_name, id, err);
        if constexpr (std::is_same_v<T, outcome>)
          self->state.pending.deliver(as_outcome(std::move(err)));
        else
          self->state.pending.deliver(std::move(err));
        arm_idle_timer(self);
      });
  return result;
}

auto no_hook = [](const auto&) {
};

/// A notice is a courtesy: losing it must not disturb billing.
void notice_skipped(self_ptr self, reservation_id id, const caf::error& err) {
  spdlog::warn("queue_notice skipped chat={} reservation={} error={}",
               self->state.id, id, error_name(err));
  arm_idle_timer(self);
}

/// The queue notice: only if the reservation is still active in Postgres
/// (the job may have finished, or another server may have committed it).
void check_queue_notice(self_ptr self, reservation_id id) {
  --self->state.notices_pending;
  // Ended through this actor, or this actor reserved a newer one since
  // (one active reservation per chat: the older one has ended): no notice,
  // and no need to ask Postgres.
  if (id == self->state.finished || id != self->state.noticed) {
    arm_idle_timer(self);
    return;
  }
  self
    ->request(self->state.store, self->state.options.store_timeout,
              atom::apply_v,
              operation_on(operation_type::status, self->state.id))
    .await(
      [self, id](outcome& x) {
        if (x.error) {
          notice_skipped(self, id, x.error);
          return;
        }
        if (x.status && x.status->active && x.status->active->id == id) {
          spdlog::info("queue_notice chat={} reservation={}", self->state.id,
                       id);
          self->send(self->state.events, queue_notice{self->state.id, id});
        }
        arm_idle_timer(self);
      },
      [self, id](caf::error& err) { notice_skipped(self, id, err); });
}

/// After a fail: the job ended.
auto fail_hook(self_ptr self) {
  return [self](const reservation& x) {
    self->state.finished = x.id;
  };
}

/// After an uncertain: published once the move committed, so that a
/// reconciler asks the provider and resolves it.
auto uncertain_hook(self_ptr self) {
  return [self](const reservation& x) {
    self->state.finished = x.id;
    if (x.id == self->state.reconcile_published)
      return;
    self->state.reconcile_published = x.id;
    spdlog::info("reconcile_needed chat={} reservation={}", self->state.id,
                 x.id);
    self->send(self->state.events,
               reconcile_needed{self->state.id, x.id, x.provider_ref});
  };
}

/// After a cancel: a queued job ended; a started one, under its kind's
/// `request` policy, was marked, and its worker is told once (a repeated
/// cancel answers the same and publishes nothing more).
auto cancel_hook(self_ptr self) {
  return [self](const reservation& x) {
    if (!x.cancel_requested) {
      self->state.finished = x.id;
      return;
    }
    if (x.id == self->state.cancel_published)
      return;
    self->state.cancel_published = x.id;
    spdlog::info("cancel_requested chat={} reservation={}", self->state.id,
                 x.id);
    self->send(self->state.events, cancel_requested{self->state.id, x.id});
  };
}

/// What a batchable operation's answer tells this actor.
void after_apply(self_ptr self, operation_type type, const outcome& x) {
  if (type == operation_type::reserve && x.reservation)
    arm_queue_notice(self, *x.reservation);
  else if (type == operation_type::commit && x.receipt)
    self->state.finished = x.receipt->reservation;
  else if (type == operation_type::fail && x.reservation)
    fail_hook(self)(*x.reservation);
  else if (type == operation_type::cancel && x.reservation)
    cancel_hook(self)(*x.reservation);
}

/// One of the eight batchable operations; the chat it names is the routing
/// key, and this actor answers for its own.
caf::result<outcome> apply(self_ptr self, operation op) {
  op.chat = self->state.id;
  auto type = op.type;
  auto id = op.reservation;
  auto hook = [self, type](const outcome& x) {
    after_apply(self, type, x);
  };
  return serialize<outcome>(self, to_string(type), id, hook, atom::apply_v,
                            std::move(op));
}

} // namespace

chat_state::~chat_state() {
  if (pending.pending())
    pending.deliver(caf::make_error(ec::storage_unavailable,
                                    "chat actor stopped before Postgres "
                                    "answered; the outcome is unknown"));
}

chat_self_actor::behavior_type
make_chat(chat_self_actor::stateful_pointer<chat_state> self, chat_id id,
          persistence_actor store, chat_owner registry, events_actor events,
          notice_timer_actor notice_timer, chat_options options) {
  install_log_handlers(self);
  self->state.id = id;
  self->state.store = std::move(store);
  self->state.registry = std::move(registry);
  self->state.events = std::move(events);
  self->state.notice_timer = std::move(notice_timer);
  self->state.options = options;
  arm_idle_timer(self);
  // The chat argument is the routing key; this actor answers for its own.
  return {
    [self](atom::create op, chat_spec spec) {
      spec.chat = self->state.id;
      return serialize<chat_status>(self, "create", 0, no_hook, op,
                                    std::move(spec));
    },
    [self](atom::apply, operation& op) { return apply(self, std::move(op)); },
    [self](atom::uncertain op, chat_id, reservation_id id,
           const std::string& provider_ref, const std::string& worker) {
      return serialize<reservation>(self, "uncertain", id, uncertain_hook(self),
                                    op, self->state.id, id, provider_ref,
                                    worker);
    },
    [self](atom::uncertain op, chat_id, reservation_id id,
           const std::string& provider_ref) {
      return serialize<reservation>(self, "uncertain", id, uncertain_hook(self),
                                    op, self->state.id, id, provider_ref);
    },
    [self](atom::resolve op, chat_id, reservation_id id,
           const std::string& outcome, int32_t units) {
      return serialize<resolution>(self, "resolve", id, no_hook, op,
                                   self->state.id, id, outcome, units);
    },
    [self](atom::release op, chat_id, reservation_id id) {
      // Published after the delete committed; a send cannot fail the
      // release, and the chat is never kept locked for a notification.
      auto hook = [self](const reservation_released& x) {
        self->state.finished = x.reservation;
        self->send(self->state.events, x);
      };
      return serialize<reservation_released>(self, "release", id, hook, op,
                                             self->state.id, id);
    },
    [self](atom::top_up op, chat_id, int64_t credits,
           const std::string& payment_id, const grant_terms& terms) {
      return serialize<top_up_receipt>(self, "top_up", 0, no_hook, op,
                                       self->state.id, credits, payment_id,
                                       terms);
    },
    [self](atom::void_grant op, chat_id, int64_t grant,
           const std::string& payment_id) {
      return serialize<grant_info>(self, "void_grant", 0, no_hook, op,
                                   self->state.id, grant, payment_id);
    },
    [self](atom::premium op, chat_id, caf::timestamp until) {
      return serialize<chat_status>(self, "set_premium", 0, no_hook, op,
                                    self->state.id, until);
    },
    [self](atom::flags op, chat_id, const flags_update& x) {
      return serialize<chat_status>(self, "set_flags", 0, no_hook, op,
                                    self->state.id, x);
    },
    [self](atom::limits op, chat_id, const limits_update& x) {
      return serialize<chat_status>(self, "set_limits", 0, no_hook, op,
                                    self->state.id, x);
    },
    [self](atom::store, persistence_actor store) {
      self->state.store = std::move(store);
    },
    [self](atom::notice, reservation_id id) { check_queue_notice(self, id); },
    [self](atom::idle) { on_idle_timer(self); },
    [self](atom::stop) { self->quit(); },
  };
}

} // namespace chargeonce
