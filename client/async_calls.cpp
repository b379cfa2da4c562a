// SPDX-License-Identifier: Apache-2.0
// The asynchronous calls: a call travels through its chat's servers from
// one actor's answer to the next, parking no thread, and its continuation
// runs exactly once.
#include "client/client_impl.hpp"
#include "protocol/batch_request.hpp"
#include "protocol/validation.hpp"

#include <caf/all.hpp>

namespace chargeonce::client {

namespace {

/// An actor that makes one request for an asynchronous call stops when
/// `lifetime` (the client's watcher) does: its call is then answered at
/// once (request_receiver_down), not at its timeout, and on this actor's
/// thread.
void bind_to(caf::event_based_actor* self, const caf::actor& lifetime) {
  self->set_down_handler(
    [self](caf::down_msg&) { self->quit(caf::exit_reason::user_shutdown); });
  self->monitor(lifetime);
}

/// An operation sent on its own (a server without batches, or batching
/// off), without blocking: the request is made by an actor of its own.
void ask_async(caf::actor_system& sys, const caf::actor& lifetime,
               const caf::actor& to, caf::timespan timeout, const operation& op,
               answer_fn done) {
  sys.spawn([=, done = std::move(done)](caf::event_based_actor* self) {
    bind_to(self, lifetime);
    request_operation(self, to, timeout, op, done);
  });
}

} // namespace

// -- one call on its way ------------------------------------------------------

/// One asynchronous call on its way through the chat's servers. Every step
/// holds it; if the last holder lets go unanswered (the client shut down
/// meanwhile), the destructor answers.
struct client::impl::async_call {
  operation op;
  bool may_retry = false;      ///< retry_safe(op), decided once
  std::vector<size_t> servers; ///< the chat's ranking
  size_t next = 0;             ///< index into servers of the next try
  caf::error last = caf::make_error(caf::sec::no_actor_published_at_port);
  answer_fn answer;

  /// noexcept: a continuation that throws would otherwise unwind through
  /// (and stop) the actor answering every other caller.
  void finish(outcome x) noexcept {
    auto f = std::move(answer);
    answer = nullptr;
    if (f)
      f(std::move(x));
  }

