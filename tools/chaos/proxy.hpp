// SPDX-License-Identifier: Apache-2.0
// A TCP forwarder on 127.0.0.1 in front of one server. Clients connect to
// the proxy, so that "dropped client connections" are real TCP resets the
// client library must survive (CAF keeps its connection to a node open even
// when the client object that made it is destroyed).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

namespace chargeonce::chaos {

class proxy {
public:
  /// Listens on a free port; forwards each connection to `upstream`.
  explicit proxy(uint16_t upstream);
  ~proxy();
  proxy(const proxy&) = delete;
  proxy& operator=(const proxy&) = delete;

  uint16_t port() const { return port_; }

  /// Where new connections go (a restarted server may listen elsewhere).
  void retarget(uint16_t upstream) { upstream_ = upstream; }

  /// Resets every open connection; how many there were.
  size_t drop_all();

private:
  struct link;
  void accept_loop();
  void pump(const std::shared_ptr<link>& l, bool downstream);
  void forget(const std::shared_ptr<link>& l);

  int listener_ = -1;
  uint16_t port_ = 0;
  std::atomic<uint16_t> upstream_;
  std::atomic<bool> stopping_{false};
  std::mutex mtx_;
  std::set<std::shared_ptr<link>> links_;
  std::thread acceptor_;
};

} // namespace chargeonce::chaos
