// SPDX-License-Identifier: Apache-2.0
// The HTTP/JSON adapter inside chargeonce-server (off unless --http-port):
// cpp-httplib on a bounded thread pool, handing every request to the same
// role facades the CAF ports use.
#pragma once

#include "actors/interfaces.hpp"
#include "actors/liveness.hpp"
#include "main/http/options.hpp"
#include "protocol/interfaces.hpp"

#include <caf/expected.hpp>
#include <caf/fwd.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace chargeonce::http {

class server {
public:
  /// Starts listening on opts.address:opts.port (HTTPS with
  /// opts.tls_cert/tls_key when given); nullptr when opts.port is -1. `dsn`
  /// is the database /readyz checks, `core` the actors it pings (the
  /// supervisor); without one /readyz is never ready.
  static caf::expected<std::unique_ptr<server>>
  start(caf::actor_system& sys, const http_options& opts, const core_actor& api,
        const std::string& dsn, const liveness_actor& core = {});

  /// Stops accepting, ends event streams, waits for requests in flight
  /// (each has a finite timeout) and stops the facades.
  ~server();

  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// The bound port (the real one when opts.port was 0).
  uint16_t port() const;

  struct impl;

private:
  explicit server(std::unique_ptr<impl> x);
  std::unique_ptr<impl> impl_;
};

} // namespace chargeonce::http
