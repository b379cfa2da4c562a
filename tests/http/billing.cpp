// SPDX-License-Identifier: Apache-2.0
// How a billing route waits for its facade: each httplib thread reuses one
// requester, waits at most the backend's request_timeout, and never takes
// an answer that came too late for its request as the answer to its next.
// A fake gateway facade in this process; no server, no Postgres.
#include "main/http/context.hpp"
#include "main/http/routes.hpp"
#include "protocol/interfaces.hpp"

#include <caf/all.hpp>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <httplib.h>

using namespace chargeonce;
using namespace chargeonce::http;
using namespace std::chrono_literals;

namespace {

constexpr char gateway_token[] = "gateway-token-0123456789";
constexpr chat_id late_chat = 1;
constexpr auto late_by = 300ms;

/// Answers `status` at once, except for late_chat: that answer comes
/// late_by after the request.
caf::behavior fake_gateway(caf::event_based_actor* self) {
  return {
    [self](atom::status, chat_id chat) -> caf::result<chat_status> {
      chat_status x;
      x.chat = chat;
      if (chat != late_chat)
        return x;
      auto rp = self->make_response_promise<chat_status>();
      self->spawn([rp, x](caf::event_based_actor* timer) mutable {
        timer->delayed_send(timer, late_by, caf::tick_atom_v);
        return caf::behavior{[timer, rp, x](caf::tick_atom) mutable {
          rp.deliver(x);
          timer->quit();
        }};
      });
      return rp;
    },
  };
}

httplib::Response get_status(backend& be, chat_id chat) {
  httplib::Request req;
  req.method = "GET";
  req.path = "/v1/chats/" + std::to_string(chat);
  req.set_header("Authorization", std::string{"Bearer "} + gateway_token);
  httplib::Response res;
  dispatch(be, req, std::string{}, res);
  return res;
}

} // namespace

TEST_SUITE("http billing routes") {
  TEST_CASE("a facade that answers late is a 503 after request_timeout, and "
            "its late answer is never the answer to the thread's next "
            "request") {
    caf::actor_system_config cfg;
    caf::actor_system sys{cfg};
    backend be;
    be.sys = &sys;
    be.tokens = {"", gateway_token, "", ""};
    be.request_timeout = 100ms;
    auto fake = sys.spawn(fake_gateway);
    be.gateway = caf::actor_cast<gateway_actor>(fake);
    auto late = get_status(be, late_chat);
    CHECK(late.status == 503);
    CHECK(nlohmann::json::parse(late.body).at("error") == "request_timeout");
    // The late answer arrives at this thread's requester meanwhile.
    std::this_thread::sleep_for(late_by + 100ms);
    for (chat_id chat = 2; chat < 5; ++chat) {
      auto res = get_status(be, chat);
      CHECK(res.status == 200);
      CHECK(nlohmann::json::parse(res.body).at("chat") == chat);
    }
    caf::anon_send_exit(fake, caf::exit_reason::user_shutdown);
  }
}
