// SPDX-License-Identifier: Apache-2.0
// GET /v1/events: each stream is a local actor subscribed through the
// gateway facade, feeding a bounded queue that the stream's httplib thread
// drains. A stream whose client reads too slowly is dropped (its queue
// overflows), and a stream whose client went away ends at the next write;
// either way its actor exits and the event bus forgets it (it monitors).
#include "actors/log_handlers.hpp"
#include "main/http/errors.hpp"
#include "main/http/handlers.hpp"
#include "main/http/stream.hpp"
#include "protocol/errors.hpp"
#include "protocol/json.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <charconv>
#include <deque>
#include <httplib.h>
#include <memory>

namespace chargeonce::http {

namespace {

/// A comment line this often: proxies keep the stream open, and a client
/// that went away is noticed by the failing write (about two intervals).
constexpr auto ping_interval = std::chrono::seconds(1);

/// An SSE frame; the durable events carry their id, which the client's
/// next connection sends back as Last-Event-ID.
template <class Event>
std::string frame(const Event& x) {
  auto body = to_json(x);
  std::string out;
  if (auto id = body.find("event_id"); id != body.end())
    out = "id: " + std::to_string(id->template get<event_id>()) + "\n";
  return out + "event: " + body.at("event").template get<std::string>()
         + "\ndata: " + body.dump() + "\n\n";
}

/// The subscriber: turns each event into an SSE frame.
caf::behavior subscriber(caf::event_based_actor* self,
                         const std::shared_ptr<stream_queue>& q) {
  install_log_handlers(self);
  return {
    [q](const queue_notice& x) { q->push(frame(x)); },
    [q](const reservation_released& x) { q->push(frame(x)); },
    [q](const cancel_requested& x) { q->push(frame(x)); },
    [q](const reconcile_needed& x) { q->push(frame(x)); },
    [q](const limits_refilled& x) { q->push(frame(x)); },
    [q](const credits_expired& x) { q->push(frame(x)); },
    [q](const credits_expiring& x) { q->push(frame(x)); },
    [q](const balance_low& x) { q->push(frame(x)); },
    // Cut off by the event bus: the client reconnects with its last id.
    [q](const subscription_ended& x) {
      q->push(frame(x));
      q->end();
    },
  };
}

/// Subscribes `sub` through the gateway facade, after event `after` when
/// given; an error when that failed.
caf::error subscribe(backend& be, const caf::actor& sub,
                     caf::optional<event_id> after) {
  caf::error out;
  auto on_answer = [&](bool ok) {
    if (!ok)
      out = caf::make_error(ec::storage_unavailable, "subscribe refused");
  };
  auto on_error = [&](caf::error& err) {
    out = std::move(err);
  };
  caf::scoped_actor self{*be.sys};
  if (after)
    self
      ->request(be.gateway, be.request_timeout, atom::subscribe_v, sub, *after)
      .receive(on_answer, on_error);
  else
    self->request(be.gateway, be.request_timeout, atom::subscribe_v, sub)
      .receive(on_answer, on_error);
  return out;
}

/// The last event id the client saw: the Last-Event-ID header (what an SSE
/// client sends when it reconnects), else the `after` parameter.
caf::expected<caf::optional<event_id>> last_seen(const httplib::Request& req) {
  std::string text;
  if (req.has_header("Last-Event-ID"))
    text = req.get_header_value("Last-Event-ID");
  else if (req.has_param("after"))
    text = req.get_param_value("after");
  else
    return caf::optional<event_id>{};
  event_id id = 0;
  auto [end, parsed] =
    std::from_chars(text.data(), text.data() + text.size(), id);
  if (parsed != std::errc{} || end != text.data() + text.size() || id < 0)
    return caf::make_error(ec::invalid_argument,
                           "Last-Event-ID (or after) must be an event id, a "
                           "non-negative integer: '"
                             + text + "'");
  return caf::optional<event_id>{id};
}

/// Waits up to one ping interval and writes what came: events, a ping, or
/// the overflow notice that ends the stream. False ends it as failed.
bool pump(stream_queue& q, httplib::DataSink& sink, size_t& sent) {
  std::deque<std::string> batch;
  bool overflow = false;
  bool ended = false;
  {
    std::unique_lock<std::mutex> lock{q.mtx};
    q.cv.wait_for(lock, ping_interval,
                  [&] { return !q.frames.empty() || q.overflow || q.ended; });
    batch.swap(q.frames);
    overflow = q.overflow;
    ended = q.ended;
  }
  if (batch.empty() && !overflow && !ended)
    return sink.write(":\n\n", 3);
  for (const auto& f : batch) {
    if (!sink.write(f.data(), f.size()))
      return false;
    ++sent;
  }
  if (ended && !overflow) {
    spdlog::warn("http events stream ended reason=subscription_ended sent={}",
                 sent);
    sink.done();
    return true;
  }
  if (overflow) {
    spdlog::warn("http events stream dropped reason=client_too_slow sent={}",
                 sent);
    static const std::string bye =
      "event: overflow\ndata: {\"event\":\"overflow\"}\n\n";
    sink.write(bye.data(), bye.size());
    sink.done();
  }
  return true;
}

} // namespace

void events(exchange& x) {
  auto& be = x.be;
  auto after = last_seen(x.req); // refused before it takes a stream's place
  if (!after) {
    send(x.res, error_reply(after.error()));
    return;
  }
  if (be.streams.fetch_add(1) >= be.streams_max) {
    be.streams.fetch_sub(1);
    send(x.res, error_reply(503, "too_many_streams",
                            "at most " + std::to_string(be.streams_max)
                              + " event streams at once"));
    return;
  }
  auto q = std::make_shared<stream_queue>(be.stream_buffer_max);
  auto sub = be.sys->spawn(subscriber, q);
  if (auto err = subscribe(be, sub, *after)) {
    caf::anon_send_exit(sub, caf::exit_reason::user_shutdown);
    be.streams.fetch_sub(1);
    send(x.res, error_reply(err));
    return;
  }
  spdlog::info("http events stream opened remote={} streams={}",
               x.req.remote_addr, be.streams.load());
  auto sent = std::make_shared<size_t>(0);
  x.res.set_header("Cache-Control", "no-cache");
  x.res.set_chunked_content_provider(
    "text/event-stream",
    [q, sent](size_t offset, httplib::DataSink& sink) {
      if (offset == 0) // tells the client the subscription is live
        return sink.write(": subscribed\n\n", 14);
      return pump(*q, sink, *sent);
    },
    // Runs when the response is destroyed, on every path (client gone,
    // overflow, server stopping).
    [&be, sub, sent](bool) {
      caf::anon_send_exit(sub, caf::exit_reason::user_shutdown);
      auto left = be.streams.fetch_sub(1) - 1;
      spdlog::info("http events stream closed sent={} streams={}", *sent, left);
    });
}

} // namespace chargeonce::http
