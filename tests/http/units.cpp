// SPDX-License-Identifier: Apache-2.0
// The HTTP adapter's decisions without a server: status codes, routing,
// tokens and input checks (none of these paths reaches an actor), and the
// bounded event queue. End to end: tests/http/http.sh.
#include "main/http/context.hpp"
#include "main/http/errors.hpp"
#include "main/http/input.hpp"
#include "main/http/options.hpp"
#include "main/http/routes.hpp"
#include "main/http/server.hpp"
#include "main/http/stream.hpp"
#include "protocol/errors.hpp"

#include <caf/all.hpp>
#include <doctest/doctest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <httplib.h>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

using namespace chargeonce;
using namespace chargeonce::http;

namespace {

constexpr char gateway_token[] = "gateway-token-0123456789";
constexpr char worker_token[] = "worker-token-0123456789";

/// A backend with gateway and worker tokens and no admin token. No actor
/// system: the requests below must all be answered before any CAF request.
struct fixture {
  backend be;
  fixture() { be.tokens = {"", gateway_token, worker_token, ""}; }

  httplib::Response call(const std::string& method, const std::string& path,
                         const std::string& token = gateway_token,
                         const std::string& body = "") {
    httplib::Request req;
    req.method = method;
    req.path = path;
    if (!token.empty())
      req.set_header("Authorization", "Bearer " + token);
    httplib::Response res;
    dispatch(be, req, body, res);
    return res;
  }
};

std::string error_of(const httplib::Response& res) {
  return nlohmann::json::parse(res.body).at("error").get<std::string>();
}

/// Everything spdlog's default logger writes while it lives.
struct log_capture {
  std::ostringstream text;
  std::shared_ptr<spdlog::logger> saved = spdlog::default_logger();

  log_capture() {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
    spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("capture", std::move(sink)));
  }
  log_capture(const log_capture&) = delete;
  log_capture& operator=(const log_capture&) = delete;
  ~log_capture() { spdlog::set_default_logger(saved); }
};

/// The id a 500's message names ("... see server log id=<n>"), "" if none.
std::string incident_of(const std::string& body) {
  auto message = nlohmann::json::parse(body).at("message").get<std::string>();
  std::smatch m;
  if (std::regex_match(
        message, m, std::regex{"internal error, see server log id=([0-9]+)"}))
    return m[1];
  return {};
}

/// The log line carrying `id=<id>` (the first), "" if none.
std::string log_line_of(const std::string& log, const std::string& id) {
  std::istringstream in{log};
  std::string line;
  while (std::getline(in, line))
    if (line.find(" id=" + id + " ") != std::string::npos)
      return line;
  return {};
}

/// What the exception handler answers for `ep`, and what it logged.
std::pair<httplib::Response, std::string> handle(std::exception_ptr ep) {
  log_capture log;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chats/1/reserve";
  httplib::Response res;
  reply_to_exception(req, res, std::move(ep));
  return {res, log.text.str()};
}

} // namespace

