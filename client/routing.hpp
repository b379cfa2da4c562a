// SPDX-License-Identifier: Apache-2.0
// Which server owns a chat: rendezvous (highest random weight) hashing, so
// adding or removing a server moves only that server's chats.
#pragma once

#include "protocol/types.hpp"

#include <caf/expected.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace chargeonce::client {

/// Where a server listens (one role's port, or the all-roles --port).
struct endpoint {
  std::string host;
  uint16_t port = 0;

  std::string label() const;

  friend bool operator==(const endpoint& x, const endpoint& y) {
    return x.host == y.host && x.port == y.port;
  }
};

/// "HOST:PORT" or "[IPv6]:PORT".
caf::expected<endpoint> parse_endpoint(const std::string& text);

/// "H1:P1,H2:P2,…": at least one, no duplicates.
caf::expected<std::vector<endpoint>> parse_endpoints(const std::string& text);

/// The chat's weight on a server: stable across processes and versions.
uint64_t weight(const endpoint& server, chat_id chat);

/// Server indexes by descending weight: the first is the chat's home, the
/// next ones are where its requests fail over.
std::vector<size_t> rank(const std::vector<endpoint>& servers, chat_id chat);

} // namespace chargeonce::client
