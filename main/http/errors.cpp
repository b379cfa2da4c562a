// SPDX-License-Identifier: Apache-2.0
#include "main/http/errors.hpp"

#include "protocol/errors.hpp"
#include "protocol/json.hpp"

#include <caf/error.hpp>
#include <caf/sec.hpp>
#include <spdlog/spdlog.h>

#include <httplib.h>

namespace chargeonce::http {

void reject(const std::string& message) {
  throw input_error(422, "invalid_argument", message);
}

int status_of(const caf::error& err) {
  if (err.category() != caf::atom(error_category_name))
    return 503; // CAF: timeout or a dead actor; the outcome is unknown
  switch (static_cast<ec>(err.code())) {
  case ec::busy:
  case ec::too_late:
  case ec::invalid_state:
  case ec::already_exists:
  case ec::already_started:
    return 409;
  case ec::insufficient_messages:
  case ec::insufficient_images:
  case ec::insufficient_funds:
    return 402;
  case ec::not_found:
    return 404;
  case ec::expired:
    return 410;
  case ec::invalid_argument:
    return 422;
  case ec::chat_blocked:
  case ec::chat_banned:
    return 403;
  case ec::storage_unavailable:
  case ec::overloaded: // back-pressure: nothing was done, retry later
  case ec::none:
    return 503;
  case ec::internal: // a bug: retrying will not help
    return 500;
  }
  return 500; // a code this build does not know: a bug, say so
}

reply error_reply(int status, const std::string& name,
                  const std::string& message) {
  return {status, {{"error", name}, {"message", message}}};
}

reply error_reply(const caf::error& err) {
  if (err == ec::internal)
    return internal_reply("answer=internal message=" + error_message(err));
  return {status_of(err), to_json(err)};
}

reply internal_reply(const std::string& detail) {
  auto id = next_incident_id();
  spdlog::critical("http internal id={} {}", id, detail);
  return error_reply(500, to_string(ec::internal),
                     "internal error, see server log id=" + std::to_string(id));
}

void reply_to_exception(const httplib::Request& req, httplib::Response& res,
                        std::exception_ptr ep) {
  std::string what;
  try {
    std::rethrow_exception(std::move(ep));
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "an exception of unknown type";
  }
  send(res, internal_reply("method=" + req.method + " path=" + req.path
                           + " exception=" + what));
}

std::string error_name_of_status(int status) {
  switch (status) {
  case 400:
    return "bad_request";
  case 404:
    return "no_route";
  case 405:
    return "method_not_allowed";
  case 408:
    return "request_timeout";
  case 413:
    return "payload_too_large";
  case 414:
    return "uri_too_long";
  case 416:
    return "range_not_satisfiable";
  case 431:
    return "headers_too_large";
  default:
    return status >= 500 ? "internal" : "bad_request";
  }
}

void send(httplib::Response& res, const reply& x) {
  res.status = x.status;
  if (x.status == 503)
    res.set_header("Retry-After", std::to_string(retry_after_seconds));
  res.set_content(x.body.dump(), "application/json");
}

} // namespace chargeonce::http
