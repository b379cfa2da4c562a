// SPDX-License-Identifier: Apache-2.0
// The bench's per-operation baseline gives the store's answers: the same
// pockets, refusals, busy decision and idempotent commit, against a real
// Postgres; and its one-statement commit never deadlocks with a reserve of
// the same chat.
#include "tools/bench/baseline.hpp"

#include "persistence/store.hpp"
#include "protocol/errors.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>
#include <pqxx/pqxx>

#include <atomic>
#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace chargeonce;
using bench::baseline_store;
using persistence::store;
using namespace std::chrono_literals;

namespace {

/// What a chat looks like before a reserve: its pockets and flags.
struct chat_shape {
  pockets initial;
  bool premium = false;
  bool blocked = false;
  bool banned = false;
};

chat_id make_chat(store& db, const chat_shape& shape) {
  auto chat = test::fresh_chat();
  caf::optional<caf::timestamp> premium;
  if (shape.premium)
    premium =
      caf::timestamp{std::chrono::system_clock::now() + std::chrono::hours(1)};
  REQUIRE(db.create_chat(chat_spec{chat, shape.initial, premium, caf::none}));
  if (shape.blocked || shape.banned) {
    flags_update flags;
    flags.blocked = shape.blocked;
    flags.banned = shape.banned;
    REQUIRE(db.set_flags(chat, flags));
  }
  return chat;
}

/// The server's store: the answers the baseline must give.
store make_store() {
  return store{test::store_options()};
}

/// Every kind, plan, pocket state (each pocket empty or not) and flag.
std::vector<std::pair<kind, chat_shape>> all_cases() {
  std::vector<std::pair<kind, chat_shape>> out;
  for (auto k : {kind::text, kind::image})
    for (bool premium : {false, true})
      for (int bits = 0; bits < 8; ++bits)
        for (int flag = 0; flag < 3; ++flag) {
          chat_shape s;
          s.initial = {bits & 1, (bits >> 1) & 1, (bits >> 2) & 1};
          s.premium = premium;
          s.blocked = flag == 1;
          s.banned = flag == 2;
          out.emplace_back(k, s);
        }
  return out;
}

std::string describe(kind k, const chat_shape& s) {
  return std::string{to_string(k)} + " premium=" + std::to_string(s.premium)
         + " pockets=" + std::to_string(s.initial.get(pocket::daily_messages))
         + "/" + std::to_string(s.initial.get(pocket::daily_images)) + "/"
         + std::to_string(s.initial.get(pocket::balance)) + " blocked="
         + std::to_string(s.blocked) + " banned=" + std::to_string(s.banned);
}

template <class T>
ec code_of(const caf::expected<T>& x) {
  return x ? ec::none : static_cast<ec>(x.error().code());
}

/// An SQL condition on pg_stat_activity: the backend waits for `pid`.
std::string blocked_by(long long pid) {
  return "pg_blocking_pids(pid) @> ARRAY[" + std::to_string(pid) + "]";
}

} // namespace

