// SPDX-License-Identifier: Apache-2.0
#include "main/http/server.hpp"

#include "actors/facade_actor.hpp"
#include "actors/metrics/rendering.hpp"
#include "main/http/errors.hpp"
#include "main/http/handlers.hpp"
#include "main/http/routes.hpp"
#include "persistence/health.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <csignal>
#include <httplib.h>
#include <sys/socket.h>
#include <thread>

namespace chargeonce::http {

namespace {

/// Probes within this long share one Postgres check.
constexpr auto ready_cache_duration = std::chrono::seconds(1);

/// How long /readyz waits for Postgres.
constexpr auto ready_timeout = std::chrono::seconds(2);

/// How long /readyz waits for the actors: a live registry answers in
/// microseconds, one this far behind serves nobody in time either.
constexpr auto actors_ready_timeout = std::chrono::seconds(1);

/// Requests per keep-alive connection before it is closed.
constexpr size_t keep_alive_requests_max = 100;

/// Events queued per /v1/events stream before the stream is dropped.
constexpr size_t stream_buffer_max = 256;

template <class T>
T http_seconds(caf::timespan x) {
  return static_cast<T>(
    std::chrono::duration_cast<std::chrono::seconds>(x).count());
}

std::unique_ptr<httplib::Server> make_server(const http_options& opts) {
  if (!opts.tls())
    return std::make_unique<httplib::Server>();
  // Server-side TLS only: bearer tokens authenticate HTTP clients, so that
  // plain HTTPS clients (PHP, Python) need no client certificate.
  return std::make_unique<httplib::SSLServer>(opts.tls_cert.c_str(),
                                              opts.tls_key.c_str());
}

std::array<std::string, 4> tokens_of(const http_options& opts) {
  return {std::string{}, opts.gateway_token, opts.worker_token,
          opts.admin_token};
}

bool chunked(const httplib::Request& req) {
  auto te = req.get_header_value("Transfer-Encoding");
  return te.find("chunked") != std::string::npos;
}

/// Reads the body into `out`, at most `max` bytes, or answers 413/400 and
/// returns false. We read it ourselves: httplib 0.11 bounds only bodies
/// with a Content-Length, and would wait for the end of the connection on a
/// POST that has neither length nor chunks (RFC 9112: that has no body).
bool read_body(const httplib::Request& req, httplib::Response& res,
               const httplib::ContentReader& read, size_t max,
               std::string& out) {
  if (!chunked(req) && !req.has_header("Content-Length"))
    return true;
  auto too_large = [&] {
    res.set_header("Connection", "close"); // the rest is never read
    send(res,
         error_reply(413, "payload_too_large",
                     "the body exceeds " + std::to_string(max) + " bytes"));
    return false;
  };
  // Refused before a byte is read: skipping a huge body would hold a thread.
  if (req.get_header_value<uint64_t>("Content-Length") > max)
    return too_large();
  bool over = false;
  auto ok = read([&](const char* data, size_t n) {
    over = out.size() + n > max;
    if (!over)
      out.append(data, n);
    return !over;
  });
  if (ok)
    return true;
  if (over)
    return too_large();
  res.set_header("Connection", "close");
  send(res, error_reply(400, "bad_request",
                        "the body could not be read (timeout or bad "
                        "chunking)"));
  return false;
}

/// Routes every method through our dispatcher (404/405 are ours) and gives
/// httplib's own refusals (bad request line, ...) a JSON body.
void install_handlers(httplib::Server& svr, backend& be, size_t body_max) {
  auto plain = [&be](const httplib::Request& req, httplib::Response& res) {
    dispatch(be, req, std::string{}, res);
  };
  auto with_body = [&be, body_max](const httplib::Request& req,
                                   httplib::Response& res,
                                   const httplib::ContentReader& read) {
    std::string body;
    if (read_body(req, res, read, body_max, body))
      dispatch(be, req, body, res);
  };
  svr.Get(".*", plain);
  svr.Options(".*", plain);
  svr.Post(".*", with_body);
  svr.Put(".*", with_body);
  svr.Patch(".*", with_body);
  svr.Delete(".*", with_body);
  svr.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty())
      send(res, error_reply(res.status, error_name_of_status(res.status),
                            "refused by the HTTP layer"));
  });
  // Whatever a route throws is a bug: a 500 naming the log line's id.
  svr.set_exception_handler(reply_to_exception);
  svr.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    spdlog::debug("http method={} path={} status={} remote={}", req.method,
                  req.path, res.status, req.remote_addr);
  });
}

