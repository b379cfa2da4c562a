// SPDX-License-Identifier: Apache-2.0
#include "main/http/routes.hpp"

#include "main/http/errors.hpp"
#include "main/http/handlers.hpp"

#include <spdlog/spdlog.h>

#include <cstring>
#include <httplib.h>

namespace chargeonce::http {

namespace {

using r = role;

// The single source of truth for the adapter's surface.
constexpr route table[] = {
  {"GET", "/healthz", r::open, healthz},
  {"GET", "/readyz", r::open, readyz},
  {"GET", "/metrics", r::open, metrics},
  {"GET", "/v1/events", r::gateway, events},
  {"POST", "/v1/chats/{chat}/touch", r::gateway, touch},
  {"POST", "/v1/chats/{chat}/reservations", r::gateway, reserve},
  {"DELETE", "/v1/chats/{chat}/reservation", r::gateway, cancel},
  {"DELETE", "/v1/chats/{chat}/reservations/{id}", r::gateway,
   cancel_reservation},
  {"GET", "/v1/chats/{chat}", r::gateway, status},
  {"POST", "/v1/chats/{chat}/reservations/{id}/start", r::worker, start},
  {"POST", "/v1/chats/{chat}/reservations/{id}/heartbeat", r::worker,
   heartbeat},
  {"POST", "/v1/chats/{chat}/reservations/{id}/commit", r::worker, commit},
  {"POST", "/v1/chats/{chat}/reservations/{id}/fail", r::worker, fail},
  {"POST", "/v1/chats/{chat}/reservations/{id}/uncertain", r::worker,
   uncertain},
  {"POST", "/v1/chats/{chat}/reservations/{id}/resolve", r::worker, resolve},
  {"GET", "/v1/reservations", r::worker, list_reservations},
  {"POST", "/v1/chats", r::admin, create_chat},
  {"POST", "/v1/chats/{chat}/top-ups", r::admin, top_up},
  {"POST", "/v1/chats/{chat}/grants/{grant}/void", r::admin, void_grant},
  {"POST", "/v1/chats/{chat}/grants/void", r::admin, void_grant_by_payment},
  {"PUT", "/v1/chats/{chat}/premium", r::admin, set_premium},
  {"PATCH", "/v1/chats/{chat}/flags", r::admin, set_flags},
  {"PUT", "/v1/chats/{chat}/limits", r::admin, set_limits},
  {"GET", "/v1/chats/{chat}/history", r::admin, history},
  {"GET", "/v1/chats/{chat}/explain", r::admin, explain},
};

std::vector<std::string> segments(const std::string& path) {
  std::vector<std::string> out;
  size_t pos = 1; // every path starts with '/'
  while (pos <= path.size()) {
    auto next = path.find('/', pos);
    if (next == std::string::npos)
      next = path.size();
    out.emplace_back(path.substr(pos, next - pos));
    pos = next + 1;
  }
  return out;
}

/// The table's path templates, split once: splitting them on every request
/// cost a few dozen allocations per request.
const std::vector<std::vector<std::string>>& templates() {
  static const auto all = [] {
    std::vector<std::vector<std::string>> out;
    for (const auto& x : table)
      out.push_back(segments(x.path));
    return out;
  }();
  return all;
}

bool is_parameter(const std::string& segment) {
  return segment.size() > 2 && segment.front() == '{' && segment.back() == '}';
}

/// True if `path` fits the template `want`.
bool match(const std::vector<std::string>& want,
           const std::vector<std::string>& path) {
  if (want.size() != path.size())
    return false;
  for (size_t i = 0; i < want.size(); ++i)
    if (is_parameter(want[i]) ? path[i].empty() : want[i] != path[i])
      return false;
  return true;
}

/// The `{name}` segments of a path that fits `want`, by name.
std::map<std::string, std::string>
parameters(const std::vector<std::string>& want,
           const std::vector<std::string>& path) {
  std::map<std::string, std::string> out;
  for (size_t i = 0; i < want.size(); ++i)
    if (is_parameter(want[i]))
      out.emplace(want[i].substr(1, want[i].size() - 2), path[i]);
  return out;
}

/// Compares without an early exit, so the time taken does not tell an
/// attacker how much of a token was right.
bool same_token(const std::string& given, const std::string& want) {
  if (want.empty() || given.size() != want.size())
    return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < want.size(); ++i)
    diff |= static_cast<unsigned char>(given[i] ^ want[i]);
  return diff == 0;
}

/// The role whose token the request carries, or `open` for none.
role bearer_role(const backend& be, const httplib::Request& req) {
  static constexpr char prefix[] = "Bearer ";
  auto header = req.get_header_value("Authorization");
  if (header.rfind(prefix, 0) != 0)
    return role::open;
  auto token = header.substr(std::strlen(prefix));
  for (auto who : {role::gateway, role::worker, role::admin})
    if (same_token(token, be.tokens[static_cast<size_t>(who)]))
      return who;
  return role::open;
}

/// Answers 401/403 and returns false unless the request may call `x`.
bool authorized(const backend& be, const route& x, const httplib::Request& req,
                httplib::Response& res) {
  if (x.who == role::open)
    return true;
  auto needed = to_string(x.who);
  if (be.tokens[static_cast<size_t>(x.who)].empty()) {
    send(res, error_reply(403, "forbidden",
                          std::string{"the "} + needed
                            + " role has no token configured: its routes are "
                              "off"));
    return false;
  }
  auto given = bearer_role(be, req);
  if (given == x.who)
    return true;
  if (given == role::open) {
    res.set_header("WWW-Authenticate", "Bearer realm=\"chargeonce\"");
    send(res,
         error_reply(401, "unauthorized", "missing or unknown bearer token"));
  } else {
    send(res, error_reply(403, "forbidden",
                          std::string{"a "} + to_string(given)
                            + " token cannot call " + needed + " routes"));
  }
  spdlog::info("http refused method={} path={} status={} remote={}", req.method,
               req.path, res.status, req.remote_addr);
  return false;
}

bool same_method(const httplib::Request& req, const route& x) {
  // httplib serves HEAD with the GET handler and drops the body.
  return req.method == x.method
         || (req.method == "HEAD" && std::strcmp(x.method, "GET") == 0);
}

} // namespace

const char* to_string(role x) {
  switch (x) {
  case role::gateway:
    return "gateway";
  case role::worker:
    return "worker";
  case role::admin:
    return "admin";
  default:
    return "open";
  }
}

const std::vector<route>& routes() {
  static const std::vector<route> all(std::begin(table), std::end(table));
  return all;
}

void dispatch(backend& be, const httplib::Request& req, const std::string& body,
              httplib::Response& res) {
  auto path = segments(req.path);
  std::string allow;
  const auto& want = templates();
  for (size_t i = 0; i < std::size(table); ++i) {
    const auto& x = table[i];
    if (!match(want[i], path))
      continue;
    if (!same_method(req, x)) {
      allow += (allow.empty() ? "" : ", ") + std::string{x.method};
      continue;
    }
    if (!authorized(be, x, req, res))
      return;
    exchange ex{be, req, body, res, parameters(want[i], path)};
    try {
      x.handle(ex);
    } catch (const input_error& e) {
      send(res, error_reply(e.status, e.name, e.what()));
    }
    return;
  }
  if (!allow.empty()) {
    res.set_header("Allow", allow);
    send(res, error_reply(405, "method_not_allowed",
                          req.method + " is not allowed on " + req.path));
    return;
  }
  send(res, error_reply(404, "no_route", "no route " + req.path));
}

} // namespace chargeonce::http
