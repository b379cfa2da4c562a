// SPDX-License-Identifier: Apache-2.0
// The events table against a real Postgres: each announced change writes
// its event in its own transaction (nothing when it rolls back), ids follow
// commit order so that a reader following its last id misses nothing, and
// old events are pruned.
#include "persistence/store.hpp"
#include "protocol/errors.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>
#include <pqxx/pqxx>

#include <atomic>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace chargeonce;
using namespace std::chrono_literals;
using persistence::store;

namespace {

persistence::store_options options() {
  auto opts = test::store_options();
  for (auto& k : opts.products.kinds)
    if (k.name == "image")
      k.cancel_after_start = cancel_policy::request;
  return opts;
}

struct events_fixture {
  store db{options()};

  chat_id make_chat() {
    auto chat = test::fresh_chat();
    REQUIRE(db.create_chat({chat, pockets{5, 5, 5}, caf::none, caf::none}));
    return chat;
  }

  reservation started(chat_id chat) {
    auto r = db.reserve(chat, kind::image, "", 0);
    REQUIRE(r);
    auto s = db.start(chat, r->id);
    REQUIRE(s);
    return *s;
  }

  event_id newest() {
    auto page = db.events_after(0, 0);
    REQUIRE(page);
    return page->last_id;
  }

  /// Every event after `after` (all pages).
  std::vector<event_record> after(event_id after) {
    std::vector<event_record> out;
    for (;;) {
      auto page = db.events_after(after, 100);
      REQUIRE(page);
      if (page->events.empty())
        return out;
      after = page->events.back().id;
      out.insert(out.end(), page->events.begin(), page->events.end());
    }
  }
};

std::string of(reservation_id id) {
  return " WHERE id = " + std::to_string(id);
}

/// A second connection of its own, for transactions held open by the test.
pqxx::connection connect() {
  return pqxx::connection{test::dsn()};
}

/// Inserts a released_reservations row (as a release does) in `tx`, which
/// the test commits or rolls back itself.
void released_row(pqxx::work& tx, chat_id chat, reservation_id id) {
  tx.exec_params("INSERT INTO released_reservations (id, chat_id, reason) "
                 "VALUES ($1, $2, 'sweep_timeout')",
                 id, chat);
}

} // namespace

