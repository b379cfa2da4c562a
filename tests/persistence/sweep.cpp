// SPDX-License-Identifier: Apache-2.0
// Leases, sweeping and fencing against a real Postgres. Deadlines are moved
// into the past with direct SQL instead of waiting for them.
#include "persistence/store.hpp"
#include "protocol/catalog.hpp"
#include "protocol/errors.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>

#include <future>
#include <set>

using namespace chargeonce;
using namespace std::chrono_literals;
using persistence::store;

namespace {

/// sweep-timeout 3 min, lease 30 s, retention 24 h: the store's defaults.
persistence::store_options options() {
  return test::store_options();
}

struct sweep_fixture {
  store db{options()};

  chat_id make_chat(pockets initial = {0, 0, 5}) {
    auto chat = test::fresh_chat();
    REQUIRE(db.create_chat({chat, initial, caf::none, caf::none}));
    return chat;
  }

  reservation started(chat_id chat) {
    auto r = db.reserve(chat, kind::image, "");
    REQUIRE(r);
    auto s = db.start(chat, r->id);
    REQUIRE(s);
    return *s;
  }

  /// Every candidate of one phase, page by page, as the supervisor walks it.
  std::vector<sweep_candidate> scan(sweep_phase phase, uint32_t page) {
    std::vector<sweep_candidate> all;
    sweep_cursor after{phase, 0, 0};
    for (;;) {
      auto xs = db.sweep_chunk(after, page);
      REQUIRE(xs);
      all.insert(all.end(), xs->begin(), xs->end());
      if (xs->size() < page)
        return all;
      after = xs->back().cursor;
    }
  }

  bool found(sweep_phase phase, reservation_id id) {
    for (const auto& x : scan(phase, 1000))
      if (x.cursor.reservation == id)
        return true;
    return false;
  }
};

std::string of(reservation_id id) {
  return " WHERE id = " + std::to_string(id);
}

void lapse_lease(reservation_id id) {
  test::sql("UPDATE reservations SET lease_expires_at = now() - interval "
            "'1 second'"
            + of(id));
}

/// Postgres' clock: now() of a transaction of its own.
caf::timestamp db_now() {
  return caf::timestamp{std::chrono::microseconds{
    test::sql_int("SELECT (extract(epoch FROM now()) * 1000000)::bigint")}};
}

void age(reservation_id id, const char* by) {
  test::sql(std::string{"UPDATE reservations SET created_at = now() - "
                        "interval '"}
            + by + "'" + of(id));
}

} // namespace

