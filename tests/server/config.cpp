// SPDX-License-Identifier: Apache-2.0
// The server's options start from the defaults of what they configure: a
// server run without options behaves like the actors and the store that the
// tests and the bench build with default options.
#include "main/server/config.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

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

  TEST_CASE("the server's durations take days, on the command line and in "
            "the config file, as the CLI's do; nothing else changes") {
    using std::chrono::hours;
    auto path =
      std::string{"server-config-days-"} + std::to_string(::getpid()) + ".conf";
    {
      std::ofstream out{path};
      out << "[global]\n"
             "sweep-timeout = 2d ; two days\n"
             "release-retention=36h\n";
    }
    auto parse = [&](std::vector<std::string> args, server_config& cfg) {
      args.insert(args.begin(), "chargeonce-server");
      std::vector<char*> argv;
      for (auto& a : args)
        argv.push_back(a.data());
      return cfg.parse_with_days(static_cast<int>(argv.size()), argv.data());
    };
    server_config cfg;
    auto err = parse({"--expiry-notice=30d", "--config-file=" + path,
                      "--data-dir=7d", "--max-job-duration=90s"},
                     cfg);
    CHECK_MESSAGE(!err, caf::actor_system_config::render(err));
    CHECK(cfg.expiry_notice == hours{30 * 24});
    CHECK(cfg.sweep_timeout == hours{48});
    CHECK(cfg.release_retention == hours{36});
    CHECK(cfg.max_job_duration == std::chrono::seconds{90});
    CHECK(cfg.data_dir == "7d"); // not a duration: as given
    // The command line still wins over the file.
    server_config again;
    CHECK_FALSE(parse({"--config-file=" + path, "--sweep-timeout=3d"}, again));
    CHECK(again.sweep_timeout == hours{72});
    // What is not a duration stays refused.
    server_config bad;
    CHECK(parse({"--expiry-notice=30x"}, bad));
    server_config fraction;
    CHECK(parse({"--expiry-notice=1.5d"}, fraction));
    // A leading 0 is CAF's octal, as the CLI says: refused, not read as 10.
    server_config octal;
    CHECK(parse({"--expiry-notice=010d"}, octal));
    std::remove(path.c_str());
  }
}
