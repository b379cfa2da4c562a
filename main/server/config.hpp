// SPDX-License-Identifier: Apache-2.0
// chargeonce-server's options: command line (--name=value) and an ini file
// (caf-application.ini, or --config-file=PATH) with the same names.
#pragma once

#include "actors/supervisor_actor.hpp"
#include "persistence/batch.hpp"
#include "protocol/catalog.hpp"

#include <caf/actor_system_config.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace chargeonce {

/// The store's defaults, which the server's options start from: each default
/// is defined once, where the option takes effect.
inline const persistence::store_options& store_defaults() {
  static const persistence::store_options defaults;
  return defaults;
}

struct server_config : caf::actor_system_config {
  uint16_t port = 4242;      ///< all roles, 127.0.0.1 only
  int32_t gateway_port = -1; ///< -1: not published; 0: any free port
  int32_t worker_port = -1;
  int32_t admin_port = -1;
  std::string bind = "127.0.0.1";       ///< gateway and worker ports
  std::string admin_bind = "127.0.0.1"; ///< the admin port
  bool allow_plain_tcp = false;         ///< unencrypted beyond loopback
  std::string tls_cert; ///< PEM certificate the role ports present
  std::string tls_key;  ///< its private key (unencrypted PEM)
  std::string tls_ca;   ///< the cluster CA that client certificates need

  /// Any role port configured: --port is not published.
  bool split_ports() const {
    return gateway_port >= 0 || worker_port >= 0 || admin_port >= 0;
  }

  /// All three TLS files given: role ports speak mutual TLS.
  bool tls() const { return !tls_cert.empty(); }
  std::string postgres; ///< empty: the embedded cluster
  std::string data_dir = "var/postgres";
  std::string port_file; ///< written once listening (for tests)
  std::string log_level = "info";
  caf::timespan idle_timeout = chat_options{}.idle_timeout;
  caf::timespan store_timeout = default_store_timeout;
  caf::timespan statement_timeout = store_defaults().statement_timeout;
  size_t connections = default_connections;
  /// Operations of different chats sharing one Postgres statement at most.
  size_t persistence_batch_max = persistence::statement_operations_max;
  /// Operations waiting per connection at most; beyond: `overloaded`.
  size_t persistence_queue_max = default_queue_operations_max;
  caf::timespan sweep_interval = supervisor_options{}.sweep_interval;
  caf::timespan max_job_duration = std::chrono::seconds(60);
  caf::timespan sweep_timeout = caf::timespan{0}; ///< 0: 3 x max-job-duration
  caf::timespan lease_duration = store_defaults().lease_duration;
  caf::timespan queue_notice_delay = chat_options{}.queue_notice_delay;
  caf::timespan release_retention = store_defaults().release_retention;
  caf::timespan event_retention = store_defaults().event_retention;
  caf::timespan expiry_notice = store_defaults().expiry_notice;
  /// balance_low below this available balance, unless a chat has its own;
  /// 0: off.
  int32_t balance_low_threshold = store_defaults().balance_low_threshold;
  caf::timespan subscriber_timeout = events_options{}.subscriber_timeout;
  caf::timespan refill_interval = store_defaults().refill_interval;
  caf::timespan reactivation_after = store_defaults().reactivation_after;
  caf::timespan reactivation_interval =
    supervisor_options{}.reactivation_interval;
  /// A JSON file of the kinds and pockets sold (docs/configuration.md);
  /// empty: the built-in catalog.
  std::string catalog_path;
  /// The built-in catalog's quotas (its daily pockets), per plan.
  int32_t free_daily_messages = builtin_quotas{}.free_messages;
  int32_t free_daily_images = builtin_quotas{}.free_images;
  int32_t premium_daily_messages = builtin_quotas{}.premium_messages;
  int32_t premium_daily_images = builtin_quotas{}.premium_images;
  /// The built-in kinds' cancel_after_start: `refuse` or `request`; empty
  /// means refuse, and only an empty one goes with a catalog file.
  std::string text_cancel_after_start;
  std::string image_cancel_after_start;
  /// Jobs a chat may run at once unless it has its own limit, per plan.
  int32_t free_max_active_jobs = store_defaults().free_max_active_jobs;
  int32_t premium_max_active_jobs = store_defaults().premium_max_active_jobs;
  /// How long an ended job is still found by its request id.
  caf::timespan request_retention = store_defaults().request_retention;
  /// How long a job of unknown outcome keeps its hold, unresolved.
  caf::timespan reconcile_timeout = store_defaults().reconcile_timeout;

  // -- HTTP/JSON adapter (copied into http::http_options by server.cpp) -----
  int32_t http_port = -1;              ///< -1: off; 0: any free port
  std::string http_bind = "127.0.0.1"; ///< beyond loopback only with TLS
  /// Bearer tokens per role; empty: that role's HTTP routes answer 403.
  /// The *_file variants read the token from a file (first line).
  std::string http_gateway_token;
  std::string http_worker_token;
  std::string http_admin_token;
  std::string http_gateway_token_file;
  std::string http_worker_token_file;
  std::string http_admin_token_file;
  size_t http_threads = 8;      ///< httplib worker threads (connections served)
  size_t http_max_streams = 4;  ///< concurrent /v1/events streams
  size_t http_max_body = 65536; ///< bytes; larger bodies get 413
  /// Read, write and keep-alive idle timeout of HTTP connections.
  caf::timespan http_timeout = std::chrono::seconds(5);

  /// HTTP served: --http-port is not -1.
  bool http() const { return http_port >= 0; }

  server_config();

  /// The built-in catalog with this config's daily quotas (the free-daily-*
  /// and premium-daily-* options).
  catalog builtin_products() const;

  /// What the server sells: the catalog file finalize() read, else the
  /// built-in catalog.
  const catalog& products() const { return products_; }

  /// Parses the command line and the config file (--config-file=PATH,
  /// else caf-application.ini) as CAF does, with one addition to CAF's
  /// syntax for durations: days, e.g. expiry-notice=30d (given to CAF as
  /// 720h), the same syntax the CLI takes.
  caf::error parse_with_days(int argc, char** argv);

  /// Fills derived defaults and checks the options against each other;
  /// returns a message for the operator, empty when the config is usable.
  std::string finalize();

private:
  /// The HTTP part of finalize(): reads token files and checks limits.
  std::string finalize_http();

  /// Reads and checks the catalog file into products_.
  std::string finalize_catalog();

  catalog products_;
};

} // namespace chargeonce
