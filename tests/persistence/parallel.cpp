// SPDX-License-Identifier: Apache-2.0
// Parallel jobs per chat, against real Postgres (the server-side
// functions): at most N active jobs (the slot index),
// holds counted in every decision (nothing spent twice), one request id per
// job for its whole life, cancel naming its job, and status showing all of
// it. Races run on real threads, each with its own connection.
#include "persistence/store.hpp"
#include "protocol/errors.hpp"
#include "protocol/pockets.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>

#include <future>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

using namespace chargeonce;
using persistence::store;

namespace {

chat_id make_chat(store& db, pockets initial,
                  caf::optional<int32_t> limit = caf::none) {
  auto chat = test::fresh_chat();
  REQUIRE(db.create_chat(chat_spec{chat, initial, caf::none, limit}));
  return chat;
}

long long active_of(chat_id chat) {
  return test::sql_int("SELECT count(*) FROM reservations WHERE chat_id = "
                       + std::to_string(chat));
}

/// `n` stores, each with its own connection, opened before the race.
std::vector<std::unique_ptr<store>> connections(size_t n) {
  std::vector<std::unique_ptr<store>> out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back(std::make_unique<store>(test::store_options()));
    REQUIRE(out.back()->connect_backend() > 0);
  }
  return out;
}

/// Runs reserve(chat, image, request_id(i)) on `conns` at once; returns
/// the answers.
template <class RequestId>
std::vector<caf::expected<reservation>>
race_reserves(std::vector<std::unique_ptr<store>>& conns, chat_id chat,
              RequestId request_id) {
  std::promise<void> go;
  auto start = go.get_future().share();
  std::vector<std::future<caf::expected<reservation>>> answers;
  for (size_t i = 0; i < conns.size(); ++i)
    answers.push_back(std::async(std::launch::async, [&, i] {
      start.wait();
      return conns[i]->reserve(chat, kind::image, request_id(i));
    }));
  go.set_value();
  std::vector<caf::expected<reservation>> out;
  for (auto& a : answers)
    out.push_back(a.get());
  return out;
}

} // namespace

