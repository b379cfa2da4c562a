// SPDX-License-Identifier: Apache-2.0
#include "tools/chaos/proxy.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdexcept>
#include <sys/socket.h>
#include <unistd.h>

namespace chargeonce::chaos {

/// One forwarded connection: two sockets and one pump thread per direction.
/// The last pump to finish closes both sockets.
struct proxy::link {
  int down = -1; ///< the client's side
  int up = -1;   ///< the server's side
  std::mutex mtx;
  int pumps_left = 2;
  bool dead = false;

  /// Wakes both pumps; the sockets stay open until they are done.
  void shut() {
    std::lock_guard<std::mutex> guard{mtx};
    if (dead)
      return;
    dead = true;
    shutdown(down, SHUT_RDWR);
    shutdown(up, SHUT_RDWR);
  }

  ~link() {
    close(down);
    close(up);
  }
};

namespace {

sockaddr_in loopback(uint16_t port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

int connect_to(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  auto addr = loopback(port);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr))
    return close(fd), -1;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

bool write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    auto k = send(fd, data, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR)
      continue;
    if (k <= 0)
      return false;
    data += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

} // namespace

proxy::proxy(uint16_t upstream) : upstream_(upstream) {
  listener_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  auto addr = loopback(0);
  socklen_t len = sizeof addr;
  if (listener_ < 0
      || bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0
      || listen(listener_, 64) != 0
      || getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error("proxy: cannot listen on 127.0.0.1");
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread{[this] {
    accept_loop();
  }};
}

proxy::~proxy() {
  stopping_ = true;
  shutdown(listener_, SHUT_RDWR);
  acceptor_.join();
  close(listener_);
  drop_all();
  // Pumps hold their link; wait until every one has let go.
  for (;;) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      if (links_.empty())
        break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void proxy::accept_loop() {
  while (!stopping_) {
    pollfd p{listener_, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0)
      continue;
    int down = accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (down < 0)
      continue;
    int up = connect_to(upstream_);
    if (up < 0) { // the server is down: the client sees a reset at once
      close(down);
      continue;
    }
    int one = 1;
    setsockopt(down, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto l = std::make_shared<link>();
    l->down = down;
    l->up = up;
    {
      std::lock_guard<std::mutex> guard{mtx_};
      links_.insert(l);
    }
    std::thread{[this, l] {
      pump(l, true);
    }}.detach();
    std::thread{[this, l] {
      pump(l, false);
    }}.detach();
  }
}

void proxy::pump(const std::shared_ptr<link>& l, bool downstream) {
  int from = downstream ? l->up : l->down;
  int to = downstream ? l->down : l->up;
  char buf[16384];
  for (;;) {
    auto n = recv(from, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0 || !write_all(to, buf, static_cast<size_t>(n)))
      break;
  }
  l->shut(); // one side gone: the connection is gone
  bool last = false;
  {
    std::lock_guard<std::mutex> guard{l->mtx};
    last = --l->pumps_left == 0;
  }
  if (last)
    forget(l);
}

void proxy::forget(const std::shared_ptr<link>& l) {
  std::lock_guard<std::mutex> guard{mtx_};
  links_.erase(l);
}

size_t proxy::drop_all() {
  std::set<std::shared_ptr<link>> open;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    open = links_;
  }
  size_t n = 0;
  for (const auto& l : open) {
    std::lock_guard<std::mutex> guard{l->mtx};
    n += l->dead ? 0 : 1;
  }
  for (const auto& l : open)
    l->shut();
  return n;
}

} // namespace chargeonce::chaos
