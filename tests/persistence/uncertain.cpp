// SPDX-License-Identifier: Apache-2.0
// Jobs of unknown outcome against a real Postgres: uncertain frees the slot
// and keeps the hold, resolve records the provider's answer once, and the
// sweep releases what stays unresolved past reconcile-timeout.
#include "persistence/store.hpp"
#include "protocol/errors.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

using namespace chargeonce;
using namespace std::chrono_literals;
using persistence::store;

namespace {

struct uncertain_fixture {
  store db{test::store_options()};

  chat_id make_chat(pockets initial) {
    auto chat = test::fresh_chat();
    REQUIRE(db.create_chat({chat, initial, caf::none, caf::none}));
    return chat;
  }

  /// A started image job of `units` units.
  reservation started(chat_id chat, const std::string& request_id = {},
                      int32_t units = 0) {
    auto r = db.reserve(chat, kind::image, request_id, units);
    REQUIRE(r);
    auto s = db.start(chat, r->id);
    REQUIRE(s);
    return *s;
  }

  pockets amounts(chat_id chat) {
    auto st = db.status(chat);
    REQUIRE(st);
    return st->amounts;
  }
};

std::string of_chat(chat_id chat) {
  return " WHERE chat_id = " + std::to_string(chat);
}

long long ledger_rows(chat_id chat) {
  return test::sql_int("SELECT count(*) FROM ledger" + of_chat(chat)
                       + " AND entry = 'charge'");
}

/// Moves a job's uncertain_at into the past, instead of waiting for it.
void age_uncertain(reservation_id id, const char* by) {
  test::sql(std::string{"UPDATE uncertain_reservations SET uncertain_at = "
                        "now() - interval '"}
            + by + "' WHERE id = " + std::to_string(id));
}

/// Lets N threads leave a starting line together.
class starting_line {
public:
  explicit starting_line(size_t n) : waiting_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> guard{mtx_};
    if (--waiting_ == 0)
      cv_.notify_all();
    else
      cv_.wait(guard, [this] { return waiting_ == 0; });
  }

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  size_t waiting_;
};

} // namespace

