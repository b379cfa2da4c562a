// SPDX-License-Identifier: Apache-2.0
// Connecting and failing over: the client's config, connects with a bound,
// one connection per server (forgotten when it dies, adopted when fresh)
// and the watcher that notices dead ones.
#include "client/client_impl.hpp"
#include "protocol/config.hpp"
#include "protocol/errors.hpp"
#include "protocol/interfaces.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>

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

// -- connecting ---------------------------------------------------------------

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

} // namespace

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

void connect_async(caf::actor_system& sys, const endpoint& to, role r, bool tls,
                   caf::timespan timeout,
                   std::function<void(caf::expected<connected>)> then) {
  auto manager = manager_of(sys, tls);
  // Not bound to the client's lifetime: an actor that quits while the
  // middleman still works on its connect can keep the actor system from
  // shutting down (seen with CAF 0.17.6). Bounded by `timeout` instead.
  sys.spawn([=, then = std::move(then)](caf::event_based_actor* self) {
    self->request(manager, timeout, caf::connect_atom_v, to.host, to.port)
      .then(
        [self, r, then](const caf::node_id&, caf::strong_actor_ptr& ptr,
                        const std::set<std::string>& ifs) {
          then(connected_from(self->system(), r, ptr, ifs));
        },
        [then](caf::error& err) { then(std::move(err)); });
  });
}

bool is_service_error(const caf::error& err) {
  return err.category() == caf::atom(error_category_name);
}

// -- one connection per server ------------------------------------------------

client::impl::impl(caf::actor_system& sys, options opts)
    : sys(sys), opts(std::move(opts)), connections(this->opts.servers.size()),
      batches(this->opts.servers.size()) {
  if (this->opts.batching) {
    batcher_options batches_opts; // the batcher's defaults but the timeout
    batches_opts.timeout = this->opts.timeout;
    batching = std::make_unique<batcher>(sys, batches_opts);
  }
}

void client::impl::forget(const caf::actor_addr& addr) {
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

void client::impl::forget(size_t server) {
  std::lock_guard<std::mutex> guard{mtx};
  connections[server] = nullptr;
}

caf::expected<caf::actor> client::impl::connection(size_t server) {
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

void client::impl::adopt(size_t server, const connected& fresh) {
  caf::anon_send(watcher, fresh.handle);
  std::lock_guard<std::mutex> guard{mtx};
  connections[server] = fresh.handle;
  batches[server] = fresh.batches;
}

bool client::impl::takes_batches(size_t server) {
  std::lock_guard<std::mutex> guard{mtx};
  return batching != nullptr && batches[server];
}

// -- the client's lifetime ----------------------------------------------------

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

} // namespace chargeonce::client