  ~async_call() {
    finish(as_outcome(caf::make_error(caf::sec::request_receiver_down,
                                      "the client shut down before the call "
                                      "was answered")));
  }
};

template <class T>
void client::impl::refuse(caf::error err, continuation<T> then) {
  // Answered by an actor all the same: never inside the call.
  sys.spawn([err = std::move(err), then = std::move(then)](
              caf::event_based_actor*) mutable { then(std::move(err)); });
}

template <class T>
void client::impl::async(operation op, continuation<T> then) {
  auto c = std::make_shared<async_call>();
  c->may_retry = retry_safe(op);
  c->servers = rank(opts.servers, op.chat);
  c->op = std::move(op);
  c->answer = [then = std::move(then)](outcome x) {
    then(from_outcome(std::move(x), static_cast<T*>(nullptr)));
  };
  if (c->servers.empty()) {
    // Answered by an actor all the same: never inside the call.
    sys.spawn([c](caf::event_based_actor*) { c->finish(as_outcome(c->last)); });
    return;
  }
  dispatch(c);
}

void client::impl::dispatch(const call_ptr& c) {
  if (c->next >= c->servers.size() || (c->next > 0 && !c->may_retry)) {
    c->finish(as_outcome(c->last));
    return;
  }
  auto server = c->servers[c->next];
  caf::actor to;
  bool batch = false;
  {
    std::lock_guard<std::mutex> guard{mtx};
    to = connections[server];
    batch = batching != nullptr && batches[server];
  }
  if (to) {
    send_async(c, server, to, batch);
    return;
  }
  connect_async(
    sys, opts.servers[server], opts.facade, opts.tls, opts.timeout,
    [weak = weak_from_this(), c, server](caf::expected<connected> fresh) {
      auto self = weak.lock();
      if (!self)
        return; // c answers as it goes
      if (!fresh) {
        c->last = fresh.error();
        ++c->next;
        self->dispatch(c);
        return;
      }
      self->adopt(server, *fresh);
      self->send_async(c, server, fresh->handle,
                       self->batching && fresh->batches);
    });
}

void client::impl::send_async(const call_ptr& c, size_t server,
                              const caf::actor& to, bool batch) {
  auto done = [weak = weak_from_this(), c, server](outcome x) {
    if (!x.error || is_service_error(x.error)) {
      c->finish(std::move(x));
      return;
    }
    c->last = std::move(x.error);
    auto self = weak.lock();
    if (!self) {
      c->finish(as_outcome(c->last));
      return;
    }
    self->forget(server);
    ++c->next;
    self->dispatch(c);
  };
  if (batch)
    batching->submit(to, c->op, std::move(done));
  else
    ask_async(sys, watcher, to, opts.timeout, c->op, std::move(done));
}

// -- the hot path -------------------------------------------------------------

void client::touch(chat_id chat, continuation<chat_status> then) {
  impl_->async(operation_of(operation_type::touch, chat), std::move(then));
}

void client::reserve(chat_id chat, const kind& k, const std::string& request_id,
                     continuation<reservation> then) {
  // An id of the client's own where the caller gave none (retry.hpp).
  auto id = request_id.empty() ? make_auto_request_id() : request_id;
  impl_->async(operation{operation_type::reserve, chat, 0, k, id, 0},
               std::move(then));
}

void client::reserve(chat_id chat, const kind& k, const std::string& request_id,
                     int32_t units, continuation<reservation> then) {
  // In a batch, units 0 stands for "not given": refused here, not sent.
  if (auto err = validate_given_units(units)) {
    impl_->refuse(std::move(err), std::move(then));
    return;
  }
  auto id = request_id.empty() ? make_auto_request_id() : request_id;
  impl_->async(operation{operation_type::reserve, chat, 0, k, id, units},
               std::move(then));
}

void client::cancel(chat_id chat, continuation<reservation> then) {
  impl_->async(operation_of(operation_type::cancel, chat), std::move(then));
}

void client::cancel(chat_id chat, reservation_id id,
                    const std::string& request_id,
                    continuation<reservation> then) {
  impl_->async(
    operation{operation_type::cancel, chat, id, kind::text, request_id},
    std::move(then));
}

void client::status(chat_id chat, continuation<chat_status> then) {
  impl_->async(operation_of(operation_type::status, chat), std::move(then));
}

void client::start(chat_id chat, reservation_id id,
                   continuation<reservation> then) {
  impl_->async(operation_of(operation_type::start, chat, id), std::move(then));
}

void client::heartbeat(chat_id chat, reservation_id id,
                       continuation<reservation> then) {
  impl_->async(operation_of(operation_type::heartbeat, chat, id),
               std::move(then));
}

void client::commit(chat_id chat, reservation_id id,
                    continuation<receipt> then) {
  impl_->async(operation_of(operation_type::commit, chat, id), std::move(then));
}

void client::commit(chat_id chat, reservation_id id, int32_t units,
                    continuation<receipt> then) {
  // In a batch, units 0 stands for "not given": refused here, not sent.
  if (auto err = validate_given_units(units)) {
    impl_->refuse(std::move(err), std::move(then));
    return;
  }
  auto op = operation_of(operation_type::commit, chat, id);
  op.units = units;
  impl_->async(std::move(op), std::move(then));
}

void client::fail(chat_id chat, reservation_id id,
                  continuation<reservation> then) {
  impl_->async(operation_of(operation_type::fail, chat, id), std::move(then));
}

void client::start(chat_id chat, reservation_id id, const std::string& worker,
                   continuation<reservation> then) {
  impl_->async(of_worker(operation_type::start, chat, id, worker),
               std::move(then));
}

void client::heartbeat(chat_id chat, reservation_id id,
                       const std::string& worker,
                       continuation<reservation> then) {
  impl_->async(of_worker(operation_type::heartbeat, chat, id, worker),
               std::move(then));
}

void client::commit(chat_id chat, reservation_id id, const std::string& worker,
                    continuation<receipt> then) {
  impl_->async(of_worker(operation_type::commit, chat, id, worker),
               std::move(then));
}

void client::commit(chat_id chat, reservation_id id, int32_t units,
                    const std::string& worker, continuation<receipt> then) {
  if (auto err = validate_given_units(units)) {
    impl_->refuse(std::move(err), std::move(then));
    return;
  }
  auto op = of_worker(operation_type::commit, chat, id, worker);
  op.units = units;
  impl_->async(std::move(op), std::move(then));
}

void client::fail(chat_id chat, reservation_id id, const std::string& worker,
                  continuation<reservation> then) {
  impl_->async(of_worker(operation_type::fail, chat, id, worker),
               std::move(then));
}

} // namespace chargeonce::client
