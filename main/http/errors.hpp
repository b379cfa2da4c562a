// SPDX-License-Identifier: Apache-2.0
// HTTP status codes and JSON bodies for answers and errors: the same error
// names as the CLI (`{"error": "busy", "message": "..."}`).
#pragma once

#include <caf/fwd.hpp>
#include <nlohmann/json.hpp>

#include <exception>
#include <stdexcept>
#include <string>

namespace httplib {
struct Request;
struct Response;
} // namespace httplib

namespace chargeonce::http {

/// Seconds a client should wait before retrying a 503.
constexpr int retry_after_seconds = 1;

/// A status code and its JSON body.
// The check follows json's noexcept default constructor into the general
// value constructor, which allocates for other types; a null json (what
// `body` starts as) cannot throw. json.hpp suppresses it there too.
// NOLINTNEXTLINE(bugprone-exception-escape)
struct reply {
  int status = 200;
  nlohmann::json body;
};

/// Bad input found before anything was sent to an actor: nothing changed.
struct input_error : std::runtime_error {
  input_error(int status, std::string name, const std::string& message)
      : std::runtime_error(message), status(status), name(std::move(name)) {}
  int status; ///< 400 (malformed JSON) or 422 (wrong type or value)
  std::string name;
};

/// Throws a 422 invalid_argument with `message`.
[[noreturn]] void reject(const std::string& message);

/// The status code an error of an operation maps to (see docs/openapi.yaml).
int status_of(const caf::error& err);

/// {"error": name, "message": message} with `status`.
reply error_reply(int status, const std::string& name,
                  const std::string& message);

/// An operation's error, by status_of and error_name; `internal` as
/// internal_reply (its context stays in the log).
reply error_reply(const caf::error& err);

/// The 500 for a bug: {"error": "internal", "message": "internal error, see
/// server log id=<n>"}. `detail` goes only to the log line (critical), which
/// carries the same id: a client never sees what an exception or an
/// internal error's context says.
reply internal_reply(const std::string& detail);

/// The server's exception handler: whatever a route threw, std::exception
/// or not, becomes internal_reply with the method and path in the log.
void reply_to_exception(const httplib::Request& req, httplib::Response& res,
                        std::exception_ptr ep);

/// The error name httplib's own refusals get (bad request line, 413, ...).
std::string error_name_of_status(int status);

/// Writes `x` as the response; a 503 also gets Retry-After.
void send(httplib::Response& res, const reply& x);

} // namespace chargeonce::http
