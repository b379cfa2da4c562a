// SPDX-License-Identifier: Apache-2.0
// The store's guarantees against a real Postgres, with real connections and
// real threads. Every race runs many times.
#include "persistence/store.hpp"

#include "protocol/errors.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>
#include <pqxx/pqxx>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <set>
#include <vector>

using namespace chargeonce;
using persistence::store;
using persistence::store_options;

namespace {

store_options options() {
  return test::store_options();
}

chat_id make_chat(store& db, pockets initial,
                  caf::optional<caf::timestamp> premium_until = caf::none) {
  auto chat = test::fresh_chat();
  auto created =
    db.create_chat(chat_spec{chat, initial, premium_until, caf::none});
  REQUIRE(created);
  return chat;
}

std::string where_chat(chat_id chat) {
  return " WHERE chat_id = " + std::to_string(chat);
}

long long reservations_of(chat_id chat) {
  return test::sql_int("SELECT count(*) FROM reservations" + where_chat(chat));
}

long long ledger_rows_of(chat_id chat) {
  return test::sql_int("SELECT count(*) FROM ledger" + where_chat(chat)
                       + " AND entry = 'charge'");
}

pockets pockets_of(store& db, chat_id chat) {
  auto st = db.status(chat);
  REQUIRE(st);
  return st->amounts;
}

/// Lets N threads leave a starting line together, to maximise overlap.
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

/// The built-in catalog with image's cancel_after_start set to `request`
/// (text keeps `refuse`).
store_options request_policy_options() {
  auto opts = options();
  for (auto& k : opts.products.kinds)
    if (k.name == "image")
      k.cancel_after_start = cancel_policy::request;
  return opts;
}

caf::timestamp in(std::chrono::seconds dt) {
  return caf::timestamp{std::chrono::system_clock::now() + dt};
}

} // namespace

