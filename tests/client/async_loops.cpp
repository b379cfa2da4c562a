// SPDX-License-Identifier: Apache-2.0
#include "tests/client/async_loops.hpp"

#include "protocol/errors.hpp"
#include "tests/client/async_script.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <string>

using namespace std::chrono_literals;

namespace chargeonce::test {

void closed_loop::run(chat_id chat, int cycle) {
  if (cycle == cycles) {
    done.arrive();
    return;
  }
  auto failed = [this](const std::string& what) {
    ++failures;
    odd.add(what);
    done.arrive();
  };
  auto slot = t.take();
  issue([&] {
    c.reserve(
      chat, kind::text, "job" + std::to_string(cycle),
      t.watch<reservation>(slot, [=](caf::expected<reservation>& r) {
        if (!r || r->chat != chat || r->held != pockets{1, 0, 0})
          return failed("reserve: " + summary(r));
        auto id = r->id;
        auto held = r->held;
        auto slot = t.take();
        issue([&] {
          c.start(
            chat, id,
            t.watch<reservation>(slot, [=](caf::expected<reservation>& s) {
              if (!s || s->id != id
                  || s->status != reservation_status::in_progress)
                return failed("start: " + summary(s));
              auto slot = t.take();
              issue([&] {
                c.commit(chat, id,
                         t.watch<receipt>(slot, [=](caf::expected<receipt>& x) {
                           if (!x || x->reservation != id || x->charged != held)
                             return failed("commit: " + summary(x));
                           run(chat, cycle + 1);
                         }));
              });
            }));
        });
      }));
  });
}

std::pair<uint64_t, uint64_t> race_reserves(const client::options& opts,
                                            chat_id chat) {
  tracker t{64};
  countdown done{64};
  std::atomic<int> won{0};
  std::atomic<int> busy{0};
  std::atomic<int> other{0};
  std::pair<uint64_t, uint64_t> sent;
  {
    client_side side;
    client::client c{side.sys, opts};
    for (int i = 0; i < 64; ++i) {
      auto slot = t.take();
      issue([&] {
        c.reserve(
          chat, kind::image, "tap" + std::to_string(i),
          t.watch<reservation>(slot, [&](caf::expected<reservation>& r) {
            if (r)
              ++won;
            else if (r.error() == ec::busy)
              ++busy;
            else
              ++other;
            done.arrive();
          }));
      });
    }
    CHECK(done.wait(30s));
    sent = c.batches_sent();
  }
  CHECK(won.load() == 1);
  CHECK(busy.load() == 63);
  CHECK(other.load() == 0);
  check_exactly_once(t, 64);
  return sent;
}

} // namespace chargeonce::test