TEST_SUITE("parallel") {
  TEST_CASE("a chat runs at most its limit of jobs: the next one is busy, "
            "with the count in the message") {
    store db{test::store_options()};
    auto chat = make_chat(db, {0, 0, 10}, 2);
    auto a = db.reserve(chat, kind::image, "a");
    auto b = db.reserve(chat, kind::image, "b");
    REQUIRE(a);
    REQUIRE(b);
    CHECK(a->slot != b->slot);
    auto c = db.reserve(chat, kind::image, "c");
    REQUIRE_FALSE(c);
    CHECK(c.error() == ec::busy);
    CHECK(error_message(c.error())
          == "chat " + std::to_string(chat) + " has 2 of 2 jobs active");
    // A job that ends frees its slot for the next.
    REQUIRE(db.fail(chat, a->id));
    auto d = db.reserve(chat, kind::image, "d");
    REQUIRE(d);
    CHECK(d->slot == a->slot);
    CHECK(active_of(chat) == 2);
  }

  TEST_CASE("with the default limit of 1 a second job is busy, as before, "
            "with or without a request id") {
    store db{test::store_options()};
    auto chat = make_chat(db, {1, 1, 1});
    REQUIRE(db.reserve(chat, kind::image, ""));
    auto again = db.reserve(chat, kind::image, "");
    REQUIRE_FALSE(again);
    CHECK(again.error() == ec::busy);
    CHECK(error_message(again.error())
          == "chat " + std::to_string(chat) + " has 1 of 1 jobs active");
    CHECK(db.reserve(chat, kind::text, "other").error() == ec::busy);
  }

  TEST_CASE("the plans' default limits apply to chats without their own; a "
            "chat's own limit wins") {
    auto opts = test::store_options();
    opts.free_max_active_jobs = 2;
    opts.premium_max_active_jobs = 3;
    store db{opts};
    auto free_chat = make_chat(db, {0, 0, 10});
    auto premium_chat = make_chat(db, {0, 0, 10});
    REQUIRE(db.set_premium(premium_chat,
                           caf::make_timestamp() + std::chrono::hours{1}));
    auto own = make_chat(db, {0, 0, 10}, 1);
    CHECK(db.status(free_chat)->max_active_jobs == 2);
    CHECK(db.status(premium_chat)->max_active_jobs == 3);
    CHECK(db.status(own)->max_active_jobs == 1);
    for (int i = 0; i < 2; ++i)
      REQUIRE(db.reserve(free_chat, kind::image, "f" + std::to_string(i)));
    CHECK(db.reserve(free_chat, kind::image, "f2").error() == ec::busy);
    for (int i = 0; i < 3; ++i)
      REQUIRE(db.reserve(premium_chat, kind::image, "p" + std::to_string(i)));
    CHECK(db.reserve(premium_chat, kind::image, "p3").error() == ec::busy);
    REQUIRE(db.reserve(own, kind::image, ""));
    CHECK(db.reserve(own, kind::image, "o1").error() == ec::busy);
  }

  TEST_CASE("a chat whose limit is above 1 must name every job with a "
            "request id") {
    store db{test::store_options()};
    auto chat = make_chat(db, {0, 0, 10}, 2);
    auto bare = db.reserve(chat, kind::image, "");
    REQUIRE_FALSE(bare);
    CHECK(bare.error() == ec::invalid_argument);
    CHECK(active_of(chat) == 0);
  }

  TEST_CASE("the refusal order of 0.1.0, limit 1: pockets that cannot pay "
            "answer insufficient_* even while a job is active; pockets that "
            "can answer busy") {
    store db{test::store_options()};
    auto chat = make_chat(db, {0, 1, 0});
    REQUIRE(db.reserve(chat, kind::image, ""));
    // No daily message at all: 0.1.0 answered 402 here, not 409.
    CHECK(db.reserve(chat, kind::text, "").error()
          == ec::insufficient_messages);
    // The image it holds is still there: only the slot is missing.
    CHECK(db.reserve(chat, kind::image, "").error() == ec::busy);
  }

  TEST_CASE("the refusal order, limit 2: what the pockets cannot pay with "
            "nothing held is insufficient_*; else no free slot is busy; "
            "else holds that leave a pocket short are insufficient_*") {
    store db{test::store_options()};
    auto short_by_holds = make_chat(db, {1, 0, 0}, 2);
    REQUIRE(db.reserve(short_by_holds, kind::text, "one"));
    CHECK(db.reserve(short_by_holds, kind::text, "two").error()
          == ec::insufficient_messages);
    auto full = make_chat(db, {2, 0, 0}, 2);
    REQUIRE(db.reserve(full, kind::text, "one"));
    REQUIRE(db.reserve(full, kind::text, "two"));
    CHECK(db.reserve(full, kind::text, "three").error() == ec::busy);
    CHECK(db.reserve(full, kind::image, "four").error()
          == ec::insufficient_images);
  }

  TEST_CASE("an auto: request id replays like any other, but where the "
            "limit is above 1 it counts as none") {
    store db{test::store_options()};
    auto two = make_chat(db, {5, 0, 0}, 2);
    auto refused = db.reserve(two, kind::text, "auto:0123");
    REQUIRE_FALSE(refused);
    CHECK(refused.error() == ec::invalid_argument);
    CHECK(error_message(refused.error()).find("not an auto: one")
          != std::string::npos);
    CHECK(active_of(two) == 0);
    auto one = make_chat(db, {5, 0, 0});
    auto first = db.reserve(one, kind::text, "auto:0123");
    REQUIRE(first);
    auto replay = db.reserve(one, kind::text, "auto:0123");
    REQUIRE(replay);
    CHECK(replay->id == first->id);
    CHECK(db.reserve(one, kind::text, "auto:4567").error() == ec::busy);
    CHECK(active_of(one) == 1);
  }

  TEST_CASE("holds count in every balance: one daily image, no credits and "
            "two slots hold the image once") {
    store db{test::store_options()};
    auto chat = make_chat(db, {0, 1, 0}, 2);
    auto first = db.reserve(chat, kind::image, "one");
    REQUIRE(first);
    CHECK(first->held == pockets{0, 1, 0});
    auto second = db.reserve(chat, kind::image, "two");
    REQUIRE_FALSE(second);
    CHECK(second.error() == ec::insufficient_images);
  }

  TEST_CASE("what expires is spent first, then balance; text never falls "
            "back to balance") {
    store db{test::store_options()};
    auto chat = make_chat(db, {1, 1, 1}, 4);
    auto image1 = db.reserve(chat, kind::image, "i1");
    auto image2 = db.reserve(chat, kind::image, "i2");
    REQUIRE(image1);
    REQUIRE(image2);
    CHECK(image1->held == pockets{0, 1, 0});
    CHECK(image2->held == pockets{0, 0, 1});
    CHECK(db.reserve(chat, kind::image, "i3").error()
          == ec::insufficient_images);
    auto text1 = db.reserve(chat, kind::text, "t1");
    REQUIRE(text1);
    CHECK(text1->held == pockets{1, 0, 0});
    CHECK(db.reserve(chat, kind::text, "t2").error()
          == ec::insufficient_messages);
  }

  TEST_CASE("status shows the limit, every active job oldest first, their "
            "holds and what is left; `active` stays the oldest") {
    store db{test::store_options()};
    auto chat = make_chat(db, {2, 1, 5}, 3);
    auto a = db.reserve(chat, kind::image, "a");
    auto b = db.reserve(chat, kind::image, "b");
    auto c = db.reserve(chat, kind::text, "c");
    REQUIRE(a);
    REQUIRE(b);
    REQUIRE(c);
    auto st = db.status(chat);
    REQUIRE(st);
    CHECK(st->max_active_jobs == 3);
    CHECK(st->own_max_active_jobs == caf::optional<int32_t>{3});
    REQUIRE(st->reservations.size() == 3);
    CHECK(st->reservations[0].id == a->id);
    CHECK(st->reservations[1].id == b->id);
    CHECK(st->reservations[2].id == c->id);
    REQUIRE(st->active);
    CHECK(st->active->id == a->id);
    CHECK(st->amounts == pockets{2, 1, 5});
    CHECK(st->held == pockets{1, 1, 1});
    CHECK(spendable(*st) == pockets{1, 0, 4});
  }

  TEST_CASE("commit takes exactly its own hold; the others stay held") {
    store db{test::store_options()};
    auto chat = make_chat(db, {0, 1, 3}, 2);
    auto a = db.reserve(chat, kind::image, "a");
    auto b = db.reserve(chat, kind::image, "b");
    REQUIRE(a);
    REQUIRE(b);
    REQUIRE(db.start(chat, b->id));
    auto receipt = db.commit(chat, b->id);
    REQUIRE(receipt);
    CHECK(receipt->charged == pockets{0, 0, 1});
    auto st = db.status(chat);
    CHECK(st->amounts == pockets{0, 1, 2});
    CHECK(st->held == pockets{0, 1, 0});
    REQUIRE(st->reservations.size() == 1);
    CHECK(st->reservations[0].id == a->id);
  }

  TEST_CASE("a lowered limit lets the running jobs finish and refuses new "
            "ones until the count is below it") {
    store db{test::store_options()};
    auto chat = make_chat(db, {0, 0, 10}, 3);
    std::vector<reservation> jobs;
    for (int i = 0; i < 3; ++i)
      jobs.push_back(
        db.reserve(chat, kind::image, "j" + std::to_string(i)).value());
    REQUIRE(db.set_limits(chat, 2));
    CHECK(db.status(chat)->reservations.size() == 3);
    CHECK(db.reserve(chat, kind::image, "j3").error() == ec::busy);
    REQUIRE(db.fail(chat, jobs[0].id));
    CHECK(db.reserve(chat, kind::image, "j4").error() == ec::busy);
    REQUIRE(db.fail(chat, jobs[1].id));
    auto next = db.reserve(chat, kind::image, "j5");
    REQUIRE(next);
    CHECK(next->slot < 2);
    // Back to the plan's default (1): the one job left keeps running, and
    // a chat at its limit of 1 may reserve without a request id again.
    auto st = db.set_limits(chat, caf::none);
    REQUIRE(st);
    CHECK_FALSE(st->own_max_active_jobs);
    CHECK(st->max_active_jobs == 1);
    CHECK(db.reserve(chat, kind::image, "").error() == ec::busy);
  }

  TEST_CASE("a limit outside 1..64 and a limit for an unknown chat are "
            "refused and change nothing") {
    store db{test::store_options()};
    auto chat = make_chat(db, {0, 0, 1});
    CHECK(db.set_limits(chat, 0).error() == ec::invalid_argument);
    CHECK(db.set_limits(chat, 65).error() == ec::invalid_argument);
    CHECK(db.set_limits(test::fresh_chat(), 2).error() == ec::not_found);
    CHECK(db.status(chat)->max_active_jobs == 1);
    CHECK(
      db.create_chat(chat_spec{test::fresh_chat(), {}, caf::none, -1}).error()
      == ec::invalid_argument);
  }

  TEST_CASE("a request id names one job for its whole life: after commit, "
            "fail, cancel or release a retry returns the ended job") {
    store db{test::store_options()};
    auto chat = make_chat(db, {0, 0, 10}, 2);
    auto committed = db.reserve(chat, kind::image, "c").value();
    REQUIRE(db.start(chat, committed.id));
    REQUIRE(db.commit(chat, committed.id));
    auto failed = db.reserve(chat, kind::image, "f").value();
    REQUIRE(db.fail(chat, failed.id));
    auto cancelled = db.reserve(chat, kind::image, "x").value();
    REQUIRE(db.cancel(chat, cancelled.id, ""));
    // Past its deadline, then released by the sweeper.
    auto released = db.reserve(chat, kind::image, "r").value();
    test::sql("UPDATE reservations SET created_at = now() - interval "
              "'1 day' WHERE id = "
              + std::to_string(released.id));
    REQUIRE(db.release(chat, released.id));
    struct expect {
      const char* request_id;
      reservation_id id;
      reservation_status status;
    };
    for (auto [request_id, id, status] :
         {expect{"c", committed.id, reservation_status::committed},
          expect{"f", failed.id, reservation_status::failed},
          expect{"x", cancelled.id, reservation_status::cancelled},
          expect{"r", released.id, reservation_status::released}}) {
      INFO(request_id);
      auto again = db.reserve(chat, kind::image, request_id);
      REQUIRE(again);
      CHECK(again->id == id);
      CHECK(again->status == status);
      CHECK(again->ended_at);
      CHECK(db.reserve(chat, kind::text, request_id).error()
            == ec::invalid_argument);
    }
    CHECK(active_of(chat) == 0);
    CHECK(test::sql_int(
            "SELECT count(*) FROM ledger WHERE entry = 'charge' AND chat_id = "
            + std::to_string(chat))
          == 1);
    // A worker handed the ended job anyway drops it: start refuses.
    CHECK(db.start(chat, failed.id).error() == ec::not_found);
    CHECK(db.start(chat, committed.id).error() == ec::invalid_state);
  }

  TEST_CASE("a job without a request id is not remembered after it ended") {
    store db{test::store_options()};
    auto chat = make_chat(db, {0, 0, 10});
    auto job = db.reserve(chat, kind::image, "").value();
    REQUIRE(db.fail(chat, job.id));
    CHECK(test::sql_int("SELECT count(*) FROM ended_reservations WHERE "
                        "chat_id = "
                        + std::to_string(chat))
          == 0);
  }

  TEST_CASE("ended jobs are forgotten after request-retention; then the "
            "request id is new") {
    auto opts = test::store_options();
    opts.request_retention = std::chrono::milliseconds{60000};
    store db{opts};
    auto chat = make_chat(db, {0, 0, 10});
    auto job = db.reserve(chat, kind::image, "old").value();
    REQUIRE(db.fail(chat, job.id));
    test::sql("UPDATE ended_reservations SET ended_at = now() - interval "
              "'2 minutes' WHERE id = "
              + std::to_string(job.id));
    REQUIRE(db.prune());
    auto fresh = db.reserve(chat, kind::image, "old");
    REQUIRE(fresh);
    CHECK(fresh->id != job.id);
    CHECK(fresh->status == reservation_status::queued);
  }

  TEST_CASE("cancel names its job by reservation or request id; bare, it "
            "works while exactly one job is active") {
    store db{test::store_options()};
    auto chat = make_chat(db, {0, 0, 10}, 3);
    auto a = db.reserve(chat, kind::image, "a").value();
    auto only = db.cancel(chat);
    REQUIRE(only);
    CHECK(only->id == a.id);
    auto b = db.reserve(chat, kind::image, "b").value();
    auto c = db.reserve(chat, kind::image, "c").value();
    auto bare = db.cancel(chat);
    REQUIRE_FALSE(bare);
    CHECK(bare.error() == ec::invalid_argument);
    CHECK(error_message(bare.error())
            .find(std::to_string(b.id) + ", " + std::to_string(c.id))
          != std::string::npos);
    CHECK(db.cancel(chat, c.id, "")->id == c.id);
    REQUIRE(db.start(chat, b.id));
    CHECK(db.cancel(chat, 0, "b").error() == ec::too_late);
    CHECK(db.cancel(chat, 0, "nobody").error() == ec::not_found);
    CHECK(db.cancel(chat, b.id, "b").error() == ec::invalid_argument);
    CHECK(active_of(chat) == 1);
  }

  TEST_CASE("64 concurrent reserves of one chat with limit 3 and distinct "
            "request ids: exactly 3 reservations, 61 busy, never 4") {
    auto conns = connections(64);
    for (int run = 0; run < 5; ++run) {
      CAPTURE(run);
      auto chat = make_chat(*conns[0], {0, 0, 1000}, 3);
      auto answers = race_reserves(conns, chat, [run](size_t i) {
        return "r" + std::to_string(run) + "-" + std::to_string(i);
      });
      int ok = 0;
      int busy = 0;
      std::set<int32_t> slots;
      for (const auto& a : answers) {
        if (a) {
          ++ok;
          slots.insert(a->slot);
        } else if (a.error() == ec::busy) {
          ++busy;
        } else {
          FAIL_CHECK("unexpected ", error_name(a.error()), ": ",
                     error_message(a.error()));
        }
      }
      CHECK(ok == 3);
      CHECK(busy == 61);
      CHECK(slots == std::set<int32_t>{0, 1, 2});
      CHECK(active_of(chat) == 3);
    }
  }

  TEST_CASE("64 concurrent reserves of one chat with three grants: the "
            "holds take the grants in spending order (priority, then the "
            "soonest expiry), none held beyond what it has, and the commits "
            "charge each grant exactly what its holds held") {
    auto conns = connections(64);
    for (int run = 0; run < 3; ++run) {
      CAPTURE(run);
      auto chat = make_chat(*conns[0], {0, 0, 0}, 64);
      auto grant = [&](int credits, int priority, int expires_in_min) {
        grant_terms t;
        t.priority = priority;
        if (expires_in_min > 0)
          t.expires_in_ms = int64_t{expires_in_min} * 60 * 1000;
        auto x = conns[0]->top_up(
          chat, credits,
          "race-" + std::to_string(chat) + "-" + std::to_string(credits), t);
        REQUIRE(x);
        return x->grant_id;
      };
      // Created in the reverse of their spending order.
      auto later = grant(10, 100, 120);
      auto sooner = grant(8, 100, 60);
      auto first = grant(6, 20, 0);
      const std::vector<std::pair<int64_t, int>> order{
        {first, 6}, {sooner, 8}, {later, 10}};
      auto answers = race_reserves(conns, chat, [run](size_t i) {
        return "g" + std::to_string(run) + "-" + std::to_string(i);
      });
      int ok = 0;
      int price = 0;
      for (const auto& a : answers) {
        if (a) {
          ++ok;
          price = a->held.get(pocket::balance);
        } else {
          CHECK(a.error() == ec::insufficient_images);
        }
      }
      REQUIRE(price > 0);
      CHECK(ok == 24 / price);
      // The reservations in the order they were decided (ids are taken
      // under the chat's lock), each hold's grants laid end to end, one
      // entry per credit: the first grant's credits, then the second's,
      // then the third's.
      auto holds = test::sql(
        "SELECT string_agg(array_to_string(ARRAY(SELECT g::text FROM "
        "unnest(held_grants, held_grant_credits) u(g, n), "
        "generate_series(1, n)), ','), ',' ORDER BY id) FROM reservations "
        "WHERE chat_id = "
        + std::to_string(chat));
      std::string expected;
      std::map<int64_t, int> held;
      int unspent = ok * price;
      for (auto [id, credits] : order)
        for (int i = 0; i < credits && unspent > 0; ++i, --unspent) {
          expected += (expected.empty() ? "" : ",") + std::to_string(id);
          ++held[id];
        }
      CHECK(holds == expected);
      // Every job commits: each grant is charged exactly what its holds
      // held, never beyond its credits.
      for (const auto& a : answers)
        if (a) {
          REQUIRE(conns[0]->start(chat, a->id));
          REQUIRE(conns[0]->commit(chat, a->id));
        }
      for (auto [id, credits] : order) {
        auto charged = test::sql_int(
          "SELECT charged FROM grants WHERE grant_id = " + std::to_string(id));
        CHECK(charged == held[id]);
        CHECK(charged <= credits);
      }
      CHECK(conns[0]->status(chat)->amounts.get(pocket::balance)
            == 24 - ok * price);
    }
  }

  TEST_CASE("a job delivered twice runs once: 16 connections start one "
            "reservation, each naming its own worker; exactly one proceeds, "
            "the others are already_started") {
    store db{test::store_options()};
    auto conns = connections(16);
    for (int round = 0; round < 5; ++round) {
      auto chat = make_chat(db, {0, 1, 0});
      auto r = db.reserve(chat, kind::image, "job");
      REQUIRE(r);
      std::promise<void> go;
      auto start = go.get_future().share();
      std::vector<std::future<caf::expected<reservation>>> answers;
      for (size_t i = 0; i < conns.size(); ++i)
        answers.push_back(std::async(std::launch::async, [&, i] {
          start.wait();
          return conns[i]->start(chat, r->id, "worker-" + std::to_string(i));
        }));
      go.set_value();
      int proceeded = 0;
      int refused = 0;
      size_t winner = 0;
      for (size_t i = 0; i < answers.size(); ++i) {
        auto x = answers[i].get();
        if (x) {
          ++proceeded;
          winner = i;
        } else if (x.error() == ec::already_started) {
          ++refused;
          CHECK(error_message(x.error()).find("worker-")
                == std::string::npos); // nothing of the other worker
        }
      }
      CHECK(proceeded == 1);
      CHECK(refused == 15);
      auto mine = "worker-" + std::to_string(winner);
      auto other = "worker-" + std::to_string((winner + 1) % 16);
      // Its own retry goes on; a start naming none, as before.
      CHECK(db.start(chat, r->id, mine));
      CHECK(db.start(chat, r->id));
      // The other worker may not heartbeat, fail, commit or give up.
      CHECK(db.heartbeat(chat, r->id, other).error() == ec::already_started);
      CHECK(db.fail(chat, r->id, other).error() == ec::already_started);
      CHECK(db.commit(chat, r->id, 0, other).error() == ec::already_started);
      CHECK(db.uncertain(chat, r->id, "p", other).error()
            == ec::already_started);
      CHECK(active_of(chat) == 1);
      REQUIRE(db.heartbeat(chat, r->id, mine));
      auto paid = db.commit(chat, r->id, 0, mine);
      REQUIRE(paid);
      CHECK(paid->charged == pockets{0, 1, 0});
      // A retried commit of the other worker finds the receipt: nothing
      // more is charged, and the job is not running any more.
      auto again = db.commit(chat, r->id, 0, other);
      REQUIRE(again);
      CHECK(again->charged == pockets{0, 1, 0});
      CHECK(db.status(chat)->amounts == pockets{0, 0, 0});
    }
  }

  TEST_CASE("a worker's identity is checked only once the job runs: a "
            "queued job is failed by anyone, a job started without one "
            "refuses a named worker") {
    store db{test::store_options()};
    auto chat = make_chat(db, {0, 2, 0}, 2);
    auto queued = db.reserve(chat, kind::image, "a");
    REQUIRE(queued);
    CHECK(db.fail(chat, queued->id, "anyone"));
    auto anonymous = db.reserve(chat, kind::image, "b");
    REQUIRE(anonymous);
    REQUIRE(db.start(chat, anonymous->id));
    CHECK(db.start(chat, anonymous->id, "named").error()
          == ec::already_started);
    CHECK(db.commit(chat, anonymous->id));
    auto long_name = std::string(257, 'w');
    CHECK(db.start(chat, 1, long_name).error() == ec::invalid_argument);
  }

  TEST_CASE("64 concurrent reserves of one request id: one reservation, "
            "every answer carries it") {
    auto conns = connections(64);
    for (int run = 0; run < 5; ++run) {
      CAPTURE(run);
      auto chat = make_chat(*conns[0], {0, 0, 1000}, 3);
      auto answers =
        race_reserves(conns, chat, [](size_t) { return std::string{"tap"}; });
      std::set<reservation_id> ids;
      for (const auto& a : answers) {
        REQUIRE_MESSAGE(a, error_name(a.error()));
        ids.insert(a->id);
      }
      CHECK(ids.size() == 1);
      CHECK(active_of(chat) == 1);
    }
  }
}
