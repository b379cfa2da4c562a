// SPDX-License-Identifier: Apache-2.0
#include "client/client.hpp"

#include "client/batcher.hpp"
#include "protocol/batch_request.hpp"
#include "protocol/config.hpp"
#include "protocol/errors.hpp"
#include "protocol/interfaces.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

#include <future>
#include <mutex>
#include <set>

namespace chargeonce::client {

void prepare_config(caf::actor_system_config& cfg, const tls_files& tls) {
  register_protocol(cfg);
  cfg.load<caf::io::middleman>();
  if (tls.on()) {
    cfg.load<caf::openssl::manager>();
    cfg.set("openssl.cafile", tls.ca);
    cfg.set("openssl.certificate", tls.cert);
    cfg.set("openssl.key", tls.key);
  }
  // Servers send a heartbeat every second (their default); five silent
  // seconds drop the connection, which fails its requests fast.
  cfg.set("middleman.heartbeat-interval",
          caf::timespan{std::chrono::seconds(1)});
  cfg.set("middleman.connection-timeout",
          caf::timespan{std::chrono::seconds(5)});
  // A request and its answer cross threads several times: see
  // prefer_few_workers. Settings parsed after this call override it.
  prefer_few_workers(cfg);
  deserialize_on_middleman_thread(cfg);
}

namespace {

bool offers(caf::actor_system& sys, role r, const std::set<std::string>& ifs) {
  switch (r) {
  case role::gateway:
    return sys.assignable<gateway_actor>(ifs);
  case role::worker:
    return sys.assignable<worker_actor>(ifs);
  case role::admin:
    return sys.assignable<admin_actor>(ifs);
  default:
    return sys.assignable<api_actor>(ifs);
  }
}

/// A connection, and whether its endpoint takes batches.
struct connected {
  caf::actor handle;
  bool batches = false;
};

/// What the middleman's connect answered, as a connection of role `r`.
caf::expected<connected> connected_from(caf::actor_system& sys, role r,
                                        caf::strong_actor_ptr& ptr,
                                        const std::set<std::string>& ifs) {
  if (!ptr)
    return caf::make_error(caf::sec::no_actor_published_at_port);
  if (!offers(sys, r, ifs))
    return caf::make_error(caf::sec::unexpected_actor_messaging_interface,
                           "this port does not offer the command's role");
  return connected{caf::actor_cast<caf::actor>(std::move(ptr)),
                   sys.assignable<caf::typed_actor<batch_signature>>(ifs)};
}

caf::io::middleman_actor manager_of(caf::actor_system& sys, bool tls) {
  return tls ? sys.openssl_manager().actor_handle()
             : sys.middleman().actor_handle();
}

/// What `remote_actor` does, but bounded by `timeout`: remote_actor waits
/// forever for a peer that accepts TCP and never finishes the handshake.
caf::expected<connected> connect(caf::actor_system& sys, const endpoint& to,
                                 role r, bool tls, caf::timespan timeout) {
  caf::expected<connected> out{caf::sec::none};
  caf::scoped_actor self{sys};
  self
    ->request(manager_of(sys, tls), timeout, caf::connect_atom_v, to.host,
              to.port)
    .receive(
      [&](const caf::node_id&, caf::strong_actor_ptr& ptr,
          const std::set<std::string>& ifs) {
        out = connected_from(sys, r, ptr, ifs);
      },
      [&](caf::error& err) { out = std::move(err); });
  return out;
}

/// An actor that makes one request for an asynchronous call stops when
/// `lifetime` (the client's watcher) does: its call is then answered at
/// once (request_receiver_down), not at its timeout, and on this actor's
/// thread.
void bind_to(caf::event_based_actor* self, const caf::actor& lifetime) {
  self->set_down_handler(
    [self](caf::down_msg&) { self->quit(caf::exit_reason::user_shutdown); });
  self->monitor(lifetime);
}

/// The same without blocking: `then` runs on an actor of its own.
void connect_async(caf::actor_system& sys, const endpoint& to, role r, bool tls,
                   caf::timespan timeout,
                   std::function<void(caf::expected<connected>)> then) {
  auto manager = manager_of(sys, tls);
  // Not bound to the client's lifetime: an actor that quits while the
  // middleman still works on its connect can keep the actor system from
  // shutting down (seen with CAF 0.17.6). Bounded by `timeout` instead.
  sys.spawn([=](caf::event_based_actor* self) {
    self->request(manager, timeout, caf::connect_atom_v, to.host, to.port)
      .then(
        [self, r, then](const caf::node_id&, caf::strong_actor_ptr& ptr,
                        const std::set<std::string>& ifs) {
          then(connected_from(self->system(), r, ptr, ifs));
        },
        [then](caf::error& err) { then(std::move(err)); });
  });
}

using answer_fn = std::function<void(outcome)>;

/// An operation sent on its own (a server without batches, or batching
/// off), without blocking: the request is made by an actor of its own.
void ask_async(caf::actor_system& sys, const caf::actor& lifetime,
               const caf::actor& to, caf::timespan timeout, const operation& op,
               answer_fn done) {
  sys.spawn([=](caf::event_based_actor* self) {
    bind_to(self, lifetime);
    request_operation(self, to, timeout, op, done);
  });
}

bool is_service_error(const caf::error& err) {
  return err.category() == caf::atom(error_category_name);
}

/// The value an operation's outcome carries for the caller's type.
template <class T>
caf::expected<T> value_of(outcome&& x, caf::optional<T> outcome::*member) {
  if (x.error)
    return std::move(x.error);
  if (!(x.*member))
    return caf::make_error(caf::sec::unexpected_response,
                           "the batch answer lacks the operation's value");
  return std::move(*(x.*member));
}

/// Administration never travels in a batch (call passes no operation).
template <class T>
caf::expected<T> from_outcome(outcome&&, T*) {
  return caf::make_error(caf::sec::unexpected_response,
                         "this operation does not travel in batches");
}

caf::expected<reservation> from_outcome(outcome&& x, reservation*) {
  return value_of(std::move(x), &outcome::reservation);
}

caf::expected<receipt> from_outcome(outcome&& x, receipt*) {
  return value_of(std::move(x), &outcome::receipt);
}

caf::expected<chat_status> from_outcome(outcome&& x, chat_status*) {
  return value_of(std::move(x), &outcome::status);
}

} // namespace

// -- state shared with the watcher actor --------------------------------------

struct client::impl : std::enable_shared_from_this<client::impl> {
  caf::actor_system& sys;
  options opts;
  std::mutex mtx;
  std::vector<caf::actor> connections; ///< by server index; null: none yet
  std::vector<bool> batches;           ///< by server index: takes batches
  std::unique_ptr<batcher> batching;   ///< null when batching is off
  std::function<void(const endpoint&)> lost;
  caf::actor watcher; ///< monitors connections, forgets the dead ones