TEST_SUITE("main.bench_baseline") {

  TEST_CASE("reserve decides as the store does for every kind, plan, "
            "pocket state and flag") {
    auto db = make_store();
    baseline_store base{test::dsn()};
    for (const auto& [k, shape] : all_cases()) {
      CAPTURE(describe(k, shape));
      auto theirs = db.reserve(make_chat(db, shape), k, {});
      auto ours = base.reserve(make_chat(db, shape), k, {});
      REQUIRE(code_of(ours) == code_of(theirs));
      if (!theirs)
        continue;
      CHECK(ours->held == theirs->held);
      CHECK(ours->queue == theirs->queue);
      CHECK(ours->kind == theirs->kind);
      CHECK(ours->status == reservation_status::queued);
    }
  }

  TEST_CASE("a second reserve of a chat is busy, and an unknown chat is "
            "not_found") {
    auto db = make_store();
    baseline_store base{test::dsn()};
    auto chat = make_chat(db, {{0, 0, 5}});
    REQUIRE(base.reserve(chat, kind::image, {}));
    CHECK(code_of(base.reserve(chat, kind::image, {})) == ec::busy);
    CHECK(code_of(base.reserve(test::fresh_chat(), kind::image, {}))
          == ec::not_found);
  }

  TEST_CASE("a replayed request gets its reservation back") {
    auto db = make_store();
    baseline_store base{test::dsn()};
    auto chat = make_chat(db, {{0, 0, 5}});
    auto first = base.reserve(chat, kind::image, "req-1");
    REQUIRE(first);
    auto again = base.reserve(chat, kind::image, "req-1");
    REQUIRE(again);
    CHECK(again->id == first->id);
    CHECK(code_of(base.reserve(chat, kind::image, "req-2")) == ec::busy);
  }

  TEST_CASE("commit charges the held amounts once and a repeated commit "
            "returns the first receipt") {
    auto db = make_store();
    baseline_store base{test::dsn()};
    auto chat = make_chat(db, {{0, 2, 5}});
    auto r = base.reserve(chat, kind::image, {});
    REQUIRE(r);
    CHECK(code_of(base.commit(chat, r->id)) == ec::invalid_state);
    REQUIRE(base.start(chat, r->id));
    auto restarted = base.start(chat, r->id);
    REQUIRE(restarted);
    CHECK(restarted->status == reservation_status::in_progress);
    auto first = base.commit(chat, r->id);
    REQUIRE(first);
    CHECK(first->charged == pockets{0, 1, 0});
    auto again = base.commit(chat, r->id);
    REQUIRE(again);
    CHECK(again->charged == first->charged);
    CHECK(again->committed_at == first->committed_at);
    auto st = db.status(chat);
    REQUIRE(st);
    CHECK(st->amounts == pockets{0, 1, 5});
    CHECK_FALSE(st->active);
    CHECK(test::sql_int(
            "SELECT count(*) FROM ledger WHERE entry = 'charge' AND chat_id = "
            + std::to_string(chat))
          == 1);
  }

  TEST_CASE("a pocket lowered after the reserve is charged down to zero, "
            "never below") {
    auto db = make_store();
    baseline_store base{test::dsn()};
    auto chat = make_chat(db, {{0, 0, 1}});
    auto r = base.reserve(chat, kind::image, {});
    REQUIRE(r);
    REQUIRE(base.start(chat, r->id));
    test::sql("UPDATE chats SET pockets = chargeonce_pockets_with(pockets, "
              "'{\"balance\": 0}') "
              "WHERE chat_id = "
              + std::to_string(chat));
    auto receipt = base.commit(chat, r->id);
    REQUIRE(receipt);
    CHECK(receipt->charged == pockets{0, 0, 0});
  }

  TEST_CASE("cancel takes a queued reservation only; fail takes any") {
    auto db = make_store();
    baseline_store base{test::dsn()};
    auto chat = make_chat(db, {{0, 0, 5}});
    auto r = base.reserve(chat, kind::image, {});
    REQUIRE(r);
    auto cancelled = base.cancel(chat);
    REQUIRE(cancelled);
    CHECK(cancelled->id == r->id);
    CHECK(code_of(base.cancel(chat)) == ec::not_found);
    auto s = base.reserve(chat, kind::image, {});
    REQUIRE(s);
    REQUIRE(base.start(chat, s->id));
    CHECK(code_of(base.cancel(chat)) == ec::too_late);
    REQUIRE(base.fail(chat, s->id));
    CHECK(code_of(base.fail(chat, s->id)) == ec::not_found);
    CHECK(code_of(base.commit(chat, s->id)) == ec::not_found);
  }

  TEST_CASE("concurrent reserves of one chat: exactly one wins") {
    auto db = make_store();
    constexpr int rounds = 20;
    constexpr int threads = 6;
    std::vector<std::unique_ptr<baseline_store>> bases;
    for (int i = 0; i < threads; ++i)
      bases.push_back(std::make_unique<baseline_store>(test::dsn()));
    for (int round = 0; round < rounds; ++round) {
      auto chat = make_chat(db, {{0, 0, 100}});
      std::atomic<int> won{0};
      std::atomic<int> busy{0};
      std::vector<std::thread> pool;
      for (auto& b : bases)
        pool.emplace_back([&, base = b.get()] {
          auto x = base->reserve(chat, kind::image, {});
          if (x)
            ++won;
          else if (code_of(x) == ec::busy)
            ++busy;
        });
      for (auto& t : pool)
        t.join();
      CHECK(won == 1);
      CHECK(busy == threads - 1);
    }
  }

  TEST_CASE("a reserve of a chat whose commit is under way waits for the "
            "commit, then gets the chat") {
    // The commit locks the chat row before the reservation row, in the
    // order reserve locks them. The other way round, a reserve holding the
    // chat row would wait for the reservation the commit is deleting while
    // the commit waits for the chat row: a deadlock. Planted rather than
    // left to a race: another connection holds the reservation row, so the
    // commit stops between its two locks, and a reserve comes just then.
    auto db = make_store();
    auto chat = make_chat(db, {{0, 0, 5}});
    baseline_store worker{test::dsn()};
    baseline_store rival{test::dsn()};
    REQUIRE_FALSE(rival.connect());
    auto r = worker.reserve(chat, kind::image, {});
    REQUIRE(r);
    REQUIRE(worker.start(chat, r->id));
    // Declared before the blocker, so that on a failed REQUIRE the blocker
    // lets go first and the calls end before their futures are destroyed.
    std::future<caf::expected<receipt>> committed;
    std::future<caf::expected<reservation>> reserved;
    pqxx::connection blocker_conn{test::dsn()};
    pqxx::work blocker{blocker_conn};
    auto blocker_pid = blocker.exec1("SELECT pg_backend_pid()")[0].as<int>();
    blocker.exec("SELECT 1 FROM reservations WHERE id = "
                 + std::to_string(r->id) + " FOR UPDATE");
    auto held_since = std::chrono::steady_clock::now();
    committed = std::async(std::launch::async,
                           [&] { return worker.commit(chat, r->id); });
    auto commit_waits = test::await_lock_wait(blocked_by(blocker_pid));
    MESSAGE("the commit waited for the reservation row after "
            << commit_waits.ms() << " ms");
    REQUIRE(commit_waits);
    auto commit_pid = test::sql_int("SELECT pid FROM pg_stat_activity WHERE "
                                    + blocked_by(blocker_pid));
    reserved = std::async(std::launch::async,
                          [&] { return rival.reserve(chat, kind::image, {}); });
    // Ends at once, not at the bound, when the reserve answers without
    // waiting (as it would, busy, had the commit not locked the chat yet).
    auto reserve_waits = test::wait_until(
      [&] {
        return reserved.wait_for(0s) == std::future_status::ready
               || test::sql_int("SELECT count(*) FROM pg_stat_activity WHERE "
                                "wait_event_type = 'Lock' AND "
                                + blocked_by(commit_pid))
                    > 0;
      },
      std::chrono::seconds(60));
    MESSAGE("the reserve waited for the commit's chat row after "
            << reserve_waits.ms() << " ms");
    REQUIRE(reserve_waits);
    REQUIRE_MESSAGE(reserved.wait_for(0s) == std::future_status::timeout,
                    "the reserve answered without waiting for the commit");
    // The baseline's statement_timeout (5 s) bounds how long the commit may
    // wait here; this shows how far below it the test stays.
    blocker.abort();
    MESSAGE("the reservation row was held for "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now() - held_since)
                 .count()
            << " ms");
    auto receipt = committed.get();
    REQUIRE(receipt);
    CHECK(receipt->charged == pockets{0, 0, 1});
    auto second = reserved.get();
    REQUIRE(second);
    CHECK(second->id != r->id);
    CHECK(test::sql_int(
            "SELECT count(*) FROM ledger WHERE entry = 'charge' AND chat_id = "
            + std::to_string(chat))
          == 1);
    REQUIRE(rival.fail(chat, second->id));
  }

  TEST_CASE("a reserve racing the commit of the same chat waits, never "
            "deadlocks") {
    // Every round is one whole cycle: the worker reserves and starts while
    // the chat is free, then commits while the rival reserves the same
    // chat again and again until the commit has answered; what the rival
    // wins it gives back before the next round.
    constexpr int rounds = 300;
    auto db = make_store();
    auto chat = make_chat(db, {{0, 0, 1000000}});
    baseline_store worker{test::dsn()};
    baseline_store rival{test::dsn()};
    REQUIRE_FALSE(worker.connect());
    REQUIRE_FALSE(rival.connect());
    int failures = 0;
    int rival_won = 0;
    for (int round = 0; round < rounds; ++round) {
      CAPTURE(round);
      auto r = worker.reserve(chat, kind::image, {});
      REQUIRE(r); // the chat is free: the rival gave back what it won
      REQUIRE(worker.start(chat, r->id));
      std::atomic<bool> commit_answered{false};
      std::promise<void> go;
      auto racer =
        std::async(std::launch::async, [&, go_signal = go.get_future()] {
          go_signal.wait();
          std::optional<reservation_id> won;
          int errors = 0;
          while (!won && !commit_answered) {
            auto x = rival.reserve(chat, kind::image, {});
            if (x)
              won = x->id;
            else if (code_of(x) != ec::busy)
              ++errors;
          }
          return std::make_pair(won, errors);
        });
      go.set_value();
      failures += worker.commit(chat, r->id) ? 0 : 1;
      commit_answered = true;
      auto [won, errors] = racer.get();
      failures += errors;
      if (won) {
        ++rival_won;
        failures += rival.fail(chat, *won) ? 0 : 1;
      }
    }
    MESSAGE("the rival's reserve got the chat right after the commit in "
            << rival_won << " of " << rounds << " rounds");
    CHECK(failures == 0);
    CHECK(test::sql_int(
            "SELECT count(*) FROM ledger WHERE entry = 'charge' AND chat_id = "
            + std::to_string(chat))
          == rounds);
  }
}
