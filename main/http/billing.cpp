// SPDX-License-Identifier: Apache-2.0
// The billing routes: one CAF request to the role's facade each, answered
// with the same JSON as the CLI prints.
#include "main/http/errors.hpp"
#include "main/http/handlers.hpp"
#include "main/http/input.hpp"
#include "protocol/json.hpp"
#include "protocol/validation.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include <httplib.h>
#include <limits>
#include <memory>

namespace chargeonce::http {

namespace {

constexpr int64_t int32_max = std::numeric_limits<int32_t>::max();
constexpr int64_t int64_min = std::numeric_limits<int64_t>::min();
constexpr int64_t int64_max = std::numeric_limits<int64_t>::max();

/// Asks `facade` once, from this httplib worker thread, and answers with
/// `ok_status` and the result's JSON or with the mapped error. The wait is
/// finite, so a thread is never stuck on a lost reply; it is this thread's
/// own timed wait rather than a request timeout, which would wake CAF's
/// clock thread twice per request (armed, then cancelled).
template <class T, class Handle, class... Ts>
void ask(exchange& x, const Handle& facade, int ok_status, Ts... xs) {
  auto self = x.be.asking.take(*x.be.sys);
  reply out;
  bool timed_out = false;
  auto answer = (*self)->request(facade, caf::infinite, xs...);
  caf::blocking_actor::accept_one_cond one;
  (*self)->varargs_receive(
    one, answer.id(),
    [&](T& result) {
      out = {ok_status, to_json(result)};
    },
    [&](caf::error& err) { out = error_reply(err); },
    caf::after(x.be.request_timeout) >>
      [&] {
        timed_out = true;
        out = error_reply(caf::make_error(caf::sec::request_timeout));
      });
  if (!timed_out)
    x.be.asking.give_back(std::move(self));
  if (out.status >= 500)
    spdlog::warn("http failed method={} path={} status={} error={}",
                 x.req.method, x.req.path, out.status, out.body.dump());
  send(x.res, out);
}

chat_id path_chat(const exchange& x) {
  return path_int(x, "chat");
}

reservation_id path_reservation(const exchange& x) {
  return path_int(x, "id");
}

} // namespace

std::unique_ptr<caf::scoped_actor> requesters::take(caf::actor_system& sys) {
  {
    std::lock_guard<std::mutex> guard{mtx_};
    if (!idle_.empty()) {
      auto x = std::move(idle_.back());
      idle_.pop_back();
      return x;
    }
  }
  return std::make_unique<caf::scoped_actor>(sys);
}

void requesters::give_back(std::unique_ptr<caf::scoped_actor> x) {
  std::lock_guard<std::mutex> guard{mtx_};
  idle_.push_back(std::move(x));
}

// -- gateway ------------------------------------------------------------------

void touch(exchange& x) {
  ask<chat_status>(x, x.be.gateway, 200, atom::touch_v, path_chat(x));
}

void reserve(exchange& x) {
  auto chat = path_chat(x);
  auto body = body_object(x, {"kind", "request_id", "units"});
  kind k = kind::text;
  auto kind_text = string_field(body, "kind");
  if (!from_string(kind_text, k))
    reject("kind must be a kind of the catalog ([a-z][a-z0-9_]{0,31}), got '"
           + kind_text + "'");
  auto request_id = string_field(body, "request_id", std::string{});
  auto units =
    static_cast<int32_t>(int_field(body, "units", 1, units_max, int64_t{1}));
  ask<reservation>(x, x.be.gateway, 200, atom::reserve_v, chat, k, request_id,
                   units);
}

/// The chat's only job, or (?request_id=S) the job of that request id.
void cancel(exchange& x) {
  auto chat = path_chat(x);
  if (!x.req.has_param("request_id")) {
    ask<reservation>(x, x.be.gateway, 200, atom::cancel_v, chat);
    return;
  }
  auto request_id = x.req.get_param_value("request_id");
  if (request_id.empty())
    reject("request_id must not be empty");
  ask<reservation>(x, x.be.gateway, 200, atom::cancel_v, chat,
                   reservation_id{0}, request_id);
}

void cancel_reservation(exchange& x) {
  ask<reservation>(x, x.be.gateway, 200, atom::cancel_v, path_chat(x),
                   path_reservation(x), std::string{});
}

void status(exchange& x) {
  ask<chat_status>(x, x.be.gateway, 200, atom::status_v, path_chat(x));
}

// -- worker -------------------------------------------------------------------

namespace {

/// The worker that names itself: {"worker": S} in an optional body ("" when
/// there is none, or no such field).
std::string worker_field(const exchange& x,
                         std::initializer_list<const char*> allowed) {
  if (x.body.empty())
    return {};
  return string_field(body_object(x, allowed), "worker", std::string{});
}

/// start, heartbeat and fail: no body, or {"worker": S}.
template <class Atom>
void worker_step(exchange& x, Atom what) {
  auto chat = path_chat(x);
  auto id = path_reservation(x);
  auto worker = worker_field(x, {"worker"});
  if (worker.empty())
    ask<reservation>(x, x.be.worker, 200, what, chat, id);
  else
    ask<reservation>(x, x.be.worker, 200, what, chat, id, worker);
}

} // namespace

void start(exchange& x) {
  worker_step(x, atom::start_v);
}

void heartbeat(exchange& x) {
  worker_step(x, atom::heartbeat_v);
}

/// No body (as before units): the whole hold; {"units": N}: N of them; and
/// {"worker": S}, the worker that names itself.
void commit(exchange& x) {
  auto chat = path_chat(x);
  auto id = path_reservation(x);
  if (x.body.empty()) {
    ask<receipt>(x, x.be.worker, 200, atom::commit_v, chat, id);
    return;
  }
  auto body = body_object(x, {"units", "worker"});
  auto worker = string_field(body, "worker", std::string{});
  if (!body.contains("units")) {
    if (worker.empty())
      ask<receipt>(x, x.be.worker, 200, atom::commit_v, chat, id);
    else
      ask<receipt>(x, x.be.worker, 200, atom::commit_v, chat, id, worker);
    return;
  }
  auto units = static_cast<int32_t>(int_field(body, "units", 1, units_max));
  if (worker.empty())
    ask<receipt>(x, x.be.worker, 200, atom::commit_v, chat, id, units);
  else
    ask<receipt>(x, x.be.worker, 200, atom::commit_v, chat, id, units, worker);
}

void fail(exchange& x) {
  worker_step(x, atom::fail_v);
}

void uncertain(exchange& x) {
  auto chat = path_chat(x);
  auto id = path_reservation(x);
  auto body = body_object(x, {"provider_ref", "worker"});
  auto ref = string_field(body, "provider_ref");
  auto worker = string_field(body, "worker", std::string{});
  if (worker.empty())
    ask<reservation>(x, x.be.worker, 200, atom::uncertain_v, chat, id, ref);
  else
    ask<reservation>(x, x.be.worker, 200, atom::uncertain_v, chat, id, ref,
                     worker);
}

void resolve(exchange& x) {
  auto chat = path_chat(x);
  auto id = path_reservation(x);
  auto body = body_object(x, {"outcome", "units"});
  auto outcome = string_field(body, "outcome");
  if (!body.contains("units")) {
    ask<resolution>(x, x.be.worker, 200, atom::resolve_v, chat, id, outcome);
    return;
  }
  auto units = static_cast<int32_t>(int_field(body, "units", 1, units_max));
  ask<resolution>(x, x.be.worker, 200, atom::resolve_v, chat, id, outcome,
                  units);
}

/// GET /v1/reservations?status=outcome_unknown: the only status listed
/// across chats (what reconcilers need); keyset pages by ?after=ID.
void list_reservations(exchange& x) {
  if (!x.req.has_param("status")
      || x.req.get_param_value("status") != "outcome_unknown")
    reject("status must be outcome_unknown (the jobs a reconciler resolves)");
  auto after = query_int(x, "after", 0, int64_max, 0);
  auto limit = query_int(x, "limit", 1, unresolved_page_max, 100);
  ask<unresolved_page>(x, x.be.worker, 200, atom::unresolved_v, after,
                       static_cast<uint32_t>(limit));
}

// -- admin --------------------------------------------------------------------

void create_chat(exchange& x) {
  auto body =
    body_object(x, {"chat", "daily_messages", "daily_images", "balance",
                    "pockets", "premium_until", "max_active_jobs"});
  chat_spec spec;
  spec.chat = int_field(body, "chat", int64_min, int64_max);
  // The built-in pockets as fields of their own, as before the catalog;
  // any pocket in "pockets".
  for (const char* name :
       {pocket::daily_messages, pocket::daily_images, pocket::balance})
    if (body.contains(name))
      spec.initial.set(
        name, static_cast<int32_t>(int_field(body, name, 0, int32_max)));
  pockets_field(body, "pockets", spec.initial);
  spec.premium_until = time_field(body, "premium_until", false);
  if (auto limit =
        nullable_int_field(body, "max_active_jobs", max_active_jobs_min,
                           max_active_jobs_max, false))
    spec.max_active_jobs = static_cast<int32_t>(*limit);
  ask<chat_status>(x, x.be.admin, 201, atom::create_v, spec);
}

void top_up(exchange& x) {
  auto chat = path_chat(x);
  auto body = body_object(x, {"credits", "payment_id", "expires_at",
                              "expires_in_ms", "priority", "source"});
  // The full int64 range reaches the registry, which names the legal range
  // (of the credits and the grant's terms alike).
  auto credits = int_field(body, "credits", int64_min, int64_max);
  auto payment_id = string_field(body, "payment_id");
  grant_terms terms;
  terms.expires_at = time_field(body, "expires_at", false);
  // 0 is the wire's "none": here, where null says none, it is refused.
  terms.expires_in_ms =
    nullable_int_field(body, "expires_in_ms", 1, grant_expires_in_ms_max, false)
      .value_or(0);
  terms.priority = static_cast<int32_t>(int_field(
    body, "priority", INT32_MIN, INT32_MAX, int64_t{grant_priority_default}));
  terms.source = string_field(body, "source", std::string{"purchase"});
  ask<top_up_receipt>(x, x.be.admin, 200, atom::top_up_v, chat, credits,
                      payment_id, terms);
}

void void_grant(exchange& x) {
  auto chat = path_chat(x);
  auto grant = path_int(x, "grant");
  if (!x.body.empty())
    body_object(x, {});
  ask<grant_info>(x, x.be.admin, 200, atom::void_grant_v, chat, grant,
                  std::string{});
}

void void_grant_by_payment(exchange& x) {
  auto chat = path_chat(x);
  auto body = body_object(x, {"payment_id"});
  ask<grant_info>(x, x.be.admin, 200, atom::void_grant_v, chat, int64_t{0},
                  string_field(body, "payment_id"));
}

void set_premium(exchange& x) {
  auto chat = path_chat(x);
  auto body = body_object(x, {"until"});
  auto until = *time_field(body, "until", true);
  ask<chat_status>(x, x.be.admin, 200, atom::premium_v, chat, until);
}

void set_flags(exchange& x) {
  auto chat = path_chat(x);
  auto body = body_object(x, {"started", "blocked", "banned"});
  flags_update update{bool_field(body, "started"), bool_field(body, "blocked"),
                      bool_field(body, "banned")};
  ask<chat_status>(x, x.be.admin, 200, atom::flags_v, chat, update);
}

/// {"max_active_jobs": N} sets the chat's own limit, null its plan's again;
/// {"balance_low_threshold": N} its own threshold, null or "default" the
/// server's again. Either or both; the one absent stays as it is.
void set_limits(exchange& x) {
  auto chat = path_chat(x);
  auto body = body_object(x, {"max_active_jobs", "balance_low_threshold"});
  limits_update update;
  update.set_max_active_jobs = body.contains("max_active_jobs");
  update.set_balance_low_threshold = body.contains("balance_low_threshold");
  if (!update.set_max_active_jobs && !update.set_balance_low_threshold)
    reject("give max_active_jobs, balance_low_threshold or both");
  if (auto limit =
        nullable_int_field(body, "max_active_jobs", max_active_jobs_min,
                           max_active_jobs_max, false))
    update.max_active_jobs = static_cast<int32_t>(*limit);
  auto threshold = body.find("balance_low_threshold");
  if (threshold != body.end() && *threshold != "default")
    if (auto n = nullable_int_field(body, "balance_low_threshold", 0,
                                    balance_low_threshold_max, false))
      update.balance_low_threshold = static_cast<int32_t>(*n);
  ask<chat_status>(x, x.be.admin, 200, atom::limits_v, chat, update);
}

// -- admin: the support view -------------------------------------------------

/// ?limit=N (1 to 1000, default 50) ledger rows below ?before=ID (the
/// previous page's next_before), reservations merged in, newest first.
void history(exchange& x) {
  auto chat = path_chat(x);
  auto before = query_int(x, "before", 0, int64_max, 0);
  auto limit = query_int(x, "limit", 1, history_page_max, history_page_default);
  ask<history_page>(x, x.be.admin, 200, atom::history_v, chat, before,
                    static_cast<uint32_t>(limit));
}

void explain(exchange& x) {
  ask<chat_explanation>(x, x.be.admin, 200, atom::explain_v, path_chat(x));
}

} // namespace chargeonce::http
