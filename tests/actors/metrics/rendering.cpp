// SPDX-License-Identifier: Apache-2.0
// GET /metrics must parse: every line of render() is checked by a strict
// validator of Prometheus' text format 0.0.4 (which is itself tested on
// broken input).
#include "actors/metrics/rendering.hpp"

#include "actors/metrics/recording.hpp"
#include "protocol/errors.hpp"
#include "tests/actors/metrics/exposition.hpp"

#include <caf/error.hpp>
#include <caf/sec.hpp>
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>

using namespace chargeonce;
using namespace std::chrono_literals;
using test::ops;
using test::validate;
using test::value_of;

TEST_SUITE("metrics") {

  TEST_CASE("the validator refuses what Prometheus would refuse") {
    const std::string type = "# TYPE x_total counter\n";
    CHECK(validate(type + "x_total 1\n").empty());
    CHECK(validate(type + "x_total{a=\"q\\\"\\\\\\n\"} 1.5e3\n").empty());
    CHECK_FALSE(validate("x_total 1\n").empty());      // no TYPE
    CHECK_FALSE(validate(type + "x_total 1").empty()); // no final newline
    CHECK_FALSE(validate(type + "x-total 1\n").empty());
    CHECK_FALSE(validate(type + "x_total{1a=\"q\"} 1\n").empty());
    CHECK_FALSE(validate(type + "x_total{a=\"q} 1\n").empty());
    CHECK_FALSE(validate(type + "x_total{a=\"\\t\"} 1\n").empty());
    CHECK_FALSE(validate(type + "x_total{a=q} 1\n").empty());
    CHECK_FALSE(validate(type + "x_total one\n").empty());
    CHECK_FALSE(validate(type + "x_total -1\n").empty());
    CHECK_FALSE(validate(type + "x_total 1\nx_total 2\n").empty());
    CHECK_FALSE(validate(type + "x_total 1\n" + type).empty());
    CHECK_FALSE(
      validate("# TYPE x gauge\nx 1\n# TYPE y gauge\ny 1\nx 2\n").empty());
    const std::string h = "# TYPE h histogram\n";
    CHECK(validate(h
                   + "h_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
                     "h_sum 3\nh_count 2\n")
            .empty());
    CHECK_FALSE(validate(h
                         + "h_bucket{le=\"1\"} 3\nh_bucket{le=\"+Inf\"} 2\n"
                           "h_sum 3\nh_count 2\n")
                  .empty()); // not cumulative
    CHECK_FALSE(validate(h + "h_bucket{le=\"1\"} 1\nh_sum 3\nh_count 1\n")
                  .empty()); // no +Inf
    CHECK_FALSE(validate(h + "h_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 1\n")
                  .empty()); // count differs
    CHECK_FALSE(validate(h
                         + "h_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1\n"
                           "h_bucket{le=\"+Inf\"} 1\nh_sum 3\nh_count 1\n")
                  .empty()); // le not increasing
  }

  TEST_CASE("label values and help texts are escaped") {
    using metrics::detail::escape_help;
    using metrics::detail::escape_label_value;
    CHECK(escape_label_value("a\"b\\c\nd") == "a\\\"b\\\\c\\nd");
    CHECK(escape_help("a\"b\\c\nd") == "a\"b\\\\c\\nd");
    CHECK(metrics::detail::format_value(0.005) == "0.005");
    CHECK(metrics::detail::format_value(60) == "60");
    CHECK(metrics::detail::format_value(INFINITY) == "+Inf");
  }

  TEST_CASE("every line of the rendered metrics is valid exposition format") {
    // Touch every family, including the ones only the store's side feeds.
    metrics::record_operation(operation_type::reserve,
                              caf::make_error(ec::busy), 3ms);
    metrics::record_operation(operation_type::commit,
                              caf::make_error(caf::sec::runtime_error), 2s);
    metrics::count_release("lease_expired");
    metrics::count_release("surprise");
    metrics::observe_persistence_batch(3);
    metrics::observe_persistence_batch(1000);
    {
      metrics::queue_depth_share share;
      share.set(5);
      CHECK(value_of(metrics::render(), "chargeonce_persistence_queue_depth")
            >= 5);
    }
    metrics::set_active_reservations(active_count{5, 2});
    auto text = metrics::render();
    INFO(text);
    CHECK(validate(text) == "");
    CHECK(value_of(text, ops("reserve", "busy")) >= 1);
    CHECK(value_of(text, ops("commit", "other")) >= 1);
    CHECK(value_of(text, "chargeonce_releases_total{reason=\"other\"}") >= 1);
    CHECK(value_of(text, "chargeonce_active_reservations") == 7);
    CHECK(
      value_of(text, "chargeonce_active_reservations_by_plan{plan=\"free\"}")
      == 5);
    CHECK(
      value_of(text, "chargeonce_active_reservations_by_plan{plan=\"premium\"}")
      == 2);
    CHECK(
      value_of(text, "chargeonce_persistence_batch_size_bucket{le=\"+Inf\"}")
      >= 2);
    for (const char* family : {"chargeonce_operations_total",
                               "chargeonce_operation_duration_seconds",
                               "chargeonce_internal_errors_total",
                               "chargeonce_queue_notices_total",
                               "chargeonce_cancel_requests_total",
                               "chargeonce_event_subscribers_cut_off_total",
                               "chargeonce_releases_total",
                               "chargeonce_reactivations_total",
                               "chargeonce_sweeps_total",
                               "chargeonce_persistence_restarts_total",
                               "chargeonce_storage_errors_total",
                               "chargeonce_chat_actors",
                               "chargeonce_passivations_total",
                               "chargeonce_persistence_batch_size",
                               "chargeonce_persistence_queue_depth",
                               "chargeonce_persistence_queue_max",
                               "chargeonce_active_reservations",
                               "chargeonce_active_reservations_by_plan",
                               "chargeonce_reconcile_needed_total",
                               "chargeonce_persistence_reconnects_total",
                               "chargeonce_storage_unavailable",
                               "chargeonce_storage_unavailable_seconds_total",
                               "chargeonce_build_info",
                               "process_cpu_seconds_total",
                               "process_resident_memory_bytes",
                               "process_virtual_memory_bytes",
                               "process_open_fds",
                               "process_max_fds",
                               "process_start_time_seconds"})
      CHECK_MESSAGE(text.find(std::string{"# TYPE "} + family + " ")
                      != std::string::npos,
                    family);
  }

  TEST_CASE("time without a primary runs while any persistence actor finds "
            "no writable Postgres, once for overlapping spells; reconnects "
            "are counted") {
    auto seconds = [] {
      return value_of(metrics::render(),
                      "chargeonce_storage_unavailable_seconds_total");
    };
    auto members = [] {
      return value_of(metrics::render(), "chargeonce_storage_unavailable");
    };
    auto reconnects =
      value_of(metrics::render(), "chargeonce_persistence_reconnects_total");
    metrics::count_reconnects(2);
    CHECK(value_of(metrics::render(), "chargeonce_persistence_reconnects_total")
          == reconnects + 2);
    auto before = seconds();
    auto t0 = std::chrono::steady_clock::now();
    {
      metrics::unavailable_share a;
      metrics::unavailable_share b;
      a.set(true);
      a.set(true); // the same spell
      b.set(true);
      CHECK(members() == 2);
      std::this_thread::sleep_for(300ms);
      CHECK(seconds() - before >= 0.3); // the spell going on, included
      a.set(false);
      CHECK(members() == 1);
    } // b withdrawn by its destructor: the spell ends
    std::chrono::duration<double> watched =
      std::chrono::steady_clock::now() - t0;
    CHECK(members() == 0);
    auto after = seconds();
    MESSAGE("spell of two overlapping shares: "
            << after - before << " s, " << watched.count() << " s watched");
    // Both were down at once for at least the 300 ms sleep. Counted once,
    // the spell is no longer than the time the test watched it; their sum
    // would exceed that by the overlap (0.3 s), unless the test thread
    // stalled as long outside the spell. A slow machine never fails it.
    CHECK(after - before >= 0.3);
    CHECK(after - before <= watched.count() + 1e-6);
    // Nothing runs without a spell: a slow machine only waits longer.
    std::this_thread::sleep_for(50ms);
    CHECK(seconds() == after);
  }

  TEST_CASE("the standard process metrics describe this process, and "
            "chargeonce_build_info names the version") {
    auto text = metrics::render();
    INFO(text);
    auto now = std::chrono::duration<double>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
    auto started = value_of(text, "process_start_time_seconds");
    CHECK(started > now - 86400); // a test process is younger than a day
    CHECK(started <= now + 1);
    auto cpu = value_of(text, "process_cpu_seconds_total");
    CHECK(cpu >= 0);
    CHECK(cpu <= (now - started + 1) * 64); // no more than 64 cores' worth
    auto fds = value_of(text, "process_open_fds");
    CHECK(fds >= 3); // stdin, stdout, stderr
    CHECK(value_of(text, "process_max_fds") >= fds);
    auto rss = value_of(text, "process_resident_memory_bytes");
    CHECK(rss > 1024 * 1024);
    CHECK(value_of(text, "process_virtual_memory_bytes") >= rss);
    CHECK(value_of(text, "chargeonce_build_info{version=\"0.1.0\"}") == 1);
  }

  TEST_CASE("an internal answer is counted by operation in "
            "chargeonce_internal_errors_total, which always exists") {
    const std::string commit =
      "chargeonce_internal_errors_total{operation=\"commit\"}";
    const std::string status =
      "chargeonce_internal_errors_total{operation=\"status\"}";
    auto before = metrics::render();
    REQUIRE(value_of(before, status) >= 0); // present before any bug
    auto commits = value_of(before, commit);
    metrics::record_operation(operation_type::commit,
                              caf::make_error(ec::internal, "id=1"), 1ms);
    metrics::record_operation(operation_type::commit,
                              caf::make_error(ec::storage_unavailable), 1ms);
    metrics::record_operation(operation_type::commit, caf::error{}, 1ms);
    auto after = metrics::render();
    CHECK(value_of(after, commit) == commits + 1);
    CHECK(value_of(after, ops("commit", "internal")) >= 1);
    CHECK(validate(after) == "");
  }
}