TEST_SUITE("events") {

  TEST_CASE_FIXTURE(events_fixture,
                    "a release, an uncertain job, its release at "
                    "reconcile-timeout and a cancel request each write one "
                    "event with the next id, in the same transaction") {
    auto chat = make_chat();
    auto before = newest();
    // A release past the lease.
    auto r = started(chat);
    test::sql("UPDATE reservations SET lease_expires_at = now() - interval "
              "'1 second'"
              + of(r.id));
    auto released = db.release(chat, r.id);
    REQUIRE(released);
    // A job of unknown outcome, then released unresolved.
    auto u = started(chat);
    REQUIRE(db.uncertain(chat, u.id, "prov-42"));
    test::sql("UPDATE uncertain_reservations SET uncertain_at = now() - "
              "interval '2 days'"
              + of(u.id));
    auto unresolved = db.release(chat, u.id);
    REQUIRE(unresolved);
    CHECK(unresolved->reason == "unresolved");
    // A started job cancelled under the `request` policy: one event, and
    // none for the repeated cancel.
    auto c = started(chat);
    auto marked = db.cancel(chat, c.id, "");
    REQUIRE(marked);
    CHECK(marked->cancel_requested);
    REQUIRE(db.cancel(chat, c.id, ""));

    auto events = after(before);
    std::vector<std::string> mine;
    for (const auto& e : events)
      if (e.chat == chat)
        mine.push_back(e.event + " " + std::to_string(e.reservation) + " "
                       + e.detail);
    CHECK(mine
          == std::vector<std::string>{
            "reservation_released " + std::to_string(r.id) + " lease_expired",
            "reconcile_needed " + std::to_string(u.id) + " prov-42",
            "reservation_released " + std::to_string(u.id) + " unresolved",
            "cancel_requested " + std::to_string(c.id) + " "});
    // Ids have no gaps and end at the clock.
    for (size_t i = 1; i < events.size(); ++i)
      CHECK(events[i].id == events[i - 1].id + 1);
    CHECK(newest() >= events.back().id);
  }

  TEST_CASE_FIXTURE(events_fixture,
                    "a reactivation page writes one limits_refilled per "
                    "chat it refilled, numbered in one step") {
    constexpr int64_t n = 30;
    auto base = test::fresh_chat_block(n);
    test::sql("INSERT INTO chats (chat_id, started, last_activity_at) "
              "SELECT g, true, now() - interval '48 hours' FROM "
              "generate_series("
              + std::to_string(base) + ", " + std::to_string(base + n - 1)
              + ") g");
    auto before = newest();
    reactivation_cursor cursor;
    for (;;) {
      auto page = db.reactivation_chunk(cursor, 1000);
      REQUIRE(page);
      if (!page->more)
        break;
      cursor = page->next;
    }
    std::set<chat_id> refilled;
    for (const auto& e : after(before))
      if (e.chat >= base && e.chat < base + n) {
        CHECK(e.event == "limits_refilled");
        CHECK(e.reservation == 0);
        refilled.insert(e.chat);
      }
    CHECK(refilled.size() == static_cast<size_t>(n));
    CHECK(test::sql_int("SELECT count(*) FROM events WHERE chat_id BETWEEN "
                        + std::to_string(base) + " AND "
                        + std::to_string(base + n - 1))
          == n);
  }

  TEST_CASE_FIXTURE(events_fixture,
                    "a rolled-back change writes no event and takes no id") {
    auto chat = make_chat();
    auto before = newest();
    {
      auto conn = connect();
      pqxx::work tx{conn};
      released_row(tx, chat, 900'000'000'000 + chat % 1'000'000);
      tx.abort();
    }
    CHECK(newest() == before);
    CHECK(after(before).empty());
  }

  TEST_CASE_FIXTURE(events_fixture,
                    "ids follow commit order: a transaction that wrote first "
                    "but commits last gets the larger id, so a reader that "
                    "saw the other's id still finds it after") {
    auto chat = make_chat();
    auto base = 910'000'000'000 + (chat % 1'000'000) * 2;
    auto before = newest();
    auto first = connect();
    auto second = connect();
    pqxx::work early{first};
    released_row(early, chat, base);
    {
      pqxx::work late{second};
      released_row(late, chat, base + 1);
      late.commit();
    }
    // A reader now sees the later writer's event and moves its cursor.
    auto seen = after(before);
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].reservation == base + 1);
    early.commit();
    // What the early writer announced is after that cursor, not below it.
    auto next = after(seen[0].id);
    REQUIRE(next.size() == 1);
    CHECK(next[0].reservation == base);
    test::sql("DELETE FROM released_reservations WHERE id IN ("
              + std::to_string(base) + ", " + std::to_string(base + 1) + ")");
  }

  TEST_CASE_FIXTURE(events_fixture,
                    "16 connections announcing at once, a reader following "
                    "its last id: it reads every event once, in order") {
    constexpr int writers = 16;
    constexpr int per_writer = 100;
    auto chat = make_chat();
    auto base = 920'000'000'000 + (chat % 1'000'000) * writers * per_writer;
    auto before = newest();
    std::atomic<int> done{0};
    std::vector<std::thread> threads;
    for (int w = 0; w < writers; ++w)
      threads.emplace_back([&, w] {
        auto conn = connect();
        for (int i = 0; i < per_writer; ++i) {
          pqxx::work tx{conn};
          released_row(tx, chat, base + w * per_writer + i);
          // Held open a little, so that transactions overlap and commit in
          // another order than they wrote.
          if (i % 7 == 0)
            std::this_thread::sleep_for(1ms);
          tx.commit();
        }
        ++done;
      });
    std::vector<reservation_id> read;
    event_id cursor = before;
    auto follow = [&] {
      auto page = db.events_after(cursor, 50);
      REQUIRE(page);
      const auto count = page->events.size();
      for (const auto& e : page->events) {
        CHECK(e.id == cursor + 1); // no gap, no step back
        cursor = e.id;
        if (e.chat == chat)
          read.push_back(e.reservation);
      }
      return count;
    };
    while (done < writers)
      follow();
    for (auto& t : threads)
      t.join();
    // The reader may trail the writers by many pages: it reads until a page
    // comes back empty, as a resuming subscriber would.
    for (int pages = 0; follow() > 0 && pages < 1000; ++pages) {
    }
    std::set<reservation_id> unique(read.begin(), read.end());
    CHECK(read.size() == static_cast<size_t>(writers * per_writer));
    CHECK(unique.size() == read.size());
    test::sql("DELETE FROM released_reservations WHERE id BETWEEN "
              + std::to_string(base) + " AND "
              + std::to_string(base + writers * per_writer));
  }

  TEST_CASE_FIXTURE(events_fixture,
                    "the server's balance-low-threshold reaches the SQL, alone "
                    "and batched: balance_low with the available balance, the "
                    "threshold and the reservation; a chat's own 0 is off") {
    auto opts = options();
    opts.balance_low_threshold = 3;
    // A server of its own; the fixture's store reads the events.
    store low_db{opts};
    auto base = test::fresh_chat_block(4);
    // Three credits each, no daily images: an image job holds 1 of the
    // balance, 3 available fall to 2.
    for (chat_id c = base; c < base + 4; ++c)
      REQUIRE(low_db.create_chat({c, pockets{0, 0, 3}, caf::none, caf::none}));
    limits_update off;
    off.set_max_active_jobs = false;
    off.set_balance_low_threshold = true;
    off.balance_low_threshold = 0;
    auto own_off = low_db.set_limits(base + 3, off);
    REQUIRE(own_off);
    CHECK(own_off->balance_low_threshold == 0);
    CHECK(own_off->own_balance_low_threshold == caf::optional<int32_t>{0});
    CHECK(own_off->max_active_jobs == 1); // left as it was
    auto shown = low_db.status(base);
    REQUIRE(shown);
    CHECK(shown->balance_low_threshold == 3);
    CHECK_FALSE(shown->own_balance_low_threshold);
    limits_update negative = off;
    negative.balance_low_threshold = -1;
    auto refused = low_db.set_limits(base, negative);
    REQUIRE_FALSE(refused);
    CHECK(refused.error() == ec::invalid_argument);
    auto before = newest();
    // base alone (chargeonce_apply_one); the others in one batch, each of
    // another chat (the set-based statement).
    auto alone = low_db.reserve(base, kind::image, "", 0);
    REQUIRE(alone);
    auto batched = low_db.apply(
      {operation{operation_type::reserve, base + 1, 0, kind::image, ""},
       operation{operation_type::reserve, base + 2, 0, kind::image, ""},
       operation{operation_type::reserve, base + 3, 0, kind::image, ""}});
    std::map<chat_id, reservation_id> held{{base, alone->id}};
    for (size_t i = 0; i < batched.size(); ++i) {
      auto r = std::get_if<reservation>(&batched[i]);
      REQUIRE(r != nullptr);
      held[base + 1 + static_cast<chat_id>(i)] = r->id;
    }
    std::map<chat_id, event_record> low;
    for (const auto& e : after(before))
      if (e.event == "balance_low" && e.chat >= base && e.chat < base + 4) {
        CHECK(low.count(e.chat) == 0);
        low[e.chat] = e;
      }
    REQUIRE(low.size() == 3);
    CHECK(low.count(base + 3) == 0);
    for (const auto& [chat, e] : low) {
      CAPTURE(chat);
      CHECK(e.credits == 2);
      CHECK(e.threshold == 3);
      CHECK(e.detail == "reserve");
      CHECK(e.reservation == held[chat]);
    }
  }

  TEST_CASE_FIXTURE(events_fixture,
                    "a top-up whose grant expires inside expiry-notice "
                    "writes credits_expiring in its own transaction, with "
                    "the grant, its credits and its expiry") {
    auto chat = make_chat();
    auto before = newest();
    grant_terms soon;
    soon.expires_in_ms = 3'600'000; // the notice is 24 h
    auto told = db.top_up(chat, 6, "notice-" + std::to_string(chat), soon);
    REQUIRE(told);
    grant_terms later;
    later.expires_in_ms = 48 * 3'600'000;
    REQUIRE(db.top_up(chat, 2, "later-" + std::to_string(chat), later));
    std::vector<event_record> mine;
    for (const auto& e : after(before))
      if (e.chat == chat)
        mine.push_back(e);
    REQUIRE(mine.size() == 1);
    CHECK(mine[0].event == "credits_expiring");
    CHECK(mine[0].grant == told->grant_id);
    CHECK(mine[0].credits == 6);
    REQUIRE(mine[0].expires_at);
    CHECK(mine[0].expires_at == told->expires_at);
  }

  TEST_CASE("events older than event-retention are pruned, newer ones kept") {
    auto opts = options();
    opts.event_retention = 1h;
    store db{opts};
    auto chat = test::fresh_chat();
    REQUIRE(db.create_chat({chat, pockets{5, 5, 5}, caf::none, caf::none}));
    auto base = 930'000'000'000 + (chat % 1'000'000) * 2;
    {
      auto conn = connect();
      pqxx::work tx{conn};
      released_row(tx, chat, base);
      released_row(tx, chat, base + 1);
      tx.commit();
    }
    // Two hours pass for the first event and every one written before it
    // (pruning walks the events in write order, oldest first).
    test::sql("UPDATE events SET at = now() - interval '2 hours' WHERE seq <= "
              "(SELECT seq FROM events WHERE reservation_id = "
              + std::to_string(base) + ")");
    REQUIRE(db.prune());
    CHECK(test::sql_int("SELECT count(*) FROM events WHERE reservation_id = "
                        + std::to_string(base))
          == 0);
    CHECK(test::sql_int("SELECT count(*) FROM events WHERE reservation_id = "
                        + std::to_string(base + 1))
          == 1);
    test::sql("DELETE FROM released_reservations WHERE id IN ("
              + std::to_string(base) + ", " + std::to_string(base + 1) + ")");
  }

} // TEST_SUITE
