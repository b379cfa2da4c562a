// SPDX-License-Identifier: Apache-2.0
// The server's options start from the defaults of what they configure: a
// server run without options behaves like the actors and the store that the
// tests and the bench build with default options.
#include "main/server/config.hpp"

#include <doctest/doctest.h>

using namespace chargeonce;

TEST_SUITE("server.config") {

  TEST_CASE("every default of the server is the default of the actor or "
            "store option it sets") {
    server_config cfg;
    supervisor_options sup;
    chat_options chat;
    persistence_limits limits;
    persistence::store_options store;
    CHECK(cfg.connections == sup.connections);
    CHECK(cfg.sweep_interval == sup.sweep_interval);
    CHECK(cfg.reactivation_interval == sup.reactivation_interval);
    CHECK(cfg.store_timeout == limits.store_timeout);
    CHECK(cfg.store_timeout == chat.store_timeout);
    CHECK(cfg.idle_timeout == chat.idle_timeout);
    CHECK(cfg.queue_notice_delay == chat.queue_notice_delay);
    CHECK(cfg.persistence_batch_max == limits.statement_operations_max);
    CHECK(cfg.persistence_queue_max == limits.queue_operations_max);
    CHECK(cfg.statement_timeout == caf::timespan{store.statement_timeout});
    CHECK(cfg.lease_duration == caf::timespan{store.lease_duration});
    CHECK(cfg.release_retention == caf::timespan{store.release_retention});
    CHECK(cfg.refill_interval == caf::timespan{store.refill_interval});
    CHECK(cfg.reactivation_after == caf::timespan{store.reactivation_after});
    CHECK(to_json(cfg.builtin_products()) == to_json(store.products));
    CHECK(cfg.reconcile_timeout == caf::timespan{store.reconcile_timeout});
    CHECK(cfg.expiry_notice == caf::timespan{store.expiry_notice});
    CHECK(cfg.balance_low_threshold == store.balance_low_threshold);
    CHECK(cfg.balance_low_threshold == 0);
  }
}
