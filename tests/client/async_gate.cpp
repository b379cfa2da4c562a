// SPDX-License-Identifier: Apache-2.0
#include "tests/client/async_gate.hpp"

#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace chargeonce::test {

namespace {

/// Relays one request to `inner` now, or later if the gate is closed.
template <class T, class... Ts>
caf::result<T> pass(gate_pointer self, const api_facade_actor& inner,
                    gate_log& log, size_t n, std::vector<chat_id> chats,
                    bool is_batch, Ts... xs) {
  auto rp = self->template make_response_promise<T>();
  auto go = [self, inner, rp, xs...]() mutable {
    self->request(inner, caf::duration{caf::infinite}, xs...)
      .then([rp](T& x) mutable { rp.deliver(std::move(x)); },
            [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  };
  if (self->state.hold)
    self->state.held.emplace_back(std::move(go));
  else
    go();
  log.arrived(n, std::move(chats), is_batch);
  return rp;
}

} // namespace

gate_actor::behavior_type make_gate(gate_pointer self, api_facade_actor inner,
                                    std::shared_ptr<gate_log> log) {
  return {
    [self, inner, log](atom::batch a, std::vector<operation> ops) {
      std::vector<chat_id> chats;
      for (auto& x : ops)
        chats.push_back(x.chat);
      auto n = ops.size();
      return pass<std::vector<outcome>>(self, inner, *log, n, std::move(chats),
                                        true, a, std::move(ops));
    },
    [self, inner, log](atom::create a, const chat_spec& spec) {
      return pass<chat_status>(self, inner, *log, 1, {}, false, a, spec);
    },
    [self, inner, log](atom::reserve a, chat_id chat, kind k,
                       const std::string& request_id) {
      return pass<reservation>(self, inner, *log, 1, {}, false, a, chat, k,
                               request_id);
    },
    [self, inner, log](atom::reserve a, chat_id chat, kind k,
                       const std::string& request_id, int32_t units) {
      return pass<reservation>(self, inner, *log, 1, {}, false, a, chat, k,
                               request_id, units);
    },
    [self, inner, log](atom::start a, chat_id chat, reservation_id id) {
      return pass<reservation>(self, inner, *log, 1, {}, false, a, chat, id);
    },
    [self, inner, log](atom::heartbeat a, chat_id chat, reservation_id id) {
      return pass<reservation>(self, inner, *log, 1, {}, false, a, chat, id);
    },
    [self, inner, log](atom::commit a, chat_id chat, reservation_id id) {
      return pass<receipt>(self, inner, *log, 1, {}, false, a, chat, id);
    },
    [self, inner, log](atom::commit a, chat_id chat, reservation_id id,
                       int32_t units) {
      return pass<receipt>(self, inner, *log, 1, {}, false, a, chat, id, units);
    },
    [self, inner, log](atom::fail a, chat_id chat, reservation_id id) {
      return pass<reservation>(self, inner, *log, 1, {}, false, a, chat, id);
    },
    [self, inner, log](atom::start a, chat_id chat, reservation_id id,
                       const std::string& w) {
      return pass<reservation>(self, inner, *log, 1, {}, false, a, chat, id, w);
    },
    [self, inner, log](atom::heartbeat a, chat_id chat, reservation_id id,
                       const std::string& w) {
      return pass<reservation>(self, inner, *log, 1, {}, false, a, chat, id, w);
    },
    [self, inner, log](atom::commit a, chat_id chat, reservation_id id,
                       const std::string& w) {
      return pass<receipt>(self, inner, *log, 1, {}, false, a, chat, id, w);
    },
    [self, inner, log](atom::commit a, chat_id chat, reservation_id id,
                       int32_t units, const std::string& w) {
      return pass<receipt>(self, inner, *log, 1, {}, false, a, chat, id, units,
                           w);
    },
    [self, inner, log](atom::fail a, chat_id chat, reservation_id id,
                       const std::string& w) {
      return pass<reservation>(self, inner, *log, 1, {}, false, a, chat, id, w);
    },
    [self, inner, log](atom::uncertain a, chat_id chat, reservation_id id,
                       const std::string& provider_ref, const std::string& w) {
      return pass<reservation>(self, inner, *log, 1, {}, false, a, chat, id,
                               provider_ref, w);
    },
    [self, inner, log](atom::cancel a, chat_id chat) {
      return pass<reservation>(self, inner, *log, 1, {}, false, a, chat);
    },
    [self, inner, log](atom::cancel a, chat_id chat, reservation_id id,
                       const std::string& request_id) {
      return pass<reservation>(self, inner, *log, 1, {}, false, a, chat, id,
                               request_id);
    },
    [self, inner, log](atom::status a, chat_id chat) {
      return pass<chat_status>(self, inner, *log, 1, {}, false, a, chat);
    },
    [self, inner, log](atom::touch a, chat_id chat) {
      return pass<chat_status>(self, inner, *log, 1, {}, false, a, chat);
    },
    [self, inner, log](atom::top_up a, chat_id chat, int64_t credits,
                       const std::string& payment_id) {
      return pass<top_up_receipt>(self, inner, *log, 1, {}, false, a, chat,
                                  credits, payment_id);
    },
    [self, inner, log](atom::top_up a, chat_id chat, int64_t credits,
                       const std::string& payment_id,
                       const grant_terms& terms) {
      return pass<top_up_receipt>(self, inner, *log, 1, {}, false, a, chat,
                                  credits, payment_id, terms);
    },
    [self, inner, log](atom::void_grant a, chat_id chat, int64_t grant,
                       const std::string& payment_id) {
      return pass<grant_info>(self, inner, *log, 1, {}, false, a, chat, grant,
                              payment_id);
    },
    [self, inner, log](atom::premium a, chat_id chat, caf::timestamp until) {
      return pass<chat_status>(self, inner, *log, 1, {}, false, a, chat, until);
    },
    [self, inner, log](atom::flags a, chat_id chat, const flags_update& x) {
      return pass<chat_status>(self, inner, *log, 1, {}, false, a, chat, x);
    },
    [self, inner, log](atom::limits a, chat_id chat, const limits_update& x) {
      return pass<chat_status>(self, inner, *log, 1, {}, false, a, chat, x);
    },
    [self, inner, log](atom::subscribe a, caf::actor who) {
      return pass<bool>(self, inner, *log, 0, {}, false, a, std::move(who));
    },
    [self, inner, log](atom::subscribe a, caf::actor who, event_id after) {
      return pass<bool>(self, inner, *log, 0, {}, false, a, std::move(who),
                        after);
    },
    [self, inner, log](atom::uncertain a, chat_id chat, reservation_id id,
                       const std::string& provider_ref) {
      return pass<reservation>(self, inner, *log, 1, {}, false, a, chat, id,
                               provider_ref);
    },
    [self, inner, log](atom::resolve a, chat_id chat, reservation_id id,
                       const std::string& outcome) {
      return pass<resolution>(self, inner, *log, 1, {}, false, a, chat, id,
                              outcome);
    },
    [self, inner, log](atom::resolve a, chat_id chat, reservation_id id,
                       const std::string& outcome, int32_t units) {
      return pass<resolution>(self, inner, *log, 1, {}, false, a, chat, id,
                              outcome, units);
    },
    [self, inner, log](atom::unresolved a, reservation_id after,
                       uint32_t limit) {
      return pass<unresolved_page>(self, inner, *log, 0, {}, false, a, after,
                                   limit);
    },
    [self, inner, log](atom::history a, chat_id chat, int64_t before,
                       uint32_t limit) {
      return pass<history_page>(self, inner, *log, 1, {}, false, a, chat,
                                before, limit);
    },
    [self, inner, log](atom::explain a, chat_id chat) {
      return pass<chat_explanation>(self, inner, *log, 1, {}, false, a, chat);
    },
    [self](caf::close_atom) {
      self->state.hold = true;
      return true;
    },
    [self](caf::open_atom) {
      self->state.hold = false;
      auto held = std::move(self->state.held);
      self->state.held.clear();
      for (auto& f : held)
        f();
    },
  };
}

// -- ports that do not answer -------------------------------------------------

uint16_t closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

/// A port whose connections the kernel accepts (into the backlog) and that

mute_listener::mute_listener() {
  fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(fd, 128) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  port = ntohs(addr.sin_port);
}

mute_listener::~mute_listener() {
  ::close(fd);
}

// -- the fixture --------------------------------------------------------------

// Defined here so that the members' initializers (which publish) compile
// once, not in every suite.
gate_fixture::gate_fixture() = default;

uint16_t gate_fixture::publish_gate() {
  auto inner = server.sys.spawn(make_api_facade, server.core);
  gate = server.sys.spawn(make_gate, inner, log);
  server.facades.push_back(caf::actor_cast<caf::actor>(inner));
  server.facades.push_back(caf::actor_cast<caf::actor>(gate));
  auto bound = server.sys.middleman().publish(gate, 0, "127.0.0.1", true);
  return bound ? *bound : 0;
}

void gate_fixture::close_gate() {
  auto done = server.ask_actor<bool>(gate, caf::close_atom_v);
  REQUIRE(done);
}

void gate_fixture::open_gate() {
  caf::anon_send(gate, caf::open_atom_v);
}

chat_id gate_fixture::make_chat(pockets initial) {
  auto chat = fresh_chat();
  REQUIRE(setup.create_chat({chat, initial, caf::none, caf::none}));
  return chat;
}

} // namespace chargeonce::test