  impl(caf::actor_system& sys, options opts)
      : sys(sys), opts(std::move(opts)), connections(this->opts.servers.size()),
        batches(this->opts.servers.size()) {
    if (this->opts.batching)
      batching = std::make_unique<batcher>(
        sys, batcher_options{this->opts.timeout, 4, 256});
  }

  /// Called by the watcher: the server at `addr` went away.
  void forget(const caf::actor_addr& addr) {
    std::function<void(const endpoint&)> notify;
    endpoint which;
    {
      std::lock_guard<std::mutex> guard{mtx};
      for (size_t i = 0; i < connections.size(); ++i)
        if (connections[i] && connections[i].address() == addr) {
          connections[i] = nullptr;
          notify = lost;
          which = opts.servers[i];
        }
    }
    if (notify)
      notify(which);
  }

  void forget(size_t server) {
    std::lock_guard<std::mutex> guard{mtx};
    connections[server] = nullptr;
  }

  caf::expected<caf::actor> connection(size_t server) {
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (connections[server])
        return connections[server];
    }
    auto fresh =
      connect(sys, opts.servers[server], opts.facade, opts.tls, opts.timeout);
    if (!fresh)
      return fresh.error();
    adopt(server, *fresh);
    return fresh->handle;
  }

  /// A fresh connection becomes the server's, watched for going away.
  void adopt(size_t server, const connected& fresh) {
    caf::anon_send(watcher, fresh.handle);
    std::lock_guard<std::mutex> guard{mtx};
    connections[server] = fresh.handle;
    batches[server] = fresh.batches;
  }

  bool takes_batches(size_t server) {
    std::lock_guard<std::mutex> guard{mtx};
    return batching != nullptr && batches[server];
  }

  /// One operation through the batcher: shares a message with whatever
  /// other threads send to the same server meanwhile.
  template <class T>
  caf::expected<T> batched(const caf::actor& to, const operation& op) {
    auto answer = batching->submit(to, op);
    // The batch request has its own timeout; this bound only guards
    // against a sender that went away.
    if (answer.wait_for(opts.timeout + std::chrono::seconds(1))
        != std::future_status::ready)
      return caf::make_error(caf::sec::request_timeout);
    try {
      return from_outcome(answer.get(), static_cast<T*>(nullptr));
    } catch (const std::future_error&) {
      return caf::make_error(caf::sec::request_timeout,
                             "the client's batch sender stopped");
    }
  }

