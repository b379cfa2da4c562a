// SPDX-License-Identifier: Apache-2.0
// One enum of operations end to end: the numbers a batch carries on the
// wire stay what they were, and the table answers what each operation is.
#include "protocol/operation_type.hpp"

#include <doctest/doctest.h>

#include <set>
#include <string>

using namespace chargeonce;

TEST_SUITE("protocol.operation_type") {

  TEST_CASE("the operations of a batch keep the numbers they cross the "
            "network with") {
    CHECK(static_cast<int>(operation_type::touch) == 0);
    CHECK(static_cast<int>(operation_type::reserve) == 1);
    CHECK(static_cast<int>(operation_type::cancel) == 2);
    CHECK(static_cast<int>(operation_type::status) == 3);
    CHECK(static_cast<int>(operation_type::start) == 4);
    CHECK(static_cast<int>(operation_type::heartbeat) == 5);
    CHECK(static_cast<int>(operation_type::commit) == 6);
    CHECK(static_cast<int>(operation_type::fail) == 7);
  }

  TEST_CASE("a peer may send exactly the eight batch operations in a "
            "batch") {
    for (int i = 0; i < 256; ++i) {
      auto x = static_cast<operation_type>(i);
      CAPTURE(i);
      CHECK(is_valid(x) == (i <= 7));
    }
  }

  TEST_CASE("the gateway's batch operations are touch, reserve, cancel and "
            "status; the worker's start, heartbeat, commit and fail") {
    std::set<std::string> gateway;
    std::set<std::string> worker;
    for (const auto& t : operation_table)
      if (t.batchable)
        (is_gateway_operation(t.type) ? gateway : worker).insert(t.name);
    CHECK(gateway
          == std::set<std::string>{"cancel", "reserve", "status", "touch"});
    CHECK(worker
          == std::set<std::string>{"commit", "fail", "heartbeat", "start"});
  }

  TEST_CASE("every operation has one name, the metric label and the SQL "
            "batch's op text; a value that is none is unknown") {
    std::set<std::string> names;
    for (const auto& t : operation_table) {
      CHECK(to_string(t.type) == std::string{t.name});
      names.insert(t.name);
    }
    CHECK(names.size() == operation_type_count);
    CHECK(std::string{to_string(operation_type::top_up)} == "top_up");
    CHECK(std::string{to_string(operation_type::count_)} == "unknown");
    CHECK(std::string{to_string(static_cast<operation_type>(200))}
          == "unknown");
  }

  TEST_CASE("a persistence statement carries the batch operations but "
            "touch; only cancel and create are not retry-safe") {
    for (const auto& t : operation_table) {
      CAPTURE(t.name);
      CHECK(t.in_statement == (t.batchable && t.type != operation_type::touch));
      CHECK(t.retry_safe
            == (t.type != operation_type::cancel
                && t.type != operation_type::create));
    }
  }
}
