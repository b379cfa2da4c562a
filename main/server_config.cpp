// SPDX-License-Identifier: Apache-2.0
#include "main/server_config.hpp"

#include "protocol/config.hpp"

#include <caf/io/middleman.hpp>

namespace chargeonce {

server_config::server_config() {
  opt_group{custom_options_, "global"}
    .add(port, "port,p",
         "TCP port of the API on 127.0.0.1 (0 picks a free one)")
    .add(postgres, "postgres",
         "libpq connection string; empty: embedded cluster under data-dir")
    .add(data_dir, "data-dir", "directory of the embedded Postgres cluster")
    .add(idle_timeout, "idle-timeout",
         "passivate a chat actor after this long without operations")
    .add(store_timeout, "store-timeout",
         "how long an operation waits for Postgres before storage_unavailable")
    .add(statement_timeout, "statement-timeout",
         "Postgres statement_timeout of every connection")
    .add(connections, "connections",
         "Postgres connections (persistence actors); chats are partitioned")
    .add(log_level, "log-level", "trace|debug|info|warn|error|off")
    .add(port_file, "port-file", "write the bound port to this file");
  register_protocol(*this);
  load<caf::io::middleman>();
}

} // namespace chargeonce