void apply_limits(httplib::Server& svr, const http_options& opts) {
  auto threads = opts.threads;
  // A fixed pool: at most `threads` connections are served at once; the
  // others wait in the accept queue. Timeouts bound how long each holds on.
  svr.new_task_queue = [threads] {
    return new httplib::ThreadPool(threads);
  };
  svr.set_payload_max_length(opts.body_max);
  svr.set_read_timeout(http_seconds<time_t>(opts.io_timeout));
  svr.set_write_timeout(http_seconds<time_t>(opts.io_timeout));
  // A connection holds a pool thread while it is open, so an idle one is
  // closed as soon as a stalled read would be.
  svr.set_keep_alive_timeout(http_seconds<time_t>(opts.io_timeout));
  svr.set_keep_alive_max_count(keep_alive_requests_max);
  // httplib writes a response in pieces; with Nagle on, every piece after
  // the first waits for the client's delayed ACK (~40 ms per request on a
  // kept-alive connection, as every client library keeps them).
  svr.set_tcp_nodelay(true);
}

} // namespace

struct server::impl {
  backend be;
  std::unique_ptr<httplib::Server> svr;
  std::thread listener;
  uint16_t port = 0;
  int socket = -1; ///< the listening socket, once httplib made it
};

namespace {

/// Debian's httplib listens with the backlog compiled into it, 5: a burst
/// of more new connections than that, while the accept thread waits for a
/// core, has its SYNs dropped (retried a second later) and can leave a
/// client with a reset connection. The socket is noted as httplib sets its
/// options, and listened on again with the system's limit once bound
/// (listen(2) on a listening socket only changes its backlog).
void note_socket(httplib::Server& svr, int& socket) {
  svr.set_socket_options([&socket](socket_t sock) {
    httplib::default_socket_options(sock);
    socket = sock;
  });
}

bool widen_backlog(int socket) {
  return socket >= 0 && ::listen(socket, SOMAXCONN) == 0;
}

} // namespace

server::server(std::unique_ptr<impl> x) : impl_(std::move(x)) {}

caf::expected<std::unique_ptr<server>>
server::start(caf::actor_system& sys, const http_options& opts,
              const core_actor& api, const std::string& dsn,
              const liveness_actor& core) {
  if (!opts.enabled())
    return std::unique_ptr<server>{};
  // A client that hangs up mid-response must not kill the process: writes
  // then fail with EPIPE instead.
  std::signal(SIGPIPE, SIG_IGN);
  auto x = std::make_unique<impl>();
  auto& be = x->be;
  be.sys = &sys;
  be.gateway = sys.spawn(make_gateway, api);
  be.worker = sys.spawn(make_worker, api);
  be.admin = sys.spawn(make_admin, api);
  be.request_timeout = opts.request_timeout;
  be.dsn = dsn;
  be.core = core;
  be.tokens = tokens_of(opts);
  be.streams_max = opts.streams_max;
  be.stream_buffer_max = stream_buffer_max;
  x->svr = make_server(opts);
  std::unique_ptr<server> out{new server(std::move(x))};
  auto& svr = *out->impl_->svr;
  if (!svr.is_valid())
    return caf::make_error(caf::sec::runtime_error,
                           "HTTP: cannot load tls-cert/tls-key");
  apply_limits(svr, opts);
  note_socket(svr, out->impl_->socket);
  install_handlers(svr, out->impl_->be, opts.body_max);
  int port = opts.port == 0
               ? svr.bind_to_any_port(opts.address)
               : (svr.bind_to_port(opts.address, opts.port) ? opts.port : -1);
  if (port <= 0)
    return caf::make_error(caf::sec::cannot_open_port,
                           "HTTP: cannot bind " + opts.address + ":"
                             + std::to_string(opts.port));
  out->impl_->port = static_cast<uint16_t>(port);
  if (!widen_backlog(out->impl_->socket))
    spdlog::warn("http cannot widen its listen backlog: bursts of new "
                 "connections may wait a second");
  out->impl_->listener = std::thread{[&svr] {
    svr.listen_after_bind();
  }};
  for (auto who : {role::gateway, role::worker, role::admin})
    if (out->impl_->be.tokens[static_cast<size_t>(who)].empty())
      spdlog::warn("http role={} has no token: its routes answer 403",
                   to_string(who));
  spdlog::info("listening role=http address={} port={} tls={} threads={}",
               opts.address, port, opts.tls(), opts.threads);
  return out;
}

