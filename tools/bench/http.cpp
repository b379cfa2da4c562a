// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/http.hpp"

#include "protocol/errors.hpp"
#include "tools/bench/options.hpp"

#include <nlohmann/json.hpp>

#include <httplib.h>
#include <stdexcept>

namespace chargeonce::bench {

namespace {

using json = nlohmann::json;

/// A chargeonce error by its wire name; names the HTTP layer has of its own
/// (unauthorized, no_route, ...) are CAF's unexpected_response, so that
/// they count as unexpected under their own message.
caf::error error_from(int status, const std::string& body) {
  auto parsed = json::parse(body, nullptr, false);
  std::string name;
  std::string message = body.substr(0, 200);
  if (parsed.is_object() && parsed.contains("error")) {
    name = parsed.value("error", "");
    message = parsed.value("message", "");
  }
  ec code = ec::none;
  if (from_string(name, code) && code != ec::none)
    return caf::make_error(code, message);
  return caf::make_error(caf::sec::unexpected_response,
                         "HTTP " + std::to_string(status) + " " + name + ": "
                           + message);
}

caf::error transport_error(httplib::Error err) {
  return caf::make_error(caf::sec::cannot_connect_to_node,
                         "HTTP request failed: " + httplib::to_string(err));
}

std::string chat_path(chat_id chat) {
  return "/v1/chats/" + std::to_string(chat);
}

std::string reservation_path(chat_id chat, reservation_id id) {
  return chat_path(chat) + "/reservations/" + std::to_string(id);
}

/// One kept-alive connection; the cycle's calls go over it one at a time.
class http_driver : public driver {
public:
  explicit http_driver(const http_target& t)
      : cli_(t.host, t.port), gateway_{{"Authorization",
                                        "Bearer " + t.gateway_token}},
        worker_{{"Authorization", "Bearer " + t.worker_token}} {
    cli_.set_keep_alive(true);
    cli_.set_tcp_nodelay(true);
    auto timeout =
      std::chrono::duration_cast<std::chrono::seconds>(request_timeout).count();
    cli_.set_connection_timeout(timeout, 0);
    cli_.set_read_timeout(timeout, 0);
    cli_.set_write_timeout(timeout, 0);
  }

  caf::expected<reservation_id> reserve(chat_id chat) override {
    auto body =
      post(chat_path(chat) + "/reservations", gateway_, R"({"kind":"image"})");
    if (!body)
      return body.error();
    auto id = body->find("id");
    if (id == body->end() || !id->is_number_integer())
      return caf::make_error(caf::sec::unexpected_response,
                             "a reservation without an id: " + body->dump());
    return id->get<reservation_id>();
  }

  caf::error start(chat_id chat, reservation_id id) override {
    return worker_call(reservation_path(chat, id) + "/start");
  }

  caf::error commit(chat_id chat, reservation_id id) override {
    return worker_call(reservation_path(chat, id) + "/commit");
  }

  caf::error fail(chat_id chat, reservation_id id) override {
    return worker_call(reservation_path(chat, id) + "/fail");
  }

  caf::error cancel(chat_id chat) override {
    return error_of(
      answer(cli_.Delete(chat_path(chat) + "/reservation", gateway_)));
  }

  /// The connection is opened (and kept) before the clock starts.
  void connect(chat_id chat) override { cli_.Get(chat_path(chat), gateway_); }

private:
  caf::error worker_call(const std::string& path) {
    return error_of(post(path, worker_, ""));
  }

  caf::expected<json> post(const std::string& path,
                           const httplib::Headers& headers,
                           const std::string& body) {
    return answer(cli_.Post(path, headers, body, "application/json"));
  }

  static caf::expected<json> answer(const httplib::Result& res) {
    if (!res)
      return transport_error(res.error());
    if (res->status != 200)
      return error_from(res->status, res->body);
    auto parsed = json::parse(res->body, nullptr, false);
    if (!parsed.is_object())
      return caf::make_error(caf::sec::unexpected_response,
                             "HTTP 200 without a JSON object");
    return parsed;
  }

  httplib::Client cli_;
  httplib::Headers gateway_;
  httplib::Headers worker_;
};

} // namespace

std::unique_ptr<driver> make_http_driver(const http_target& target) {
  return std::make_unique<http_driver>(target);
}

void check_http_sees(const http_target& target, chat_id chat) {
  httplib::Client cli{target.host, target.port};
  cli.set_connection_timeout(5, 0);
  cli.set_read_timeout(5, 0);
  httplib::Headers auth{{"Authorization", "Bearer " + target.gateway_token}};
  auto res = cli.Get(chat_path(chat), auth);
  if (!res)
    throw std::runtime_error("cannot reach the HTTP API at " + target.host + ":"
                             + std::to_string(target.port) + ": "
                             + httplib::to_string(res.error()));
  if (res->status == 404)
    throw std::runtime_error("the server does not know the seeded chats: "
                             "does it use the database of --postgres?");
  if (res->status != 200)
    throw std::runtime_error("the HTTP API answered "
                             + std::to_string(res->status) + ": "
                             + res->body.substr(0, 200));
  // The worker token is checked by a route of its role: a start of a
  // reservation that cannot exist answers not_found with a good token.
  auto worker = cli.Post(reservation_path(chat, 1) + "/start",
                         {{"Authorization", "Bearer " + target.worker_token}},
                         "", "application/json");
  if (worker && (worker->status == 401 || worker->status == 403))
    throw std::runtime_error("the HTTP API refuses the worker token: "
                             + worker->body.substr(0, 200));
}

} // namespace chargeonce::bench
