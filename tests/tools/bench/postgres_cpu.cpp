// SPDX-License-Identifier: Apache-2.0
// The /proc figures the bench sums a Postgres cluster's CPU from, without
// Postgres.
#include "tools/bench/postgres_cpu.hpp"

#include "tools/bench/processes.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

using namespace chargeonce::bench;

TEST_SUITE("main.bench_postgres_cpu") {

  TEST_CASE("a process's CPU ticks name its parent and add up to its "
            "seconds") {
    auto self = read_cpu_ticks(0);
    REQUIRE(self.has_value());
    CHECK(self->parent == static_cast<int64_t>(getppid()));
    CHECK(self->own >= 0);
    CHECK(self->ended_children >= 0);
    auto seconds = read_cpu_s(0);
    REQUIRE(seconds.has_value());
    CHECK(*seconds >= seconds_of_ticks(self->own));
    CHECK_FALSE(read_cpu_ticks(-1).has_value());
  }

  TEST_CASE("a process that is not Postgres has no Postgres CPU") {
    CHECK_FALSE(postgres_process_cpu_s(getpid()).has_value());
    CHECK_FALSE(postgres_cluster_cpu_s(getpid()).has_value());
    CHECK_FALSE(postgres_process_cpu_s(0).has_value());
  }
}
