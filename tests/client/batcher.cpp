// SPDX-License-Identifier: Apache-2.0
// The client's batcher against a fake batch endpoint: what it sends never
// exceeds the server's wire limit, whatever the caller configured.
#include "client/batcher.hpp"

#include "protocol/config.hpp"
#include "protocol/interfaces.hpp"

#include <caf/all.hpp>
#include <doctest/doctest.h>

#include <algorithm>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

using namespace chargeonce;
using namespace std::chrono_literals;

namespace {

struct config : caf::actor_system_config {
  config() { register_protocol(*this); }
};

/// The sizes of the batches an endpoint received; it answers none before
/// `go` is ready.
struct batch_sizes {
  std::mutex mtx;
  std::vector<size_t> seen;
  std::shared_future<void> go;
};

/// Holds its answers until the test has queued every operation, so that the
/// next batch is as large as the batcher allows.
caf::behavior slow_endpoint(caf::event_based_actor*,
                            std::shared_ptr<batch_sizes> sizes) {
  return {
    [sizes](atom::batch, std::vector<operation>& ops) {
      {
        std::lock_guard<std::mutex> guard{sizes->mtx};
        sizes->seen.push_back(ops.size());
      }
      sizes->go.wait();
      return std::vector<outcome>(ops.size());
    },
  };
}

} // namespace

TEST_SUITE("client.batcher") {

  TEST_CASE("a batch never holds more than batch_message_operations_max "
            "operations, even when the caller allows more") {
    config cfg;
    caf::actor_system sys{cfg};
    auto sizes = std::make_shared<batch_sizes>();
    std::promise<void> all_queued;
    sizes->go = all_queued.get_future().share();
    auto endpoint = sys.spawn<caf::detached>(slow_endpoint, sizes);
    constexpr size_t n = 3000;
    std::vector<std::future<outcome>> answers;
    {
      client::batcher_options opts;
      opts.batches_in_flight_max = 1;
      opts.batch_operations_max = 5000; // above the wire limit
      client::batcher b{sys, opts};
      for (size_t i = 0; i < n; ++i) {
        operation op;
        op.chat = static_cast<chat_id>(i + 1);
        answers.push_back(b.submit(endpoint, op));
      }
      all_queued.set_value();
      for (auto& x : answers) {
        REQUIRE(x.wait_for(30s) == std::future_status::ready);
        CHECK_FALSE(x.get().error);
      }
    }
    std::lock_guard<std::mutex> guard{sizes->mtx};
    size_t total = 0;
    for (auto x : sizes->seen)
      total += x;
    CHECK(total == n);
    auto largest = *std::max_element(sizes->seen.begin(), sizes->seen.end());
    // The callers queued beyond the limit while the first batch was away.
    CHECK(largest == batch_message_operations_max);
    caf::anon_send_exit(endpoint, caf::exit_reason::user_shutdown);
  }
}