server::~server() {
  if (!impl_)
    return;
  impl_->svr->stop(); // event streams see it within one ping interval
  if (impl_->listener.joinable())
    impl_->listener.join(); // joins the pool: requests in flight finish
  auto& be = impl_->be;
  for (const auto& h : {caf::actor_cast<caf::actor>(be.gateway),
                        caf::actor_cast<caf::actor>(be.worker),
                        caf::actor_cast<caf::actor>(be.admin)})
    caf::anon_send_exit(h, caf::exit_reason::user_shutdown);
  spdlog::info("http stopped port={}", impl_->port);
}

uint16_t server::port() const {
  return impl_->port;
}

// -- operations routes
// ---------------------------------------------------------

void healthz(exchange& x) {
  send(x.res, {200, {{"status", "ok"}}});
}

namespace {

/// Why the actor tree cannot serve, or "" when the supervisor and the
/// registry answered the ping. A dead one fails at once (the request
/// bounces), a stuck one after actors_ready_timeout.
std::string actors_down(const backend& be) {
  if (!be.core)
    return "actors: no supervisor to ask";
  std::string out;
  caf::scoped_actor self{*be.sys};
  self->request(be.core, actors_ready_timeout, atom::ping_v)
    .receive([](caf::ok_atom) {},
             [&out](const caf::error& err) {
               if (err == caf::sec::request_receiver_down)
                 out = "actors: registry down";
               else if (err == caf::sec::request_timeout)
                 out =
                   "actors: registry did not answer within "
                   + std::to_string(
                     std::chrono::milliseconds{actors_ready_timeout}.count())
                   + " ms";
               else
                 out = "actors: " + caf::to_string(err);
             });
  return out;
}

/// Why Postgres cannot serve billing, or "": checked at most once per
/// ready_cache_duration, however many probes come.
std::string postgres_down(readiness_cache& cache, const std::string& dsn) {
  std::lock_guard<std::mutex> guard{cache.mtx};
  auto now = std::chrono::steady_clock::now();
  if (!cache.checked || now - cache.checked_at >= ready_cache_duration) {
    auto r = persistence::check_ready(dsn, ready_timeout);
    cache.checked = true;
    cache.checked_at = std::chrono::steady_clock::now();
    if (!r.ready && (cache.ready || cache.reason != r.reason))
      spdlog::warn("http not ready reason={}", r.reason);
    cache.ready = r.ready;
    cache.reason = r.reason;
  }
  return cache.ready ? std::string{} : cache.reason;
}

/// Logs an actor failure once, not once per probe.
void note_actors(readiness_cache& cache, const std::string& reason) {
  std::lock_guard<std::mutex> guard{cache.actors_mtx};
  if (!reason.empty() && reason != cache.actors_reason)
    spdlog::error("http not ready reason={}", reason);
  cache.actors_reason = reason;
}

} // namespace

void readyz(exchange& x) {
  auto postgres = postgres_down(x.be.readiness, x.be.dsn);
  // Asked on every probe, and last: a 200 never stands for a core that died
  // while Postgres was being checked.
  auto actors = actors_down(x.be);
  note_actors(x.be.readiness, actors);
  if (!actors.empty())
    send(x.res, error_reply(503, "not_ready", actors));
  else if (!postgres.empty())
    send(x.res, error_reply(503, "not_ready", postgres));
  else
    send(x.res, {200, {{"status", "ready"}}});
}

void metrics(exchange& x) {
  x.res.status = 200;
  x.res.set_content(chargeonce::metrics::render(), "text/plain; version=0.0.4");
}

} // namespace chargeonce::http
