// SPDX-License-Identifier: Apache-2.0
// What the client test suites share: a client's actor system config, servers
// published for it, and chats placed on a chosen server.
#pragma once

#include "client/client.hpp"
#include "tests/support/test_db.hpp"
#include "tests/support/threaded_server.hpp"

#include <caf/actor_system_config.hpp>
#include <doctest/doctest.h>

#include <initializer_list>
#include <vector>

namespace chargeonce::test {

struct client_config : caf::actor_system_config {
  client_config() { client::prepare_config(*this); }
};

/// Publishes each server's API on a free loopback port: the client's server
/// list, in the same order.
inline std::vector<client::endpoint>
publish_all(std::initializer_list<threaded_server*> xs) {
  std::vector<client::endpoint> out;
  for (auto* x : xs) {
    auto port = x->publish();
    REQUIRE(port != 0);
    out.push_back({"127.0.0.1", port});
  }
  return out;
}

/// A chat whose home is server `index` of `c`.
inline chat_id chat_homed_at(const client::client& c,
                             const std::vector<client::endpoint>& servers,
                             size_t index) {
  for (;;) {
    auto chat = fresh_chat();
    if (c.home(chat) == servers[index])
      return chat;
  }
}

} // namespace chargeonce::test