  /// One request of its own.
  template <class T, class... Ts>
  caf::expected<T> single(const caf::actor& to, const Ts&... xs) {
    caf::expected<T> out{caf::sec::none};
    caf::scoped_actor self{sys};
    self->request(to, opts.timeout, xs...)
      .receive([&](T& x) { out = std::move(x); },
               [&](caf::error& err) { out = std::move(err); });
    return out;
  }

  /// Sends to the chat's home; on a connection error, forgets that
  /// connection and, if the operation is safe to repeat, tries the chat's
  /// next server.
  /// `op`, when given, lets the operation travel in a batch.
  template <class T, class... Ts>
  caf::expected<T> call(chat_id chat, bool retry_safe,
                        const caf::optional<operation>& op, const Ts&... xs) {
    caf::error last = caf::make_error(caf::sec::no_actor_published_at_port);
    for (auto server : rank(opts.servers, chat)) {
      auto to = connection(server);
      if (to) {
        auto out = op && takes_batches(server) ? batched<T>(*to, *op)
                                               : single<T>(*to, xs...);
        if (out || is_service_error(out.error()))
          return out;
        last = out.error();
        forget(server);
      } else {
        last = to.error();
      }
      if (!retry_safe)
        break;
    }
    return last;
  }

  // -- asynchronous calls ----------------------------------------------------

  /// One asynchronous call on its way through the chat's servers. Every
  /// step holds it; if the last holder lets go unanswered (the client shut
  /// down meanwhile), the destructor answers.
  struct async_call {
    operation op;
    bool retry_safe = false;
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
  using call_ptr = std::shared_ptr<async_call>;

  template <class T>
  void async(chat_id chat, bool retry_safe, operation op,
             continuation<T> then) {
    auto c = std::make_shared<async_call>();
    c->op = std::move(op);
    c->retry_safe = retry_safe;
    c->servers = rank(opts.servers, chat);
    c->answer = [then = std::move(then)](outcome x) {
      then(from_outcome(std::move(x), static_cast<T*>(nullptr)));
    };
    if (c->servers.empty()) {
      // Answered by an actor all the same: never inside the call.
      sys.spawn(
        [c](caf::event_based_actor*) { c->finish(as_outcome(c->last)); });
      return;
    }
    dispatch(c);
  }