TEST_SUITE("sweep") {

  TEST_CASE_FIXTURE(sweep_fixture,
                    "a heartbeat arms and extends a started job's lease") {
    auto chat = make_chat();
    auto r = db.reserve(chat, kind::image, "");
    REQUIRE(r);
    CHECK_FALSE(r->lease_expires_at);
    CHECK(db.heartbeat(chat, r->id).error() == ec::invalid_state); // queued
    REQUIRE(db.start(chat, r->id));
    // lease-duration from the heartbeat's own time, which lies between two
    // readings of Postgres' clock however long the steps take.
    auto lease = options().lease_duration;
    auto before = db_now();
    auto first = db.heartbeat(chat, r->id);
    auto after = db_now();
    REQUIRE(first);
    REQUIRE(first->lease_expires_at);
    CHECK(*first->lease_expires_at >= before + lease);
    CHECK(*first->lease_expires_at <= after + lease);
    lapse_lease(r->id);
    auto second = db.heartbeat(chat, r->id); // a lapsed, unswept lease revives
    REQUIRE(second);
    CHECK(*second->lease_expires_at > *first->lease_expires_at - 1s);
    CHECK_FALSE(found(sweep_phase::lease, r->id));
  }

  TEST_CASE_FIXTURE(sweep_fixture,
                    "a lapsed lease is released as lease_expired; afterwards "
                    "start, heartbeat and commit answer expired and charge "
                    "nothing") {
    auto chat = make_chat({0, 0, 5});
    auto r = started(chat);
    REQUIRE(db.heartbeat(chat, r.id));
    CHECK_FALSE(found(sweep_phase::lease, r.id));
    lapse_lease(r.id);
    CHECK(found(sweep_phase::lease, r.id));
    CHECK_FALSE(found(sweep_phase::age, r.id)); // young: only the lease lapsed
    auto released = db.release(chat, r.id);
    REQUIRE(released);
    CHECK(released->reason == "lease_expired");
    CHECK(db.status(chat)->active == caf::none);
    // The user starts a new job; the dead worker comes back.
    auto fresh = db.reserve(chat, kind::image, "");
    REQUIRE(fresh);
    CHECK(db.start(chat, r.id).error() == ec::expired);
    CHECK(db.heartbeat(chat, r.id).error() == ec::expired);
    CHECK(db.commit(chat, r.id).error() == ec::expired);
    CHECK(db.fail(chat, r.id).error() == ec::expired);
    auto st = db.status(chat);
    REQUIRE(st);
    CHECK(st->amounts == pockets{0, 0, 5});
    REQUIRE(st->active);
    CHECK(st->active->id == fresh->id); // the new job is untouched
    CHECK(test::sql_int(
            "SELECT count(*) FROM ledger WHERE entry = 'charge' AND chat_id = "
            + std::to_string(chat))
          == 0);
    auto stranger = make_chat();
    CHECK(db.commit(stranger, r.id).error() == ec::invalid_argument);
  }

  TEST_CASE("a cancel-requested job keeps its lease and sweep deadline: its "
            "silent worker is swept as any other, and charges nothing") {
    auto opts = options();
    for (auto& k : opts.products.kinds)
      k.cancel_after_start = cancel_policy::request;
    sweep_fixture f;
    store db{opts};
    auto chat = f.make_chat();
    auto r = f.started(chat);
    REQUIRE(db.heartbeat(chat, r.id));
    auto marked = db.cancel(chat);
    REQUIRE(marked);
    REQUIRE(marked->cancel_requested);
    lapse_lease(r.id);
    CHECK(f.found(sweep_phase::lease, r.id));
    auto released = db.release(chat, r.id);
    REQUIRE(released);
    CHECK(released->reason == "lease_expired");
    CHECK(db.commit(chat, r.id).error() == ec::expired);
    CHECK(db.cancel(chat, r.id, "").error() == ec::expired);
    // Without a heartbeat, the age limit frees the chat just the same.
    auto second = f.started(chat);
    REQUIRE(db.cancel(chat));
    age(second.id, "10 minutes");
    CHECK(f.found(sweep_phase::age, second.id));
    auto swept = db.release(chat, second.id);
    REQUIRE(swept);
    CHECK(swept->reason == "sweep_timeout");
    CHECK(db.status(chat)->amounts == pockets{0, 0, 5});
  }

  TEST_CASE_FIXTURE(sweep_fixture,
                    "sweep-timeout is the hard maximum, heartbeats or not") {
    auto chat = make_chat();
    auto r = started(chat);
    REQUIRE(db.heartbeat(chat, r.id)); // lease valid for 30 s
    age(r.id, "10 minutes");
    CHECK(found(sweep_phase::age, r.id));
    CHECK_FALSE(found(sweep_phase::lease, r.id));
    auto released = db.release(chat, r.id);
    REQUIRE(released);
    CHECK(released->reason == "sweep_timeout");
    auto queued_chat = make_chat();
    auto queued = db.reserve(queued_chat, kind::image, "");
    REQUIRE(queued);
    age(queued->id, "10 minutes"); // a job no worker ever took
    REQUIRE(db.release(queued_chat, queued->id));
    CHECK(db.start(queued_chat, queued->id).error() == ec::expired);
  }

  TEST_CASE_FIXTURE(sweep_fixture,
                    "release re-checks the deadline: a job that heartbeated or "
                    "committed since the scan is left alone") {
    auto chat = make_chat();
    auto r = started(chat);
    REQUIRE(db.heartbeat(chat, r.id));
    lapse_lease(r.id);
    REQUIRE(found(sweep_phase::lease, r.id));
    REQUIRE(db.heartbeat(chat, r.id)); // the worker was only slow
    CHECK(db.release(chat, r.id).error() == ec::not_found);
    CHECK(db.status(chat)->active);
    lapse_lease(r.id);
    REQUIRE(db.commit(chat, r.id));
    CHECK(db.release(chat, r.id).error() == ec::not_found);
    auto receipt = db.commit(chat, r.id); // still the first receipt
    REQUIRE(receipt);
    CHECK(receipt->charged == pockets{0, 0, 1});
  }

  TEST_CASE_FIXTURE(sweep_fixture,
                    "commit racing release 200 times: charged or released, "
                    "never both, never neither") {
    store other{options()};
    auto chat = make_chat({0, 0, 1000});
    int charged = 0;
    for (int i = 0; i < 200; ++i) {
      auto r = started(chat);
      REQUIRE(db.heartbeat(chat, r.id));
      lapse_lease(r.id);
      auto commit =
        std::async(std::launch::async, [&] { return db.commit(chat, r.id); });
      auto release = std::async(std::launch::async,
                                [&] { return other.release(chat, r.id); });
      auto c = commit.get();
      auto rel = release.get();
      REQUIRE(static_cast<bool>(c) != static_cast<bool>(rel));
      if (c) {
        ++charged;
        REQUIRE(rel.error() == ec::not_found);
      } else {
        REQUIRE(c.error() == ec::expired);
      }
    }
    MESSAGE("committed first: " << charged << " of 200");
    auto where = " WHERE chat_id = " + std::to_string(chat);
    CHECK(test::sql_int("SELECT count(*) FROM ledger" + where
                        + " AND entry = 'charge'")
          == charged);
    CHECK(test::sql_int("SELECT count(*) FROM released_reservations" + where)
          == 200 - charged);
    CHECK(db.status(chat)->amounts.get(pocket::balance) == 1000 - charged);
  }

  TEST_CASE_FIXTURE(sweep_fixture,
                    "keyset pages visit every stuck reservation exactly once") {
    constexpr int64_t n = 250;
    auto base = test::fresh_chat_block(n);
    auto range = std::to_string(base) + ", " + std::to_string(base + n - 1);
    test::sql("INSERT INTO chats (chat_id, pockets) SELECT g, "
              "'{NULL,NULL,1}' FROM "
              "generate_series("
              + range + ") g");
    // Equal created_at for many rows: the id breaks the ties.
    test::sql("INSERT INTO reservations (chat_id, kind, status, held, queue, "
              "created_at) SELECT g, 'image', 'in_progress', "
              "'{NULL,NULL,1}', "
              "'image_generation', now() - interval '1 hour' - (g % 3) * "
              "interval '1 second' FROM generate_series("
              + range + ") g");
    std::set<chat_id> seen;
    for (const auto& x : scan(sweep_phase::age, 7))
      if (x.chat >= base && x.chat < base + n)
        CHECK(seen.insert(x.chat).second);
    CHECK(seen.size() == static_cast<size_t>(n));
    test::sql("DELETE FROM reservations WHERE chat_id BETWEEN "
              + range.replace(range.find(','), 1, " AND"));
  }

  TEST_CASE_FIXTURE(sweep_fixture,
                    "released reservations are forgotten after the retention "
                    "period") {
    auto chat = make_chat();
    auto r = started(chat);
    age(r.id, "1 hour");
    REQUIRE(db.release(chat, r.id));
    REQUIRE(db.prune());
    CHECK(db.commit(chat, r.id).error() == ec::expired); // still remembered
    test::sql("UPDATE released_reservations SET released_at = now() - interval "
              "'25 hours'"
              + of(r.id));
    auto pruned = db.prune();
    REQUIRE(pruned);
    CHECK(*pruned >= 1);
    CHECK(db.commit(chat, r.id).error() == ec::not_found);
  }

  TEST_CASE_FIXTURE(sweep_fixture,
                    "a prune goes on chunk after chunk until every row past "
                    "the retention is gone") {
    // 2,500 rows: two whole chunks of 1,000 and a short one.
    auto chat = make_chat();
    auto where = " WHERE chat_id = " + std::to_string(chat);
    test::sql("INSERT INTO released_reservations (id, chat_id, reason, "
              "released_at) SELECT 9100000000000 + 10000 * "
              + std::to_string(chat % 1000000) + "::bigint + g, "
              + std::to_string(chat)
              + ", 'lease_expired', now() - interval '25 hours' "
                "FROM generate_series(1, 2500) g");
    auto pruned = db.prune();
    REQUIRE(pruned);
    CHECK(*pruned >= 2500);
    CHECK(test::sql_int("SELECT count(*) FROM released_reservations" + where)
          == 0);
  }

} // TEST_SUITE