TEST_SUITE("store") {

  // -- one active job per chat
  // ---------------------------------------------------

  TEST_CASE("64 concurrent reserves from separate connections: one wins, 63 "
            "are busy") {
    constexpr size_t contenders = 64;
    constexpr int rounds = 5;
    std::vector<std::unique_ptr<store>> conns;
    for (size_t i = 0; i < contenders; ++i) {
      conns.push_back(std::make_unique<store>(options()));
      REQUIRE(conns.back()->status(1).error() == ec::not_found); // connect now
    }
    for (int round = 0; round < rounds; ++round) {
      auto chat = make_chat(*conns[0], {0, 100, 100});
      starting_line line{contenders};
      std::vector<std::future<caf::expected<reservation>>> results;
      for (size_t i = 0; i < contenders; ++i)
        results.push_back(std::async(std::launch::async, [&, i] {
          line.arrive_and_wait();
          return conns[i]->reserve(chat, kind::image, "r" + std::to_string(i));
        }));
      auto outcome = test::tally(results);
      CHECK(outcome.won == 1);
      CHECK(outcome.busy == 63);
      CHECK(outcome.other == 0);
      CHECK(reservations_of(chat) == 1);
    }
  }

  TEST_CASE("a backend killed during reserve is storage_unavailable, never "
            "busy, and the next call succeeds") {
    store db{options()};
    for (int round = 0; round < 5; ++round) {
      auto chat = make_chat(db, {1, 1, 0});
      REQUIRE(db.status(chat)); // opens the connection, so its pid is known
      auto pid = db.backend_pid();
      REQUIRE(pid > 0);
      // Hold the chat row so that reserve waits inside its transaction.
      pqxx::connection blocker_conn{test::dsn()};
      pqxx::work blocker{blocker_conn};
      blocker.exec("SELECT 1 FROM chats" + where_chat(chat) + " FOR UPDATE");
      auto pending = std::async(
        std::launch::async, [&] { return db.reserve(chat, kind::text, ""); });
      auto waiting = test::await_lock_wait("pid = " + std::to_string(pid));
      MESSAGE("the backend waited for the row lock after " << waiting.ms()
                                                           << " ms");
      REQUIRE(waiting);
      test::sql("SELECT pg_terminate_backend(" + std::to_string(pid) + ")");
      auto killed = pending.get();
      REQUIRE_FALSE(killed);
      CHECK(killed.error() == ec::storage_unavailable);
      blocker.abort();
      CHECK(reservations_of(chat) == 0); // nothing half-written
      auto again = db.reserve(chat, kind::text, "");
      REQUIRE(again);
      CHECK(db.backend_pid() != pid);
    }
  }

  TEST_CASE("an unreachable database is storage_unavailable, never busy") {
    store db{{"host=/nonexistent-socket-dir dbname=none connect_timeout=2",
              std::chrono::milliseconds{1000}}};
    auto r = db.reserve(42, kind::text, "");
    REQUIRE_FALSE(r);
    CHECK(r.error() == ec::storage_unavailable);
    CHECK(db.status(42).error() == ec::storage_unavailable);
  }

  TEST_CASE("a statement timeout is storage_unavailable, not busy") {
    store db{{test::dsn(), std::chrono::milliseconds{200}}};
    auto chat = make_chat(db, {1, 0, 0});
    pqxx::connection blocker_conn{test::dsn()};
    pqxx::work blocker{blocker_conn};
    blocker.exec("SELECT 1 FROM chats" + where_chat(chat) + " FOR UPDATE");
    auto r = db.reserve(chat, kind::text, "");
    REQUIRE_FALSE(r);
    CHECK(r.error() == ec::storage_unavailable);
    blocker.abort();
    CHECK(db.reserve(chat, kind::text, ""));
  }

  // -- reserve: pockets and refusals
  // ---------------------------------------------

  TEST_CASE("reserve records the decision: pocket, queue, status") {
    store db{options()};
    auto free_chat = make_chat(db, {2, 1, 5});
    auto r = db.reserve(free_chat, kind::image, "job-1");
    REQUIRE(r);
    CHECK(r->held == pockets{0, 1, 0});
    CHECK(r->queue == "image_generation");
    CHECK(r->status == reservation_status::queued);
    CHECK(r->request_id == "job-1");
    CHECK(r->chat == free_chat);
    CHECK(pockets_of(db, free_chat) == pockets{2, 1, 5}); // held, not charged
    auto premium = make_chat(db, {0, 0, 0}, in(std::chrono::hours(1)));
    auto t = db.reserve(premium, kind::text, "");
    REQUIRE(t);
    CHECK(t->held == pockets{});
    CHECK(t->queue == "text_generation_priority");
  }

  TEST_CASE("a retried reserve with the same request_id returns the same "
            "reservation, not busy") {
    store db{options()};
    auto chat = make_chat(db, {1, 1, 1});
    auto first = db.reserve(chat, kind::image, "job-1");
    REQUIRE(first);
    auto retry = db.reserve(chat, kind::image, "job-1");
    REQUIRE(retry);
    CHECK(retry->id == first->id);
    CHECK(retry->held == first->held);
    CHECK(db.reserve(chat, kind::image, "job-2").error() == ec::busy);
    CHECK(db.reserve(chat, kind::image, "").error() == ec::busy);
    // One request id names one job: of another kind it is a mistake.
    CHECK(db.reserve(chat, kind::text, "job-1").error()
          == ec::invalid_argument);
    REQUIRE(db.start(chat, first->id));
    CHECK(db.reserve(chat, kind::image, "job-1")->id == first->id); // started
    REQUIRE(db.commit(chat, first->id));
    // Remembered after it ended: the same job with its final status, never
    // a second hold.
    auto after = db.reserve(chat, kind::image, "job-1");
    REQUIRE(after);
    CHECK(after->id == first->id);
    CHECK(after->status == reservation_status::committed);
    CHECK(after->ended_at);
    CHECK(after->held == first->held);
    CHECK(reservations_of(chat) == 0);
    // Another request id is another job.
    auto next = db.reserve(chat, kind::image, "job-2");
    REQUIRE(next);
    CHECK(next->id != first->id);
    CHECK(reservations_of(chat) == 1);
  }

  TEST_CASE("16 concurrent retries of one request_id all get the one "
            "reservation") {
    std::vector<std::unique_ptr<store>> conns;
    for (int i = 0; i < 16; ++i)
      conns.push_back(std::make_unique<store>(options()));
    for (int round = 0; round < 5; ++round) {
      auto chat = make_chat(*conns[0], {0, 5, 0});
      starting_line line{conns.size()};
      std::vector<std::future<caf::expected<reservation>>> results;
      for (auto& c : conns)
        results.push_back(std::async(std::launch::async, [&, db = c.get()] {
          line.arrive_and_wait();
          return db->reserve(chat, kind::image, "tap");
        }));
      std::set<reservation_id> ids;
      for (auto& f : results) {
        auto r = f.get();
        REQUIRE(r);
        ids.insert(r->id);
      }
      CHECK(ids.size() == 1);
      CHECK(reservations_of(chat) == 1);
    }
  }

  TEST_CASE("reserve refusals are typed and write nothing") {
    store db{options()};
    auto empty = make_chat(db, {0, 0, 3});
    CHECK(db.reserve(empty, kind::text, "").error()
          == ec::insufficient_messages); // text never falls back to balance
    auto broke = make_chat(db, {5, 0, 0});
    CHECK(db.reserve(broke, kind::image, "").error()
          == ec::insufficient_images);
    CHECK(db.reserve(test::fresh_chat(), kind::text, "").error()
          == ec::not_found);
    auto blocked = make_chat(db, {5, 5, 5});
    test::sql("UPDATE chats SET blocked = true" + where_chat(blocked));
    CHECK(db.reserve(blocked, kind::text, "").error() == ec::chat_blocked);
    auto banned = make_chat(db, {5, 5, 5});
    test::sql("UPDATE chats SET banned = true" + where_chat(banned));
    CHECK(db.reserve(banned, kind::text, "").error() == ec::chat_banned);
    CHECK(db.reserve(0, kind::text, "").error() == ec::invalid_argument);
    auto unknown = db.reserve(empty, kind{"video"}, "");
    CHECK(unknown.error() == ec::invalid_argument);
    CHECK(error_message(unknown.error())
          == "unknown kind video: the catalog has image, text");
    for (auto chat : {empty, broke, blocked, banned})
      CHECK(reservations_of(chat) == 0);
  }

  TEST_CASE("create-chat refuses duplicates and negative amounts") {
    store db{options()};
    auto chat = make_chat(db, {1, 2, 3});
    CHECK(db.create_chat({chat, {9, 9, 9}, caf::none, caf::none}).error()
          == ec::already_exists);
    CHECK(pockets_of(db, chat) == pockets{1, 2, 3});
    auto other = test::fresh_chat();
    CHECK(db.create_chat({other, {0, -1, 0}, caf::none, caf::none}).error()
          == ec::invalid_argument);
    CHECK(db.status(other).error() == ec::not_found);
  }

  // -- start, cancel, fail
  // -------------------------------------------------------

  TEST_CASE("cancel while queued deletes; after start it is too_late and "
            "leaves the reservation") {
    store db{options()};
    auto chat = make_chat(db, {3, 0, 0});
    auto r = db.reserve(chat, kind::text, "");
    REQUIRE(r);
    auto cancelled = db.cancel(chat);
    REQUIRE(cancelled);
    CHECK(cancelled->id == r->id);
    CHECK(reservations_of(chat) == 0);
    CHECK(db.start(chat, r->id).error() == ec::not_found); // worker drops it
    auto r2 = db.reserve(chat, kind::text, "");
    REQUIRE(r2);
    REQUIRE(db.start(chat, r2->id));
    CHECK(db.cancel(chat).error() == ec::too_late);
    CHECK(reservations_of(chat) == 1);
    auto again = db.start(chat, r2->id); // a retried start is harmless
    REQUIRE(again);
    CHECK(again->status == reservation_status::in_progress);
    CHECK(db.cancel(chat).error() == ec::too_late); // still, after the retry
    CHECK(db.cancel(test::fresh_chat()).error() == ec::not_found);
  }

  TEST_CASE("fail deletes the reservation and charges nothing") {
    store db{options()};
    auto chat = make_chat(db, {0, 1, 1});
    auto r = db.reserve(chat, kind::image, "");
    REQUIRE(r);
    REQUIRE(db.start(chat, r->id));
    auto failed = db.fail(chat, r->id);
    REQUIRE(failed);
    CHECK(failed->held == pockets{0, 1, 0});
    CHECK(reservations_of(chat) == 0);
    CHECK(ledger_rows_of(chat) == 0);
    CHECK(pockets_of(db, chat) == pockets{0, 1, 1});
    CHECK(db.fail(chat, r->id).error() == ec::not_found);
    CHECK(db.commit(chat, r->id).error() == ec::not_found);
  }

  TEST_CASE("a reservation of another chat is invalid_argument and untouched") {
    store db{options()};
    auto owner = make_chat(db, {1, 1, 1});
    auto stranger = make_chat(db, {1, 1, 1});
    auto r = db.reserve(owner, kind::image, "");
    REQUIRE(r);
    CHECK(db.start(stranger, r->id).error() == ec::invalid_argument);
    CHECK(db.fail(stranger, r->id).error() == ec::invalid_argument);
    REQUIRE(db.start(owner, r->id));
    CHECK(db.commit(stranger, r->id).error() == ec::invalid_argument);
    CHECK(reservations_of(owner) == 1);
    REQUIRE(db.commit(owner, r->id));
    CHECK(db.commit(stranger, r->id).error() == ec::invalid_argument);
    CHECK(db.start(owner, 0).error() == ec::invalid_argument);
    CHECK(db.commit(owner, -3).error() == ec::invalid_argument);
    CHECK(pockets_of(db, stranger) == pockets{1, 1, 1});
  }

  TEST_CASE("cancel racing start 1,000 times: exactly one of them wins") {
    store setup{options()};
    store worker{options()};
    store gateway{options()};
    auto chat = make_chat(setup, {0, 0, 1000});
    int started = 0;
    int cancelled = 0;
    for (int i = 0; i < 1000; ++i) {
      auto r = setup.reserve(chat, kind::image, "");
      REQUIRE(r);
      starting_line line{2};
      auto start = std::async(std::launch::async, [&] {
        line.arrive_and_wait();
        return worker.start(chat, r->id);
      });
      auto cancel = std::async(std::launch::async, [&] {
        line.arrive_and_wait();
        return gateway.cancel(chat);
      });
      auto s = start.get();
      auto c = cancel.get();
      if (s) {
        // Started: cancel must have been refused and the hold must remain.
        REQUIRE_FALSE(c);
        REQUIRE(c.error() == ec::too_late);
        REQUIRE(reservations_of(chat) == 1);
        ++started;
        REQUIRE(setup.fail(chat, r->id));
      } else {
        REQUIRE(s.error() == ec::not_found);
        REQUIRE(c);
        REQUIRE(c->id == r->id);
        REQUIRE(reservations_of(chat) == 0);
        ++cancelled;
      }
    }
    MESSAGE("started first: " << started << ", cancelled first: " << cancelled);
    CHECK(started + cancelled == 1000);
  }

  TEST_CASE("cancel after start under the request policy: the job is marked "
            "cancel_requested, a repeat answers the same, heartbeats carry "
            "it, and the worker still decides") {
    auto opts = request_policy_options();
    store db{opts};
    auto chat = make_chat(db, {3, 0, 4});
    // A queued job is still deleted at once, whatever the policy.
    auto queued = db.reserve(chat, kind::image, "");
    REQUIRE(queued);
    auto deleted = db.cancel(chat);
    REQUIRE(deleted);
    CHECK_FALSE(deleted->cancel_requested);
    CHECK(reservations_of(chat) == 0);
    // Started: marked, not deleted; the hold stays.
    auto r = db.reserve(chat, kind::image, "img-1");
    REQUIRE(r);
    CHECK_FALSE(r->cancel_requested);
    REQUIRE(db.start(chat, r->id));
    auto first = db.cancel(chat);
    REQUIRE(first);
    CHECK(first->id == r->id);
    CHECK(first->status == reservation_status::in_progress);
    CHECK(first->cancel_requested);
    CHECK(first->held == pockets{0, 0, 1});
    auto again = db.cancel(chat, r->id, "");
    REQUIRE(again);
    CHECK(again->cancel_requested);
    CHECK(again->held == first->held);
    auto by_request = db.cancel(chat, 0, "img-1");
    REQUIRE(by_request);
    CHECK(by_request->id == r->id);
    CHECK(by_request->cancel_requested);
    CHECK(reservations_of(chat) == 1);
    auto beat = db.heartbeat(chat, r->id);
    REQUIRE(beat);
    CHECK(beat->cancel_requested);
    auto st = db.status(chat);
    REQUIRE(st);
    REQUIRE(st->reservations.size() == 1);
    CHECK(st->reservations[0].cancel_requested);
    CHECK(st->active->cancel_requested);
    // A retried reserve of the request finds the marked job.
    auto replay = db.reserve(chat, kind::image, "img-1");
    REQUIRE(replay);
    CHECK(replay->cancel_requested);
    // The provider had done the work: the worker commits, and it is charged.
    auto receipt = db.commit(chat, r->id);
    REQUIRE(receipt);
    CHECK(receipt->charged == pockets{0, 0, 1});
    CHECK(pockets_of(db, chat) == pockets{3, 0, 3});
    CHECK(db.cancel(chat, r->id, "").error() == ec::invalid_state);
    // The worker aborts instead: fail charges nothing.
    auto aborted = db.reserve(chat, kind::image, "");
    REQUIRE(aborted);
    REQUIRE(db.start(chat, aborted->id));
    REQUIRE(db.cancel(chat));
    auto failed = db.fail(chat, aborted->id);
    REQUIRE(failed);
    CHECK(failed->cancel_requested);
    CHECK(pockets_of(db, chat) == pockets{3, 0, 3});
    CHECK(ledger_rows_of(chat) == 1);
    // Text keeps the refuse policy: too_late, and nothing is marked.
    auto text = db.reserve(chat, kind::text, "");
    REQUIRE(text);
    REQUIRE(db.start(chat, text->id));
    CHECK(db.cancel(chat).error() == ec::too_late);
    auto text_beat = db.heartbeat(chat, text->id);
    REQUIRE(text_beat);
    CHECK_FALSE(text_beat->cancel_requested);
  }

  TEST_CASE("cancel racing start 1,000 times under the request policy: "
            "exactly one of cancelled while queued, or started then cancel "
            "requested") {
    auto opts = request_policy_options();
    store setup{opts};
    store worker{opts};
    store gateway{opts};
    auto chat = make_chat(setup, {0, 0, 1000});
    int started = 0;
    int cancelled = 0;
    for (int i = 0; i < 1000; ++i) {
      auto r = setup.reserve(chat, kind::image, "");
      REQUIRE(r);
      starting_line line{2};
      auto start = std::async(std::launch::async, [&] {
        line.arrive_and_wait();
        return worker.start(chat, r->id);
      });
      auto cancel = std::async(std::launch::async, [&] {
        line.arrive_and_wait();
        return gateway.cancel(chat);
      });
      auto s = start.get();
      auto c = cancel.get();
      REQUIRE(c);
      REQUIRE(c->id == r->id);
      if (s) {
        // Started first: the cancel marked it, and the job is still there.
        REQUIRE(c->status == reservation_status::in_progress);
        REQUIRE(c->cancel_requested);
        REQUIRE(reservations_of(chat) == 1);
        auto beat = worker.heartbeat(chat, r->id);
        REQUIRE(beat);
        REQUIRE(beat->cancel_requested);
        ++started;
        REQUIRE(setup.fail(chat, r->id));
      } else {
        // Cancelled while queued: gone, and the worker's start says so.
        REQUIRE(s.error() == ec::not_found);
        REQUIRE(c->status == reservation_status::queued);
        REQUIRE_FALSE(c->cancel_requested);
        REQUIRE(reservations_of(chat) == 0);
        ++cancelled;
      }
    }
    MESSAGE("started first: " << started << ", cancelled first: " << cancelled);
    CHECK(started + cancelled == 1000);
    CHECK(ledger_rows_of(chat) == 0);
    CHECK(pockets_of(setup, chat) == pockets{0, 0, 1000});
  }

  // -- commit
  // --------------------------------------------------------------------

  TEST_CASE("commit twice: one ledger row, one charge, the same receipt") {
    store db{options()};
    auto chat = make_chat(db, {0, 1, 2});
    auto r = db.reserve(chat, kind::image, "");
    REQUIRE(r);
    CHECK(db.commit(chat, r->id).error() == ec::invalid_state); // not started
    REQUIRE(db.start(chat, r->id));
    auto first = db.commit(chat, r->id);
    REQUIRE(first);
    CHECK(first->charged == pockets{0, 1, 0});
    auto second = db.commit(chat, r->id);
    REQUIRE(second);
    CHECK(second->charged == first->charged);
    CHECK(second->committed_at == first->committed_at);
    CHECK(ledger_rows_of(chat) == 1);
    CHECK(pockets_of(db, chat) == pockets{0, 0, 2});
    CHECK(reservations_of(chat) == 0);
    CHECK(db.start(chat, r->id).error() == ec::invalid_state);
    CHECK(db.fail(chat, r->id).error() == ec::invalid_state);
  }

  TEST_CASE("units: the hold is split daily pocket first; a commit of fewer "
            "units charges the daily pocket first and releases the rest; "
            "more than held is invalid_argument and changes nothing; a retry "
            "returns the first receipt whatever units it names") {
    store db{options()};
    auto chat = make_chat(db, {0, 2, 10});
    auto r = db.reserve(chat, kind::image, "", 5);
    REQUIRE(r);
    CHECK(r->units == 5);
    CHECK(r->held == pockets{0, 2, 3});
    CHECK(r->held_units == pockets{0, 2, 3});
    REQUIRE(db.start(chat, r->id));
    auto too_many = db.commit(chat, r->id, 6);
    REQUIRE_FALSE(too_many);
    CHECK(too_many.error() == ec::invalid_argument);
    CHECK(ledger_rows_of(chat) == 0);
    CHECK(reservations_of(chat) == 1);
    CHECK(db.commit(chat, r->id, -1).error() == ec::invalid_argument);
    auto first = db.commit(chat, r->id, 3);
    REQUIRE(first);
    CHECK(first->units == 3);
    CHECK(first->charged == pockets{0, 2, 1});
    CHECK(first->released == pockets{0, 0, 2});
    CHECK(pockets_of(db, chat) == pockets{0, 0, 9});
    auto again = db.commit(chat, r->id, 5);
    REQUIRE(again);
    CHECK(again->units == 3);
    CHECK(again->charged == first->charged);
    CHECK(again->released == first->released);
    CHECK(pockets_of(db, chat) == pockets{0, 0, 9});
    CHECK(test::sql_int("SELECT units FROM ledger WHERE reservation_id = "
                        + std::to_string(r->id))
          == 3);
    CHECK(
      test::sql_int("SELECT chargeonce_amount(released, 'balance') FROM ledger "
                    "WHERE reservation_id = "
                    + std::to_string(r->id))
      == 2);
  }

  TEST_CASE("units: out of 1 to 1,000,000 is invalid_argument; more than the "
            "pockets cover is refused whole; without units one is held") {
    store db{options()};
    auto chat = make_chat(db, {0, 1, 2});
    CHECK(db.reserve(chat, kind::image, "", -1).error()
          == ec::invalid_argument);
    CHECK(db.reserve(chat, kind::image, "", 1000001).error()
          == ec::invalid_argument);
    CHECK(db.reserve(chat, kind::image, "", 4).error()
          == ec::insufficient_images);
    CHECK(reservations_of(chat) == 0);
    auto one = db.reserve(chat, kind::image, "");
    REQUIRE(one);
    CHECK(one->units == 1);
    CHECK(one->held == pockets{0, 1, 0});
    REQUIRE(db.start(chat, one->id));
    auto receipt = db.commit(chat, one->id);
    REQUIRE(receipt);
    CHECK(receipt->units == 1);
    CHECK(receipt->released == pockets{});
  }

  TEST_CASE("commits racing on separate connections charge once") {
    std::vector<std::unique_ptr<store>> conns;
    for (int i = 0; i < 8; ++i)
      conns.push_back(std::make_unique<store>(options()));
    for (int round = 0; round < 20; ++round) {
      auto chat = make_chat(*conns[0], {0, 0, 5});
      auto r = conns[0]->reserve(chat, kind::image, "");
      REQUIRE(r);
      REQUIRE(conns[0]->start(chat, r->id));
      starting_line line{conns.size()};
      std::vector<std::future<caf::expected<receipt>>> results;
      for (auto& c : conns)
        results.push_back(std::async(std::launch::async, [&, db = c.get()] {
          line.arrive_and_wait();
          return db->commit(chat, r->id);
        }));
      for (auto& f : results) {
        auto receipt = f.get();
        REQUIRE(receipt);
        CHECK(receipt->charged == pockets{0, 0, 1});
      }
      CHECK(ledger_rows_of(chat) == 1);
      CHECK(pockets_of(*conns[0], chat) == pockets{0, 0, 4});
    }
  }

  TEST_CASE("commit racing fail: charged or released, never both") {
    store a{options()};
    store b{options()};
    auto chat = make_chat(a, {0, 0, 1000});
    int charged = 0;
    for (int i = 0; i < 200; ++i) {
      auto r = a.reserve(chat, kind::image, "");
      REQUIRE(r);
      REQUIRE(a.start(chat, r->id));
      starting_line line{2};
      auto commit = std::async(std::launch::async, [&] {
        line.arrive_and_wait();
        return a.commit(chat, r->id);
      });
      auto fail = std::async(std::launch::async, [&] {
        line.arrive_and_wait();
        return b.fail(chat, r->id);
      });
      auto c = commit.get();
      auto f = fail.get();
      REQUIRE(static_cast<bool>(c) != static_cast<bool>(f));
      if (c) {
        ++charged;
        REQUIRE(f.error() == ec::invalid_state);
      } else {
        REQUIRE(c.error() == ec::not_found);
      }
    }
    CHECK(ledger_rows_of(chat) == charged);
    CHECK(pockets_of(a, chat).get(pocket::balance) == 1000 - charged);
  }

  TEST_CASE("premium expiring between reserve and commit: charged what was "
            "held") {
    store db{options()};
    auto chat = make_chat(db, {4, 0, 0}, in(std::chrono::hours(1)));
    auto r = db.reserve(chat, kind::text, "");
    REQUIRE(r);
    CHECK(r->held == pockets{});
    test::sql("UPDATE chats SET premium_until = now() - interval '1 minute'"
              + where_chat(chat));
    REQUIRE(db.start(chat, r->id));
    auto receipt = db.commit(chat, r->id);
    REQUIRE(receipt);
    CHECK(receipt->charged == pockets{});
    CHECK(pockets_of(db, chat) == pockets{4, 0, 0});
    // And the other way round: premium arriving later does not make it free.
    auto r2 = db.reserve(chat, kind::text, "");
    REQUIRE(r2);
    CHECK(r2->held == pockets{1, 0, 0});
    test::sql("UPDATE chats SET premium_until = now() + interval '1 day'"
              + where_chat(chat));
    REQUIRE(db.start(chat, r2->id));
    REQUIRE(db.commit(chat, r2->id));
    CHECK(pockets_of(db, chat) == pockets{3, 0, 0});
  }

  TEST_CASE("a pocket lowered below the hold is clamped at zero, no error") {
    store db{options()};
    auto chat = make_chat(db, {0, 0, 1});
    auto r = db.reserve(chat, kind::image, "");
    REQUIRE(r);
    CHECK(r->held == pockets{0, 0, 1});
    test::sql("UPDATE chats SET pockets = chargeonce_pockets_with(pockets, "
              "'{\"balance\": 0}')"
              + where_chat(chat));
    REQUIRE(db.start(chat, r->id));
    auto receipt = db.commit(chat, r->id);
    REQUIRE(receipt);
    CHECK(receipt->charged == pockets{0, 0, 0}); // what was actually taken
    CHECK(pockets_of(db, chat) == pockets{0, 0, 0});
    CHECK(ledger_rows_of(chat) == 1);
  }

  TEST_CASE("status shows pockets, premium and the active reservation") {
    store db{options()};
    auto until = in(std::chrono::hours(2));
    auto chat = make_chat(db, {1, 2, 3}, until);
    auto st = db.status(chat);
    REQUIRE(st);
    CHECK(st->premium);
    REQUIRE(st->premium_until);
    CHECK(std::chrono::abs(*st->premium_until - until)
          < std::chrono::microseconds(1));
    CHECK_FALSE(st->active);
    auto r = db.reserve(chat, kind::image, "x");
    REQUIRE(r);
    st = db.status(chat);
    REQUIRE(st->active);
    CHECK(st->active->id == r->id);
    CHECK(st->active->queue == "image_generation_priority");
  }

} // TEST_SUITE