TEST_SUITE("uncertain") {

  TEST_CASE_FIXTURE(uncertain_fixture,
                    "uncertain frees the slot and keeps the hold: the next "
                    "job starts, and the held credit cannot be spent twice") {
    auto chat = make_chat({0, 0, 2});
    auto r = started(chat, "img-1");
    auto u = db.uncertain(chat, r.id, "prov-abc");
    REQUIRE(u);
    CHECK(u->status == reservation_status::outcome_unknown);
    CHECK(u->provider_ref == "prov-abc");
    CHECK(u->uncertain_at);
    CHECK(u->slot == -1);
    CHECK(u->held == pockets{0, 0, 1});
    // A repeat answers the same; another provider_ref is refused.
    auto again = db.uncertain(chat, r.id, "prov-abc");
    REQUIRE(again);
    CHECK(again->id == r.id);
    CHECK(db.uncertain(chat, r.id, "prov-xyz").error() == ec::invalid_argument);
    // The slot is free: a second job; the first one's credit stays held, so
    // a third finds nothing left.
    auto second = db.reserve(chat, kind::image, "img-2");
    REQUIRE(second);
    CHECK(second->held == pockets{0, 0, 1});
    REQUIRE(db.fail(chat, second->id));
    auto st = db.status(chat);
    REQUIRE(st);
    REQUIRE(st->reservations.size() == 1);
    CHECK(st->reservations[0].status == reservation_status::outcome_unknown);
    CHECK(st->reservations[0].provider_ref == "prov-abc");
    CHECK(st->held == pockets{0, 0, 1});
    CHECK_FALSE(st->active); // no job is queued or running
    // Everything but resolve is refused, and nothing is charged.
    CHECK(db.start(chat, r.id).error() == ec::invalid_state);
    CHECK(db.heartbeat(chat, r.id).error() == ec::invalid_state);
    CHECK(db.commit(chat, r.id).error() == ec::invalid_state);
    CHECK(db.fail(chat, r.id).error() == ec::invalid_state);
    CHECK(db.cancel(chat, r.id, "").error() == ec::invalid_state);
    CHECK(db.cancel(chat, 0, "img-1").error() == ec::invalid_state);
    // A reserve retried with its request id finds it, holding nothing new.
    auto replay = db.reserve(chat, kind::image, "img-1");
    REQUIRE(replay);
    CHECK(replay->id == r.id);
    CHECK(replay->status == reservation_status::outcome_unknown);
    // The sweep leaves it alone however old the job: no lease, no age.
    test::sql("UPDATE uncertain_reservations SET created_at = now() - "
              "interval '1 day'"
              + of_chat(chat));
    CHECK(db.release(chat, r.id).error() == ec::not_found);
    CHECK(amounts(chat) == pockets{0, 0, 2});
    CHECK(ledger_rows(chat) == 0);
  }

  TEST_CASE_FIXTURE(uncertain_fixture,
                    "uncertain takes a started job only, a provider_ref of 1 "
                    "to 256 bytes, and its own chat's") {
    auto chat = make_chat({0, 0, 3});
    auto queued = db.reserve(chat, kind::image, "q");
    REQUIRE(queued);
    CHECK(db.uncertain(chat, queued->id, "p").error() == ec::invalid_state);
    REQUIRE(db.start(chat, queued->id));
    CHECK(db.uncertain(chat, queued->id, "").error() == ec::invalid_argument);
    CHECK(db.uncertain(chat, queued->id, std::string(257, 'x')).error()
          == ec::invalid_argument);
    auto stranger = make_chat({0, 0, 1});
    CHECK(db.uncertain(stranger, queued->id, "p").error()
          == ec::invalid_argument);
    CHECK(db.uncertain(chat, 999999999999, "p").error() == ec::not_found);
    REQUIRE(db.uncertain(chat, queued->id, std::string(256, 'x')));
    REQUIRE(db.commit(chat, started(chat).id));
    CHECK(db.resolve(chat, queued->id, "maybe", 0).error()
          == ec::invalid_argument);
    CHECK(db.resolve(chat, queued->id, "failed", 1).error()
          == ec::invalid_argument);
  }

  TEST_CASE_FIXTURE(uncertain_fixture,
                    "resolve succeeded charges once, of the units named; a "
                    "retry answers the same, failed afterwards is "
                    "invalid_state") {
    auto chat = make_chat({0, 2, 10});
    auto r = started(chat, "five", 5);
    CHECK(r.held == pockets{0, 2, 3});
    REQUIRE(db.uncertain(chat, r.id, "prov-5"));
    CHECK(db.resolve(chat, r.id, "succeeded", 6).error()
          == ec::invalid_argument);
    auto first = db.resolve(chat, r.id, "succeeded", 3);
    REQUIRE(first);
    CHECK(first->outcome == "succeeded");
    CHECK(first->charged == pockets{0, 2, 1});
    CHECK(first->released == pockets{0, 0, 2});
    CHECK(first->units == 3);
    CHECK(first->provider_ref == "prov-5");
    auto again = db.resolve(chat, r.id, "succeeded", 5);
    REQUIRE(again);
    CHECK(again->charged == first->charged);
    CHECK(again->resolved_at == first->resolved_at);
    CHECK(db.resolve(chat, r.id, "failed", 0).error() == ec::invalid_state);
    CHECK(amounts(chat) == pockets{0, 0, 9});
    CHECK(ledger_rows(chat) == 1);
    CHECK(test::sql_int("SELECT units FROM ledger WHERE reservation_id = "
                        + std::to_string(r.id))
          == 3);
    // The job has ended: committed, by its request id too; its hold is gone.
    auto replay = db.reserve(chat, kind::image, "five");
    REQUIRE(replay);
    CHECK(replay->status == reservation_status::committed);
    CHECK(db.status(chat)->held == pockets{});
    // A worker's stale commit finds the charge resolve made: the same row.
    auto stale = db.commit(chat, r.id);
    REQUIRE(stale);
    CHECK(stale->charged == first->charged);
    CHECK(ledger_rows(chat) == 1);
  }

  TEST_CASE_FIXTURE(uncertain_fixture,
                    "resolve failed releases the hold, charges nothing; "
                    "succeeded afterwards is invalid_state") {
    auto chat = make_chat({0, 1, 0});
    auto r = started(chat, "one");
    REQUIRE(db.uncertain(chat, r.id, "prov-1"));
    auto failed = db.resolve(chat, r.id, "failed", 0);
    REQUIRE(failed);
    CHECK(failed->outcome == "failed");
    CHECK(failed->charged == pockets{});
    CHECK(failed->released == pockets{0, 1, 0});
    CHECK(failed->units == 0);
    REQUIRE(db.resolve(chat, r.id, "failed", 0));
    CHECK(db.resolve(chat, r.id, "succeeded", 0).error() == ec::invalid_state);
    CHECK(amounts(chat) == pockets{0, 1, 0});
    CHECK(ledger_rows(chat) == 0);
    CHECK(db.reserve(chat, kind::image, "one")->status
          == reservation_status::failed);
    // The daily image is free to hold again.
    CHECK(db.reserve(chat, kind::image, "two"));
    // resolve of a job that is not uncertain says so.
    auto running = db.status(chat)->reservations.front();
    CHECK(db.resolve(chat, running.id, "succeeded", 0).error()
          == ec::invalid_state);
  }

  TEST_CASE_FIXTURE(uncertain_fixture,
                    "past reconcile-timeout the sweep releases it unresolved, "
                    "nothing charged; a late resolve is expired; a resolved "
                    "one is left alone") {
    auto chat = make_chat({0, 0, 2});
    auto r = started(chat, "late");
    REQUIRE(db.uncertain(chat, r.id, "prov-late"));
    auto scan = [&] {
      std::set<reservation_id> out;
      auto xs = db.sweep_chunk({sweep_phase::unresolved, 0, 0}, 1000);
      REQUIRE(xs);
      for (const auto& x : *xs)
        out.insert(x.cursor.reservation);
      return out;
    };
    CHECK(scan().count(r.id) == 0); // young
    CHECK(db.release(chat, r.id).error() == ec::not_found);
    age_uncertain(r.id, "25 hours");
    CHECK(scan().count(r.id) == 1);
    auto released = db.release(chat, r.id);
    REQUIRE(released);
    CHECK(released->reason == "unresolved");
    CHECK(db.release(chat, r.id).error() == ec::not_found);
    CHECK(db.resolve(chat, r.id, "succeeded", 0).error() == ec::expired);
    CHECK(db.resolve(chat, r.id, "failed", 0).error() == ec::expired);
    CHECK(db.commit(chat, r.id).error() == ec::expired);
    CHECK(scan().count(r.id) == 0);
    CHECK(amounts(chat) == pockets{0, 0, 2});
    CHECK(db.status(chat)->held == pockets{});
    CHECK(ledger_rows(chat) == 0);
    CHECK(db.reserve(chat, kind::image, "late")->status
          == reservation_status::released);
    // Resolved first, then old: not released.
    auto done = started(chat);
    REQUIRE(db.uncertain(chat, done.id, "prov-done"));
    REQUIRE(db.resolve(chat, done.id, "succeeded", 0));
    age_uncertain(done.id, "25 hours");
    CHECK(scan().count(done.id) == 0);
    CHECK(db.release(chat, done.id).error() == ec::not_found);
    CHECK(amounts(chat) == pockets{0, 0, 1});
  }

  TEST_CASE_FIXTURE(uncertain_fixture,
                    "unresolved lists the open ones by id, in pages, from "
                    "their own index") {
    auto chat = make_chat({0, 0, 10});
    std::vector<reservation_id> ids;
    for (int i = 0; i < 5; ++i) {
      auto r = started(chat, "job-" + std::to_string(i));
      REQUIRE(db.uncertain(chat, r.id, "prov-" + std::to_string(i)));
      ids.push_back(r.id);
    }
    REQUIRE(db.resolve(chat, ids[2], "failed", 0));
    std::vector<reservation_id> seen;
    reservation_id after = ids.front() - 1;
    for (;;) {
      auto page = db.unresolved(after, 2);
      REQUIRE(page);
      for (const auto& x : page->jobs)
        if (x.chat == chat) {
          seen.push_back(x.id);
          auto i = std::find(ids.begin(), ids.end(), x.id) - ids.begin();
          CHECK(x.provider_ref == "prov-" + std::to_string(i));
          CHECK(x.status == reservation_status::outcome_unknown);
          CHECK(x.uncertain_at);
        }
      if (page->jobs.size() < 2)
        break;
      after = page->jobs.back().id;
    }
    CHECK(seen == std::vector<reservation_id>{ids[0], ids[1], ids[3], ids[4]});
    CHECK(db.unresolved(-1, 10).error() == ec::invalid_argument);
    CHECK(db.unresolved(0, 0).error() == ec::invalid_argument);
    CHECK(db.unresolved(0, 1001).error() == ec::invalid_argument);
    // A test table is small enough for a sequential scan: what matters is
    // that an index serves the query once the table is large.
    auto plan = test::sql(
      "SET LOCAL enable_seqscan = off; EXPLAIN (FORMAT JSON) SELECT id FROM "
      "uncertain_reservations WHERE outcome IS NULL AND id > 0 ORDER BY id "
      "LIMIT 100");
    // One of the table's indexes (the partial one of the open rows, or the
    // primary key by id): the planner picks by its statistics of the
    // moment; never a sequential scan.
    INFO(plan);
    CHECK(plan.find("\"Index Name\": \"uncertain_reservations_")
          != std::string::npos);
    CHECK(plan.find("Seq Scan") == std::string::npos);
  }

  TEST_CASE("64 concurrent resolves of one job with mixed outcomes, 20 "
            "times: one ledger row or none, and every answer agrees with "
            "it") {
    constexpr size_t contenders = 64;
    std::vector<std::unique_ptr<store>> conns;
    for (size_t i = 0; i < contenders; ++i) {
      conns.push_back(std::make_unique<store>(test::store_options()));
      REQUIRE(conns.back()->status(1).error() == ec::not_found); // connect now
    }
    auto& db = *conns[0];
    auto chat = test::fresh_chat();
    REQUIRE(db.create_chat({chat, {0, 0, 100}, caf::none, caf::none}));
    int charged = 0;
    for (int round = 0; round < 20; ++round) {
      auto r = db.reserve(chat, kind::image, "");
      REQUIRE(r);
      REQUIRE(db.start(chat, r->id));
      REQUIRE(db.uncertain(chat, r->id, "prov-" + std::to_string(round)));
      starting_line line{contenders};
      std::vector<std::future<caf::expected<resolution>>> answers;
      for (size_t i = 0; i < contenders; ++i)
        answers.push_back(std::async(std::launch::async, [&, i] {
          line.arrive_and_wait();
          return conns[i]->resolve(chat, r->id,
                                   i % 2 == 0 ? "succeeded" : "failed", 0);
        }));
      std::set<std::string> outcomes;
      int refused = 0;
      for (auto& f : answers) {
        auto x = f.get();
        if (x) {
          outcomes.insert(x->outcome);
        } else {
          REQUIRE(x.error() == ec::invalid_state);
          ++refused;
        }
      }
      // One outcome won; its 32 callers got it, the other 32 invalid_state.
      REQUIRE(outcomes.size() == 1);
      CHECK(refused == 32);
      auto rows = test::sql_int("SELECT count(*) FROM ledger WHERE "
                                "reservation_id = "
                                + std::to_string(r->id));
      REQUIRE(rows == (*outcomes.begin() == "succeeded" ? 1 : 0));
      charged += static_cast<int>(rows);
    }
    MESSAGE("succeeded won " << charged << " of 20 rounds");
    auto st = db.status(chat);
    REQUIRE(st);
    CHECK(st->amounts == pockets{0, 0, 100 - charged});
    CHECK(st->held == pockets{});
  }
}
