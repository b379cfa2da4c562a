// SPDX-License-Identifier: Apache-2.0
// Which requests fail over to a chat's next server after a connection
// error: the decision for every request type, the same for the blocking and
// the asynchronous calls.
#include "client/retry.hpp"

#include "client/client_impl.hpp"
#include "protocol/errors.hpp"

#include <doctest/doctest.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

using namespace chargeonce;
using namespace chargeonce::client;

namespace {

/// Every operation a batch may carry.
const std::vector<operation_type> operations{
  operation_type::touch,  operation_type::reserve, operation_type::cancel,
  operation_type::status, operation_type::start,   operation_type::heartbeat,
  operation_type::commit, operation_type::fail,
};

} // namespace

TEST_SUITE("client.retry") {

  TEST_CASE("status, touch, start, heartbeat, commit and fail fail over; "
            "cancel does not") {
    CHECK(retry_safe(operation_type::status));
    CHECK(retry_safe(operation_type::touch));
    CHECK(retry_safe(operation_type::start));
    CHECK(retry_safe(operation_type::heartbeat));
    CHECK(retry_safe(operation_type::commit));
    CHECK(retry_safe(operation_type::fail));
    CHECK_FALSE(retry_safe(operation_type::cancel));
  }

  TEST_CASE("a reserve fails over only with a request_id") {
    CHECK(retry_safe(operation_type::reserve, "job-1"));
    CHECK_FALSE(retry_safe(operation_type::reserve, ""));
    CHECK_FALSE(retry_safe(operation_type::reserve));
  }

  TEST_CASE("a request id the client makes up is auto: and 128 random bits, "
            "never the same twice") {
    std::set<std::string> seen;
    for (int i = 0; i < 10000; ++i) {
      auto id = make_auto_request_id();
      CHECK(id.rfind("auto:", 0) == 0);
      CHECK(id.size() == 5 + 32);
      CHECK(id.find_first_not_of("0123456789abcdef", 5) == std::string::npos);
      CHECK(retry_safe(operation_type::reserve, id));
      seen.insert(id);
    }
    CHECK(seen.size() == 10000);
  }

  TEST_CASE("a value that is no operation never fails over") {
    CHECK_FALSE(retry_safe(static_cast<operation_type>(200), "job-1"));
    CHECK_FALSE(retry_safe(operation_type::count_));
  }

  TEST_CASE("top-up, set-premium and set-flags fail over; create does not") {
    CHECK(retry_safe(operation_type::top_up));
    CHECK(retry_safe(operation_type::set_premium));
    CHECK(retry_safe(operation_type::set_flags));
    CHECK_FALSE(retry_safe(operation_type::create));
  }

  TEST_CASE("an operation of a batch gets the decision of its type, with "
            "its request_id") {
    for (auto op : operations) {
      CAPTURE(to_string(op));
      operation x{op, 42, 7, kind::text, {}};
      CHECK(retry_safe(x) == retry_safe(op));
      x.request_id = "job-1";
      CHECK(retry_safe(x) == retry_safe(op, "job-1"));
    }
    CHECK_FALSE(
      retry_safe(operation{operation_type::reserve, 42, 0, kind::image, ""}));
    CHECK(retry_safe(
      operation{operation_type::reserve, 42, 0, kind::image, "job-1"}));
  }

  TEST_CASE("only a request_id turns a request's decision around, and only "
            "a reserve's") {
    for (auto type :
         {operation_type::touch, operation_type::cancel, operation_type::status,
          operation_type::start, operation_type::heartbeat,
          operation_type::commit, operation_type::fail, operation_type::create,
          operation_type::top_up, operation_type::set_premium,
          operation_type::set_flags}) {
      CAPTURE(static_cast<int>(type));
      CHECK(retry_safe(type, "job-1") == retry_safe(type, ""));
    }
  }

  TEST_CASE("every answer of the service is final, internal included; only "
            "connection errors move on to the next server") {
    for (int i = 1; i <= static_cast<int>(ec::internal); ++i) {
      auto code = static_cast<ec>(i);
      CAPTURE(to_string(code));
      CHECK(is_service_error(caf::make_error(code, "answer")));
    }
    CHECK(is_service_error(caf::make_error(ec::internal)));
    CHECK_FALSE(is_service_error(caf::make_error(caf::sec::request_timeout)));
    CHECK_FALSE(
      is_service_error(caf::make_error(caf::sec::request_receiver_down)));
  }

} // TEST_SUITE