TEST_SUITE("http") {
  TEST_CASE("every error code maps to the documented status") {
    auto status = [](ec x) {
      return status_of(caf::make_error(x, "ctx"));
    };
    CHECK(status(ec::busy) == 409);
    CHECK(status(ec::too_late) == 409);
    CHECK(status(ec::invalid_state) == 409);
    CHECK(status(ec::already_exists) == 409);
    CHECK(status(ec::insufficient_messages) == 402);
    CHECK(status(ec::insufficient_images) == 402);
    CHECK(status(ec::not_found) == 404);
    CHECK(status(ec::expired) == 410);
    CHECK(status(ec::invalid_argument) == 422);
    CHECK(status(ec::chat_blocked) == 403);
    CHECK(status(ec::chat_banned) == 403);
    CHECK(status(ec::storage_unavailable) == 503);
    CHECK(status(ec::overloaded) == 503);
    CHECK(status(ec::internal) == 500);
    CHECK(status_of(caf::make_error(caf::sec::request_timeout)) == 503);
  }

  TEST_CASE("an error body carries the CLI's error name and the context") {
    auto x = error_reply(caf::make_error(ec::busy, "chat 1 has reservation 2"));
    CHECK(x.status == 409);
    CHECK(x.body.at("error") == "busy");
    CHECK(x.body.at("message") == "chat 1 has reservation 2");
  }

  TEST_CASE("a 503 says when to retry") {
    httplib::Response res;
    send(res, error_reply(caf::make_error(ec::storage_unavailable, "down")));
    CHECK(res.status == 503);
    CHECK(res.get_header_value("Retry-After") == "1");
  }

  TEST_CASE("the route table has 25 unique absolute paths and methods") {
    std::set<std::pair<std::string, std::string>> seen;
    for (const auto& x : routes()) {
      CHECK(seen.emplace(x.method, x.path).second);
      CHECK(std::string{x.path}.rfind('/', 0) == 0);
    }
    CHECK(seen.size() == 25);
  }

  TEST_CASE_FIXTURE(fixture, "unknown paths are 404 and wrong methods 405") {
    auto res = call("GET", "/v1/nope");
    CHECK(res.status == 404);
    CHECK(error_of(res) == "no_route");
    res = call("GET", "/v1/chats/1/touch");
    CHECK(res.status == 405);
    CHECK(error_of(res) == "method_not_allowed");
    CHECK(res.get_header_value("Allow") == "POST");
    CHECK(call("POST", "/v1/chats/1/touch/").status == 404);
  }

  TEST_CASE_FIXTURE(fixture, "a token only opens its own role's routes") {
    auto res = call("POST", "/v1/chats/1/reservations/2/commit", gateway_token);
    CHECK(res.status == 403);
    CHECK(error_of(res) == "forbidden");
    res = call("POST", "/v1/chats/1/touch", worker_token);
    CHECK(res.status == 403);
    res = call("POST", "/v1/chats/1/touch", "");
    CHECK(res.status == 401);
    CHECK(res.get_header_value("WWW-Authenticate").rfind("Bearer", 0) == 0);
    res = call("POST", "/v1/chats/1/touch", std::string{gateway_token} + "x");
    CHECK(res.status == 401);
    CHECK(error_of(res) == "unauthorized");
  }

  TEST_CASE_FIXTURE(fixture, "a role without a configured token is off") {
    // Even a valid token of another role: nobody may call admin routes.
    auto res = call("POST", "/v1/chats", gateway_token, R"({"chat":1})");
    CHECK(res.status == 403);
    CHECK(error_of(res) == "forbidden");
  }

  TEST_CASE_FIXTURE(fixture, "bad input is refused before any actor is asked") {
    auto reserve = [&](const std::string& body) {
      return call("POST", "/v1/chats/5/reservations", gateway_token, body);
    };
    CHECK(reserve("{\"kind\":").status == 400);
    CHECK(error_of(reserve("")) == "malformed_json");
    CHECK(reserve("[1]").status == 422);
    CHECK(reserve("{}").status == 422);
    CHECK(reserve(R"({"kind":"Video"})").status == 422); // no catalog name
    CHECK(reserve(R"({"kind":"image","request_id":5})").status == 422);
    CHECK(reserve(R"({"kind":"image","requestId":"a"})").status == 422);
    CHECK(call("POST", "/v1/chats/x/touch").status == 422);
    CHECK(call("POST", "/v1/chats/1x/touch").status == 422);
    CHECK(call("POST", "/v1/chats/99999999999999999999/touch").status == 422);
    CHECK(call("POST", "/v1/chats/1/reservations/x/start", worker_token).status
          == 422);
  }

  TEST_CASE("integer fields take integers in range only") {
    auto parse = [](const char* text) {
      return nlohmann::json::parse(text);
    };
    CHECK(int_field(parse(R"({"n":5})"), "n", 1, 10) == 5);
    CHECK(int_field(parse("{}"), "n", 1, 10, 7) == 7);
    CHECK_THROWS_AS(int_field(parse("{}"), "n", 1, 10), input_error);
    CHECK_THROWS_AS(int_field(parse(R"({"n":1.5})"), "n", 1, 10), input_error);
    CHECK_THROWS_AS(int_field(parse(R"({"n":"5"})"), "n", 1, 10), input_error);
    CHECK_THROWS_AS(int_field(parse(R"({"n":11})"), "n", 1, 10), input_error);
    CHECK_THROWS_AS(int_field(parse(R"({"n":18446744073709551615})"), "n",
                              INT64_MIN, INT64_MAX),
                    input_error);
    CHECK(bool_field(parse("{}"), "b") == caf::none);
    CHECK_THROWS_AS(bool_field(parse(R"({"b":1})"), "b"), input_error);
    CHECK(!time_field(parse(R"({"t":null})"), "t", false));
    CHECK_THROWS_AS(time_field(parse(R"({"t":"soon"})"), "t", false),
                    input_error);
  }

  TEST_CASE("an event queue that overflows ends its stream, never grows") {
    stream_queue q{2};
    q.push("a");
    q.push("b");
    CHECK_FALSE(q.overflow);
    q.push("c");
    CHECK(q.overflow);
    CHECK(q.frames.size() == 2);
  }

  TEST_CASE("the adapter is off unless its own options name a port") {
    http_options opts;
    CHECK_FALSE(opts.enabled());
    CHECK_FALSE(opts.tls());
    caf::actor_system_config cfg;
    caf::actor_system sys{cfg};
    auto off = server::start(sys, opts, core_actor{}, "");
    REQUIRE(off);
    CHECK(*off == nullptr);
    opts.port = 0;
    opts.tls_cert = "cert.pem";
    CHECK(opts.enabled());
    CHECK(opts.tls());
  }

  TEST_CASE("an exception in a route is a 500 naming the log line's id, "
            "never the exception's text") {
    auto [res, log] =
      handle(std::make_exception_ptr(std::runtime_error("secret")));
    CHECK(res.status == 500);
    CHECK(error_of(res) == "internal");
    CHECK(res.body.find("secret") == std::string::npos);
    auto id = incident_of(res.body);
    REQUIRE_FALSE(id.empty());
    auto line = log_line_of(log, id);
    CHECK(line.find("secret") != std::string::npos);
    CHECK(line.find("/v1/chats/1/reserve") != std::string::npos);
    CHECK(line.find("critical") != std::string::npos);
  }

  TEST_CASE("an exception not derived from std::exception is a 500 too") {
    auto [res, log] = handle(std::make_exception_ptr(42));
    CHECK(res.status == 500);
    CHECK(error_of(res) == "internal");
    auto id = incident_of(res.body);
    REQUIRE_FALSE(id.empty());
    CHECK(log_line_of(log, id).find("unknown type") != std::string::npos);
  }

  TEST_CASE("each 500 gets its own increasing id") {
    auto first = handle(std::make_exception_ptr(1)).first;
    auto second = handle(std::make_exception_ptr(2)).first;
    CHECK(std::stoull(incident_of(second.body))
          > std::stoull(incident_of(first.body)));
  }

  TEST_CASE("an internal answer of the actors is a 500 whose context stays "
            "in the log") {
    log_capture log;
    auto x = error_reply(
      caf::make_error(ec::internal, "apply: detail for the operator only"));
    CHECK(x.status == 500);
    CHECK(x.body.at("error") == "internal");
    auto body = x.body.dump();
    CHECK(body.find("operator only") == std::string::npos);
    auto id = incident_of(body);
    REQUIRE_FALSE(id.empty());
    CHECK(log_line_of(log.text.str(), id).find("operator only")
          != std::string::npos);
  }

  TEST_CASE("a server with the exception handler survives a route that "
            "throws an int, and answers 500") {
    log_capture log;
    httplib::Server svr;
    svr.Get("/int", [](const httplib::Request&, httplib::Response&) {
      throw 42; // NOLINT(hicpp-exception-baseclass): the case under test
    });
    svr.Get("/secret", [](const httplib::Request&, httplib::Response&) {
      throw std::runtime_error("secret");
    });
    svr.set_exception_handler(reply_to_exception);
    auto port = svr.bind_to_any_port("127.0.0.1");
    REQUIRE(port > 0);
    std::thread listener{[&svr] {
      svr.listen_after_bind();
    }};
    httplib::Client cli{"127.0.0.1", port};
    auto thrown_int = cli.Get("/int");
    auto thrown_secret = cli.Get("/secret");
    svr.stop();
    listener.join();
    REQUIRE(thrown_int);
    CHECK(thrown_int->status == 500);
    CHECK(error_of(*thrown_int) == "internal");
    REQUIRE(thrown_secret);
    CHECK(thrown_secret->status == 500);
    CHECK(thrown_secret->body.find("secret") == std::string::npos);
    CHECK_FALSE(
      log_line_of(log.text.str(), incident_of(thrown_secret->body)).empty());
  }
}
