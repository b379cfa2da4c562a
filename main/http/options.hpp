// SPDX-License-Identifier: Apache-2.0
// What configures the HTTP/JSON adapter: its own options, so that it needs
// nothing of the server's configuration (main/server fills them in).
#pragma once

#include <caf/timespan.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace chargeonce::http {

struct http_options {
  int32_t port = -1;                 ///< -1: off; 0: any free port
  std::string address = "127.0.0.1"; ///< where to listen
  /// Bearer tokens per role; empty: that role's routes answer 403.
  std::string gateway_token;
  std::string worker_token;
  std::string admin_token;
  /// PEM certificate and private key; both empty: plain HTTP. Server-side
  /// TLS only: the bearer tokens authenticate the clients.
  std::string tls_cert;
  std::string tls_key;
  size_t threads = 8;      ///< worker threads: connections served at once
  size_t streams_max = 4;  ///< concurrent /v1/events streams
  size_t body_max = 65536; ///< bytes; larger bodies get 413
  /// Read, write and keep-alive idle timeout of a connection.
  caf::timespan io_timeout = std::chrono::seconds(5);
  /// One CAF request per HTTP request waits at most this long; longer than
  /// the chat actors' store timeout, so that they answer first.
  caf::timespan request_timeout = std::chrono::seconds(15);

  /// Served at all: `port` is not -1.
  bool enabled() const { return port >= 0; }

  /// HTTPS: a certificate was given.
  bool tls() const { return !tls_cert.empty(); }
};

} // namespace chargeonce::http
