// SPDX-License-Identifier: Apache-2.0
// The HTTP/JSON adapter inside chargeonce-server (off unless --http-port):
// cpp-httplib on a bounded thread pool, handing every request to the same
// role facades the CAF ports use.
#pragma once

#include "protocol/interfaces.hpp"

#include <caf/expected.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace chargeonce {

struct server_config;

namespace http {

class server {
public:
  /// Starts listening on cfg.http_bind:cfg.http_port (TLS with
  /// cfg.tls_cert/tls_key when given); nullptr when cfg.http_port is -1.
  static caf::expected<std::unique_ptr<server>> start(caf::actor_system& sys,
                                                      const server_config& cfg,
                                                      const api_actor& api,
                                                      const std::string& dsn);

  /// Stops accepting, ends event streams, waits for requests in flight
  /// (each has a finite timeout) and stops the facades.
  ~server();

  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// The bound port (the real one when cfg.http_port was 0).
  uint16_t port() const;

  struct impl;

private:
  explicit server(std::unique_ptr<impl> x);
  std::unique_ptr<impl> impl_;
};

} // namespace http

} // namespace chargeonce