  /// Tries the call's next server, connecting first if needed; answers
  /// with the last error once no server is left to try.
  void dispatch(const call_ptr& c) {
    if (c->next >= c->servers.size() || (c->next > 0 && !c->retry_safe)) {
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

  /// Sends the call to `to`; a connection error forgets that connection and
  /// moves on to the chat's next server, as the blocking calls do.
  void send_async(const call_ptr& c, size_t server, const caf::actor& to,
                  bool batch) {
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
};

namespace {

/// Monitors every connection handed to it and tells the client when one
/// goes down, so the next call reconnects instead of waiting for a timeout.
caf::behavior connection_watcher(caf::event_based_actor* self,
                                 client::impl* owner) {
  self->set_down_handler(
    [owner](caf::down_msg& msg) { owner->forget(msg.source); });
  return {
    [self](const caf::actor& connection) { self->monitor(connection); },
  };
}

/// A batchable operation without a kind or request_id.
operation op(operation_type type, chat_id chat, reservation_id id = 0) {
  return {type, chat, id, kind::text, {}};
}

} // namespace

client::client(caf::actor_system& sys, options opts)
    : impl_(std::make_shared<impl>(sys, std::move(opts))) {
  impl_->watcher = sys.spawn(connection_watcher, impl_.get());
}

client::~client() {
  // The watcher holds a raw pointer to impl_: stop it and wait for it.
  caf::scoped_actor self{impl_->sys};
  self->monitor(impl_->watcher);
  self->send_exit(impl_->watcher, caf::exit_reason::user_shutdown);
  self->receive([](const caf::down_msg&) {});
}

const endpoint& client::home(chat_id chat) const {
  return impl_->opts.servers[rank(impl_->opts.servers, chat).front()];
}

std::pair<uint64_t, uint64_t> client::batches_sent() const {
  if (!impl_->batching)
    return {0, 0};
  auto x = impl_->batching->sent();
  return {x.batches, x.operations};
}

void client::on_server_lost(std::function<void(const endpoint&)> f) {
  std::lock_guard<std::mutex> guard{impl_->mtx};
  impl_->lost = std::move(f);
}

caf::expected<chat_status> client::touch(chat_id chat) {
  return impl_->call<chat_status>(chat, true, op(operation_type::touch, chat),
                                  atom::touch_v, chat);
}

caf::expected<reservation> client::reserve(chat_id chat, kind k,
                                           const std::string& request_id) {
  // Without a request_id a repeat would be a second request (busy).
  return impl_->call<reservation>(
    chat, !request_id.empty(),
    operation{operation_type::reserve, chat, 0, k, request_id}, atom::reserve_v,
    chat, k, request_id);
}

caf::expected<reservation> client::cancel(chat_id chat) {
  return impl_->call<reservation>(chat, false, op(operation_type::cancel, chat),
                                  atom::cancel_v, chat);
}

caf::expected<chat_status> client::status(chat_id chat) {
  return impl_->call<chat_status>(chat, true, op(operation_type::status, chat),
                                  atom::status_v, chat);
}

caf::expected<reservation> client::start(chat_id chat, reservation_id id) {
  return impl_->call<reservation>(
    chat, true, op(operation_type::start, chat, id), atom::start_v, chat, id);
}

caf::expected<reservation> client::heartbeat(chat_id chat, reservation_id id) {
  return impl_->call<reservation>(chat, true,
                                  op(operation_type::heartbeat, chat, id),
                                  atom::heartbeat_v, chat, id);
}

caf::expected<receipt> client::commit(chat_id chat, reservation_id id) {
  return impl_->call<receipt>(chat, true, op(operation_type::commit, chat, id),
                              atom::commit_v, chat, id);
}

caf::expected<reservation> client::fail(chat_id chat, reservation_id id) {
  return impl_->call<reservation>(
    chat, true, op(operation_type::fail, chat, id), atom::fail_v, chat, id);
}

void client::touch(chat_id chat, continuation<chat_status> then) {
  impl_->async(chat, true, op(operation_type::touch, chat), std::move(then));
}

void client::reserve(chat_id chat, kind k, const std::string& request_id,
                     continuation<reservation> then) {
  impl_->async(chat, !request_id.empty(),
               operation{operation_type::reserve, chat, 0, k, request_id},
               std::move(then));
}

void client::cancel(chat_id chat, continuation<reservation> then) {
  impl_->async(chat, false, op(operation_type::cancel, chat), std::move(then));
}

void client::status(chat_id chat, continuation<chat_status> then) {
  impl_->async(chat, true, op(operation_type::status, chat), std::move(then));
}

void client::start(chat_id chat, reservation_id id,
                   continuation<reservation> then) {
  impl_->async(chat, true, op(operation_type::start, chat, id),
               std::move(then));
}

void client::heartbeat(chat_id chat, reservation_id id,
                       continuation<reservation> then) {
  impl_->async(chat, true, op(operation_type::heartbeat, chat, id),
               std::move(then));
}

void client::commit(chat_id chat, reservation_id id,
                    continuation<receipt> then) {
  impl_->async(chat, true, op(operation_type::commit, chat, id),
               std::move(then));
}

void client::fail(chat_id chat, reservation_id id,
                  continuation<reservation> then) {
  impl_->async(chat, true, op(operation_type::fail, chat, id), std::move(then));
}

caf::expected<chat_status> client::create(const chat_spec& spec) {
  return impl_->call<chat_status>(spec.chat, false, caf::none, atom::create_v,
                                  spec);
}

caf::expected<top_up_receipt> client::top_up(chat_id chat, int64_t credits,
                                             const std::string& payment_id) {
  return impl_->call<top_up_receipt>(chat, true, caf::none, atom::top_up_v,
                                     chat, credits, payment_id);
}

caf::expected<chat_status> client::set_premium(chat_id chat,
                                               caf::timestamp until) {
  return impl_->call<chat_status>(chat, true, caf::none, atom::premium_v, chat,
                                  until);
}

caf::expected<chat_status> client::set_flags(chat_id chat,
                                             const flags_update& x) {
  return impl_->call<chat_status>(chat, true, caf::none, atom::flags_v, chat,
                                  x);
}

caf::expected<size_t> client::subscribe(const caf::actor& who) {
  size_t accepted = 0;
  caf::error last;
  for (size_t server = 0; server < impl_->opts.servers.size(); ++server) {
    auto to = impl_->connection(server);
    if (!to) {
      last = to.error();
      continue;
    }
    caf::scoped_actor self{impl_->sys};
    self->request(*to, impl_->opts.timeout, atom::subscribe_v, who)
      .receive([&](bool ok) { accepted += ok ? 1 : 0; },
               [&](caf::error& err) { last = std::move(err); });
  }
  if (accepted == 0 && last)
    return last;
  return accepted;
}

} // namespace chargeonce::client
