// SPDX-License-Identifier: Apache-2.0
// What the client test suites share: a client's actor system config and
// chats placed on a chosen server.
#pragma once

#include "client/client.hpp"
#include "tests/persistence/test_db.hpp"

#include <caf/actor_system_config.hpp>

#include <vector>

namespace chargeonce::test {

struct client_config : caf::actor_system_config {
  client_config() { client::prepare_config(*this); }
};

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
