// SPDX-License-Identifier: Apache-2.0
// Batches of operations in one statement (store::apply) against a real
// Postgres: each operation decided on its own, one chat's operations in
// order, no deadlock between concurrent batches, outages fail the batch.
#include "persistence/store.hpp"
#include "protocol/errors.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>
#include <pqxx/pqxx>

#include <algorithm>
#include <array>
#include <future>
#include <map>
#include <random>
#include <vector>

using namespace chargeonce;
using persistence::batch_result;
using persistence::store;

namespace {

chat_id make_chat(store& db, pockets initial) {
  auto chat = test::fresh_chat();
  REQUIRE(db.create_chat(chat_spec{chat, initial, caf::none, caf::none}));
  return chat;
}

operation reserve_op(chat_id chat, kind k, std::string request_id = {}) {
  return {operation_type::reserve, chat, 0, k, std::move(request_id)};
}

operation op(operation_type type, chat_id chat, reservation_id id = 0) {
  return {type, chat, id, kind::text, {}};
}

/// The error of a result, or none if it carries a value.
caf::error error_of(const batch_result& x) {
  if (auto err = std::get_if<caf::error>(&x))
    return *err;
  return caf::none;
}

template <class T>
const T& value_of(const batch_result& x) {
  INFO("error: ", error_name(error_of(x)));
  REQUIRE(std::holds_alternative<T>(x));
  return std::get<T>(x);
}

long long count(const std::string& table, chat_id chat) {
  return test::sql_int("SELECT count(*) FROM " + table
                       + " WHERE chat_id = " + std::to_string(chat));
}

} // namespace

TEST_SUITE("batch") {
  TEST_CASE("a busy, an insufficient and an invalid operation never fail "
            "their neighbours") {
    store db{test::store_options()};
    auto held = make_chat(db, {0, 5, 0});
    auto empty = make_chat(db, {0, 0, 0});
    auto fine = make_chat(db, {1, 0, 0});
    REQUIRE(db.reserve(held, kind::image, ""));
    auto out =
      db.apply({reserve_op(held, kind::image), reserve_op(empty, kind::image),
                reserve_op(-0, kind::text), // chat 0 is invalid
                reserve_op(fine, kind::text, "tap")});
    REQUIRE(out.size() == 4);
    CHECK(error_of(out[0]) == ec::busy);
    CHECK(error_of(out[1]) == ec::insufficient_images);
    CHECK(error_of(out[2]) == ec::invalid_argument);
    CHECK(value_of<reservation>(out[3]).held == pockets{1, 0, 0});
    CHECK(count("reservations", held) == 1);
    CHECK(count("reservations", empty) == 0);
    CHECK(count("reservations", fine) == 1);
  }

  TEST_CASE("request ids travel through a batch byte for byte (quotes, "
            "backslashes, commas, braces, non-ASCII); unstorable ones are "
            "invalid_argument alone") {
    using namespace std::string_literals;
    store db{test::store_options()};
    std::vector<std::string> ids{
      "\"",        "\\",
      "a,b",       "{x}",
      "NULL",      "\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87 1",
      "tab\there", std::string(256, 'z')};
    std::vector<operation> ops;
    for (const auto& id : ids)
      ops.push_back(reserve_op(make_chat(db, {1, 0, 0}), kind::text, id));
    auto bad_chat = make_chat(db, {1, 0, 0});
    ops.push_back(reserve_op(bad_chat, kind::text, "a\0b"s));
    ops.push_back(reserve_op(make_chat(db, {1, 0, 0}), kind::text, "\xff"));
    auto out = db.apply(ops);
    REQUIRE(out.size() == ids.size() + 2);
    for (size_t i = 0; i < ids.size(); ++i)
      CHECK(value_of<reservation>(out[i]).request_id == ids[i]);
    CHECK(error_of(out[ids.size()]) == ec::invalid_argument);
    CHECK(error_of(out[ids.size() + 1]) == ec::invalid_argument);
    CHECK(count("reservations", bad_chat) == 0);
  }

  TEST_CASE("one chat's operations apply in their order within a batch") {
    store db{test::store_options()};
    auto chat = make_chat(db, {2, 0, 0});
    auto first = db.apply(
      {reserve_op(chat, kind::text, "a"), op(operation_type::status, chat),
       op(operation_type::cancel, chat), op(operation_type::status, chat),
       reserve_op(chat, kind::text, "b")});
    auto reserved = value_of<reservation>(first[0]);
    auto seen = value_of<chat_status>(first[1]);
    REQUIRE(seen.active);
    CHECK(seen.active->id == reserved.id);
    CHECK(value_of<reservation>(first[2]).id == reserved.id);
    CHECK_FALSE(value_of<chat_status>(first[3]).active);
    auto again = value_of<reservation>(first[4]);
    CHECK(again.request_id == "b");
    // start, heartbeat and commit of the second reservation in one batch.
    auto second = db.apply({op(operation_type::start, chat, again.id),
                            op(operation_type::heartbeat, chat, again.id),
                            op(operation_type::commit, chat, again.id),
                            op(operation_type::commit, chat, again.id)});
    CHECK(value_of<reservation>(second[0]).status
          == reservation_status::in_progress);
    CHECK(value_of<reservation>(second[1]).lease_expires_at);
    auto receipt_a = value_of<receipt>(second[2]);
    auto receipt_b = value_of<receipt>(second[3]);
    CHECK(receipt_a.charged == pockets{1, 0, 0});
    CHECK(receipt_b.committed_at == receipt_a.committed_at); // the same one
    CHECK(test::sql_int("SELECT count(*) FROM ledger WHERE entry = 'charge' "
                        "AND chat_id = "
                        + std::to_string(chat))
          == 1);
    CHECK(value_of<chat_status>(db.apply({op(operation_type::status, chat)})[0])
            .amounts
          == pockets{1, 0, 0});
  }

  TEST_CASE("a set-based commit answers exactly its ledger rows: a repeated "
            "commit and the ledger show the same charge and time") {
    store db{test::store_options()};
    // Text, an image from the daily quota, an image from credits, and one
    // chat emptied by an admin between start and commit (charged 0).
    std::vector<pockets> initial{{1, 0, 0}, {0, 1, 1}, {0, 0, 2}, {0, 0, 1}};
    std::vector<kind> kinds{kind::text, kind::image, kind::image, kind::image};
    std::vector<chat_id> chats;
    std::vector<operation> reserves;
    for (size_t i = 0; i < initial.size(); ++i) {
      chats.push_back(make_chat(db, initial[i]));
      reserves.push_back(reserve_op(chats[i], kinds[i]));
    }
    std::vector<operation> starts;
    std::vector<operation> commits;
    auto reserved = db.apply(reserves);
    for (size_t i = 0; i < chats.size(); ++i) {
      auto id = value_of<reservation>(reserved[i]).id;
      starts.push_back(op(operation_type::start, chats[i], id));
      commits.push_back(op(operation_type::commit, chats[i], id));
    }
    for (const auto& x : db.apply(starts))
      value_of<reservation>(x);
    test::sql("UPDATE chats SET pockets = chargeonce_pockets_with(pockets, "
              "'{\"balance\": 0}') "
              "WHERE chat_id = "
              + std::to_string(chats[3]));
    auto committed = db.apply(commits);
    std::vector<pockets> expected{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {0, 0, 0}};
    for (size_t i = 0; i < chats.size(); ++i) {
      INFO("chat ", i);
      const auto& first = value_of<receipt>(committed[i]);
      CHECK(first.reservation == commits[i].reservation);
      CHECK(first.chat == chats[i]);
      CHECK(first.kind == kinds[i]);
      CHECK(first.charged == expected[i]);
      auto again =
        db.commit(chats[i], commits[i].reservation); // read from the ledger
      REQUIRE(again);
      CHECK(again->charged == first.charged);
      CHECK(again->committed_at == first.committed_at);
      auto where = " FROM ledger WHERE reservation_id = "
                   + std::to_string(commits[i].reservation);
      CHECK(test::sql_int("SELECT chargeonce_amount(charged, 'daily_messages')"
                          " + 10 * chargeonce_amount(charged, 'daily_images')"
                          " + 100 * chargeonce_amount(charged, 'balance')"
                          + where)
            == first.charged.get(pocket::daily_messages)
                 + 10 * first.charged.get(pocket::daily_images)
                 + 100 * first.charged.get(pocket::balance));
      CHECK(test::sql_int("SELECT count(*)" + where) == 1);
    }
  }

  TEST_CASE("8 connections applying shuffled batches over the same 50 chats: "
            "no deadlock, one reservation per chat, the rest busy") {
    store setup{test::store_options()};
    constexpr int chats = 50;
    constexpr int contenders = 8;
    for (int round = 0; round < 10; ++round) {
      std::vector<chat_id> ids;
      for (int i = 0; i < chats; ++i)
        ids.push_back(make_chat(setup, {1, 0, 0}));
      std::vector<std::future<std::vector<batch_result>>> results;
      for (int c = 0; c < contenders; ++c)
        results.push_back(std::async(std::launch::async, [&, c] {
          store db{test::store_options()};
          auto mine = ids;
          std::shuffle(mine.begin(), mine.end(),
                       std::mt19937{static_cast<unsigned>(round * 31 + c)});
          std::vector<operation> ops;
          for (auto chat : mine)
            ops.push_back(reserve_op(chat, kind::text));
          return db.apply(ops);
        }));
      int won = 0;
      int busy = 0;
      int other = 0;
      for (auto& f : results)
        for (auto& x : f.get()) {
          auto err = error_of(x);
          if (!err)
            ++won;
          else if (err == ec::busy)
            ++busy;
          else
            ++other;
        }
      CHECK(won == chats);
      CHECK(busy == chats * (contenders - 1));
      CHECK(other == 0);
      for (auto chat : ids)
        CHECK(count("reservations", chat) == 1);
    }
  }

  TEST_CASE("a batch stuck behind one chat's lock answers the others; only "
            "that one is storage_unavailable") {
    auto opts = test::store_options();
    opts.statement_timeout = std::chrono::milliseconds{300};
    store db{opts};
    auto locked = make_chat(db, {1, 0, 0});
    auto free_a = make_chat(db, {1, 0, 0});
    auto free_b = make_chat(db, {1, 0, 0});
    pqxx::connection blocker_conn{test::dsn()};
    pqxx::work blocker{blocker_conn};
    blocker.exec("SELECT 1 FROM chats WHERE chat_id = " + std::to_string(locked)
                 + " FOR UPDATE");
    auto out =
      db.apply({reserve_op(free_a, kind::text), reserve_op(locked, kind::text),
                reserve_op(free_b, kind::text)});
    blocker.abort();
    CHECK_FALSE(error_of(out[0]));
    CHECK(error_of(out[1]) == ec::storage_unavailable);
    CHECK_FALSE(error_of(out[2]));
    CHECK(count("reservations", locked) == 0); // nothing half-written
    CHECK(count("reservations", free_a) == 1);
    CHECK(count("reservations", free_b) == 1);
  }

  TEST_CASE("a dead database fails every operation of the batch with "
            "storage_unavailable, never busy") {
    store db{{"host=/nonexistent-socket-dir dbname=none connect_timeout=2"}};
    auto out =
      db.apply({reserve_op(1, kind::text), op(operation_type::commit, 2, 7),
                op(operation_type::status, 3)});
    for (const auto& x : out)
      CHECK(error_of(x) == ec::storage_unavailable);
  }

  TEST_CASE("a backend terminated mid-batch: every operation is "
            "storage_unavailable and nothing is half-written") {
    store db{test::store_options()};
    for (int round = 0; round < 3; ++round) {
      auto locked = make_chat(db, {1, 0, 0});
      auto other = make_chat(db, {1, 0, 0});
      auto pid = db.backend_pid();
      REQUIRE(pid > 0);
      pqxx::connection blocker_conn{test::dsn()};
      pqxx::work blocker{blocker_conn};
      blocker.exec("SELECT 1 FROM chats WHERE chat_id = "
                   + std::to_string(locked) + " FOR UPDATE");
      // `other` sorts first or last: either way it is in the same statement.
      auto pending = std::async(std::launch::async, [&] {
        return db.apply(
          {reserve_op(other, kind::text), reserve_op(locked, kind::text)});
      });
      auto waiting = test::await_lock_wait("pid = " + std::to_string(pid));
      MESSAGE("the backend waited for the row lock after " << waiting.ms()
                                                           << " ms");
      REQUIRE(waiting);
      test::sql("SELECT pg_terminate_backend(" + std::to_string(pid) + ")");
      for (const auto& x : pending.get())
        CHECK(error_of(x) == ec::storage_unavailable);
      blocker.abort();
      CHECK(count("reservations", other) == 0);
      CHECK(count("reservations", locked) == 0);
      REQUIRE(db.status(other)); // reconnects
    }
  }
}

namespace {

/// Twin chats: `batched` goes through one set-based batch per round,
/// `single` through chargeonce_apply_one, one operation at a time. Both
/// started equal and got the same operations.
struct twin {
  chat_id batched = 0;
  chat_id single = 0;
  reservation_id batched_id = 0; ///< last reservation each side was given
  reservation_id single_id = 0;
  /// The grants each side's top-ups made, in the same order.
  std::vector<int64_t> batched_grants;
  std::vector<int64_t> single_grants;
};

/// What must agree between the two: the error code, and the amounts and
/// states the value carries (ids and timestamps differ by construction).
std::string summary(const batch_result& x) {
  if (auto err = std::get_if<caf::error>(&x))
    return std::string{"error "} + error_name(*err);
  // Every pocket that holds something, by name (a pocket not listed holds
  // 0, whichever way the store wrote it).
  auto held = [](const pockets& p) {
    std::string out = "{";
    for (const auto& [name, amount] : p.items())
      if (amount != 0)
        out += name + ":" + std::to_string(amount) + " ";
    return out + "}";
  };
  if (auto r = std::get_if<reservation>(&x))
    return std::string{"reservation "} + to_string(r->kind) + " "
           + to_string(r->status) + " " + r->queue + " " + held(r->held) + " "
           + r->request_id + (r->lease_expires_at ? " leased" : "") + " slot "
           + std::to_string(r->slot) + (r->ended_at ? " ended" : "") + " units "
           + std::to_string(r->units) + " " + held(r->held_units)
           + (r->cancel_requested ? " cancel_requested" : "") + " window "
           + std::to_string(r->window);
  if (auto c = std::get_if<receipt>(&x))
    return std::string{"receipt "} + to_string(c->kind) + " " + held(c->charged)
           + " units " + std::to_string(c->units) + " released "
           + held(c->released) + " window " + std::to_string(c->window);
  const auto& s = std::get<chat_status>(x);
  // The grants in spending order, each by its terms and amounts.
  std::string grants;
  for (const auto& g : s.grants)
    grants += " " + g.source + "/" + std::to_string(g.priority) + "/"
              + std::to_string(g.credits) + "/" + std::to_string(g.left) + "/"
              + std::to_string(g.held) + (g.expires_at ? "/expires" : "")
              + (g.expired ? "/expired" : "") + (g.voided ? "/voided" : "");
  return "status " + held(s.amounts) + (s.active ? " active" : "")
         + (s.premium ? " premium" : "") + (s.blocked ? " blocked" : "")
         + (s.banned ? " banned" : "") + " jobs "
         + std::to_string(s.reservations.size()) + " of "
         + std::to_string(s.max_active_jobs) + " held " + held(s.held)
         + " window " + std::to_string(s.window) + " grants" + grants;
}

/// Each grant's amounts, in the order the top-ups made them: what both
/// sides' grants must agree on at the end.
std::string grant_amounts(const std::vector<int64_t>& grants) {
  std::string out;
  for (auto id : grants)
    out += test::sql("SELECT concat_ws('/', credits, charged, expired, voided, "
                     "expired_at IS NOT NULL, voided_at IS NOT NULL) FROM "
                     "grants WHERE grant_id = "
                     + std::to_string(id))
           + " ";
  return out;
}

template <class T>
batch_result as_result(caf::expected<T> x) {
  if (!x)
    return x.error();
  return std::move(*x);
}

/// The answer to `op` alone (with its own reservation id): a batch of one,
/// which chargeonce_apply_batch hands to chargeonce_apply_one.
batch_result apply_single(store& db, const operation& op) {
  switch (op.type) {
  case operation_type::reserve:
    return as_result(db.reserve(op.chat, op.kind, op.request_id, op.units));
  case operation_type::start:
    return as_result(db.start(op.chat, op.reservation));
  case operation_type::heartbeat:
    return as_result(db.heartbeat(op.chat, op.reservation));
  case operation_type::commit:
    return as_result(db.commit(op.chat, op.reservation, op.units));
  case operation_type::fail:
    return as_result(db.fail(op.chat, op.reservation));
  case operation_type::cancel:
    return as_result(db.cancel(op.chat, op.reservation, op.request_id));
  case operation_type::status:
    return as_result(db.status(op.chat));
  default:
    break;
  }
  return caf::make_error(ec::invalid_argument, "unknown operation");
}

/// The id of a reservation answer, else `fallback`.
reservation_id id_of(const batch_result& x, reservation_id fallback) {
  if (auto r = std::get_if<reservation>(&x))
    return r->id;
  return fallback;
}

/// The twins of `chats` chats under `products`, `rounds` random rounds of
/// one batch each: every answer of the set-based batch must be the one
/// chargeonce_apply_one gives the operation alone, and so must every chat
/// and its ledger at the end.
void differential(const catalog& products, int chats, int rounds,
                  uint32_t seed) {
  auto batched_opts = test::store_options();
  batched_opts.products = products;
  store batched{batched_opts};
  store single{batched_opts};
  std::mt19937 rng{seed};
  std::mt19937 grant_rng{seed ^ 0x9e3779b9U};
  // Up to six times the highest price: empty pockets, pockets that pay
  // once, pockets that pay for several units.
  int32_t most = 0;
  for (const auto& k : products.kinds)
    for (const auto& source : k.pay_from)
      most = std::max(most, 6 * source.price);
  std::vector<twin> twins(chats);
  for (auto& t : twins) {
    pockets initial;
    for (const auto& p : products.pockets)
      initial.set(p.name, static_cast<int32_t>(rng() % (most + 1)));
    t.batched = make_chat(batched, initial);
    t.single = make_chat(single, initial);
    auto roll = rng() % 10;
    if (roll == 0) {
      auto until = caf::make_timestamp() + std::chrono::hours{1};
      REQUIRE(batched.set_premium(t.batched, until));
      REQUIRE(single.set_premium(t.single, until));
    } else if (roll == 1 || roll == 2) {
      flags_update f;
      (roll == 1 ? f.blocked : f.banned) = true;
      REQUIRE(batched.set_flags(t.batched, f));
      REQUIRE(single.set_flags(t.single, f));
    }
    // Parallel jobs: a third of the chats run 2 or 4 at once.
    if (auto limit = std::array<int32_t, 6>{1, 1, 1, 1, 2, 4}[rng() % 6];
        limit > 1) {
      REQUIRE(batched.set_limits(t.batched, limit));
      REQUIRE(single.set_limits(t.single, limit));
    }
    // A third of the chats have grants of their own: priorities, sources
    // and expiries that decide which pays first (their own generator, so
    // that the rounds draw what they drew before grants).
    if (grant_rng() % 3 == 0)
      for (uint32_t g = 0, n = 1 + grant_rng() % 3; g < n; ++g) {
        grant_terms terms;
        terms.priority = std::array<int32_t, 3>{20, 100, 100}[grant_rng() % 3];
        terms.source = std::array<const char*, 3>{"purchase", "promo",
                                                  "admin"}[grant_rng() % 3];
        if (grant_rng() % 2 == 0)
          terms.expires_in_ms =
            static_cast<int64_t>(1 + grant_rng() % 48) * 3600 * 1000;
        auto credits = static_cast<int64_t>(1 + grant_rng() % (most + 1));
        auto pay = "differential-" + std::to_string(g) + "-";
        auto b = batched.top_up(t.batched, credits,
                                pay + std::to_string(t.batched), terms);
        auto s = single.top_up(t.single, credits,
                               pay + std::to_string(t.single), terms);
        REQUIRE(b);
        REQUIRE(s);
        t.batched_grants.push_back(b->grant_id);
        t.single_grants.push_back(s->grant_id);
      }
  }
  std::map<std::string, int> seen; // outcome kinds, to show the coverage
  for (int round = 0; round < rounds; ++round) {
    std::vector<operation> ops;
    std::vector<operation> twin_ops;
    for (auto& t : twins) {
      auto pick = rng() % 12;
      // A known reservation most of the time, else one that is not theirs.
      bool bogus = rng() % 8 == 0;
      auto b_id = bogus ? t.single_id + 1000000000 : t.batched_id;
      auto s_id = bogus ? t.single_id + 1000000000 : t.single_id;
      if (b_id == 0 || s_id == 0)
        b_id = s_id = 999999999999;
      operation a;
      // No request id, one used again and again (a double tap, later a
      // retry of an ended job), a fresh one, or one a client made up.
      std::string request_id = std::array<std::string, 4>{
        "", "tap", "job-" + std::to_string(round),
        "auto:" + std::to_string(round % 3)}[rng() % 4];
      // Units not given, 1 to 5, or more than allowed (reserve) or held
      // (commit).
      auto units =
        std::array<int32_t, 8>{0, 0, 1, 2, 3, 5, 1000001, 7}[rng() % 8];
      if (pick < 3) {
        a = reserve_op(t.batched,
                       kind{products.kinds[rng() % products.kinds.size()].name},
                       request_id);
        a.units = units;
      } else if (pick < 6) {
        a = op(operation_type::start, t.batched, b_id);
      } else if (pick < 9) {
        a = op(operation_type::commit, t.batched, b_id);
        a.units = units == 1000001 ? 4 : units;
      } else if (pick == 10 && rng() % 2 == 0) {
        a = op(operation_type::cancel, t.batched); // the chat's only job
      } else if (pick == 11 && rng() % 2 == 0) {
        a = op(operation_type::heartbeat, t.batched, b_id);
      } else {
        a = op(pick == 9    ? operation_type::fail
               : pick == 10 ? operation_type::cancel
                            : operation_type::status,
               t.batched, b_id);
      }
      auto b = a;
      b.chat = t.single;
      b.reservation = a.reservation == 0 ? 0 : s_id;
      ops.push_back(a);
      twin_ops.push_back(b);
    }
    // An admin script emptying some chats between reserve and commit:
    // commits must clamp what they charge at what is left.
    std::string emptied;
    for (const auto& t : twins)
      // Not chats with grants of their own: their balance is their grants'
      // (an empty pocket over grants with credits is no state a writer
      // makes).
      if (rng() % 10 == 0 && t.batched_grants.empty())
        emptied += (emptied.empty() ? "" : ",") + std::to_string(t.batched)
                   + "," + std::to_string(t.single);
    if (!emptied.empty())
      test::sql("UPDATE chats SET pockets = '{}' WHERE chat_id IN (" + emptied
                + ")");
    // A user update after the window's turn refills some chats: from then
    // on their open jobs hold on a past window.
    for (const auto& t : twins)
      if (rng() % 8 == 0) {
        test::sql("UPDATE chats SET window_started_at = now() - interval "
                  "'30 hours' WHERE chat_id IN ("
                  + std::to_string(t.batched) + ", " + std::to_string(t.single)
                  + ")");
        REQUIRE(batched.touch(t.batched));
        REQUIRE(single.touch(t.single));
      }
    // Some grants' time comes (nothing has written it yet: the next
    // writer of the chat must), some are voided (a refund).
    for (const auto& t : twins) {
      if (t.batched_grants.empty())
        continue;
      auto roll = grant_rng() % 16;
      auto i = grant_rng() % t.batched_grants.size();
      if (roll == 0) {
        test::sql("UPDATE grants SET expires_at = now() - interval '1 "
                  "second' WHERE expired_at IS NULL AND voided_at IS NULL AND "
                  "grant_id IN ("
                  + std::to_string(t.batched_grants[i]) + ", "
                  + std::to_string(t.single_grants[i]) + ")");
        test::sql("UPDATE chats SET next_expiry = now() - interval '1 second' "
                  "WHERE chat_id IN ("
                  + std::to_string(t.batched) + ", " + std::to_string(t.single)
                  + ")");
        ++seen["grant expired"];
      } else if (roll == 1) {
        auto b = batched.void_grant(t.batched, t.batched_grants[i], "");
        auto s = single.void_grant(t.single, t.single_grants[i], "");
        REQUIRE(b);
        REQUIRE(s);
        CHECK(b->left == s->left);
        CHECK(b->held == s->held);
        ++seen["grant voided"];
      }
    }
    auto out = batched.apply(ops);
    REQUIRE(out.size() == ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      auto theirs = apply_single(single, twin_ops[i]);
      INFO("round ", round, " operation ", std::string{to_string(ops[i].type)});
      CHECK(summary(out[i]) == summary(theirs));
      if (auto err = std::get_if<caf::error>(&out[i])) {
        ec code = ec::none;
        CHECK(from_string(error_name(*err), code));
        CHECK_MESSAGE(may_answer(ops[i].type, code),
                      "not among the operation's refusals: ", summary(out[i]));
      }
      ++seen[std::string{to_string(ops[i].type)} + " -> "
             + summary(out[i]).substr(0, summary(out[i]).find(' ', 6))];
      if (auto r = std::get_if<reservation>(&out[i]); r && r->cancel_requested)
        ++seen[std::string{to_string(ops[i].type)} + " -> cancel_requested"];
      twins[i].batched_id = id_of(out[i], twins[i].batched_id);
      twins[i].single_id = id_of(theirs, twins[i].single_id);
    }
  }
  for (const auto& t : twins) {
    CHECK(summary(batched.status(t.batched).value())
          == summary(single.status(t.single).value()));
    CHECK(count("ledger", t.batched) == count("ledger", t.single));
    CHECK(grant_amounts(t.batched_grants) == grant_amounts(t.single_grants));
  }
  for (const auto& [what, n] : seen)
    MESSAGE(what, ": ", n);
  // The rounds must have reached the set-based paths and the refusals,
  // and commits of jobs a refill overtook, and grants that expired or were
  // voided under open holds.
  CHECK(seen.size() >= 15);
  CHECK(seen["grant expired"] > 0);
  CHECK(seen["grant voided"] > 0);
  std::string batched_chats;
  for (const auto& t : twins)
    batched_chats +=
      (batched_chats.empty() ? "" : ", ") + std::to_string(t.batched);
  auto past = test::sql_int(
    "SELECT count(*) FROM ledger l WHERE l.entry = 'charge' AND l.chat_id IN ("
    + batched_chats
    + ") AND EXISTS (SELECT 1 FROM ledger f WHERE f.chat_id = l.chat_id AND "
      "f.entry = 'refill' AND f.id < l.id AND f.window_number > "
      "l.window_number)");
  MESSAGE("commits of a hold a refill overtook: ", past);
  CHECK(past > 0);
  // And, where a kind asks its worker to stop, a cancel of a started job.
  if (std::any_of(products.kinds.begin(), products.kinds.end(),
                  [](const kind_spec& k) {
                    return k.cancel_after_start == cancel_policy::request;
                  }))
    CHECK(seen["cancel -> cancel_requested"] > 0);
}

/// Four kinds and five pockets, several with prices above 1: voice paid
/// from daily voice, then daily minutes at 2, then 3 credits; video from
/// credits only, at 5. A cancel of a started image or voice job asks its
/// worker to stop; text and video refuse it.
catalog four_kinds() {
  catalog out;
  auto problem = parse_catalog(R"({
    "pockets": {
      "daily_messages": {"daily": {"free": 10, "premium": 10}},
      "daily_images": {"daily": {"free": 3, "premium": 10}},
      "daily_voice": {"daily": {"free": 2, "premium": 5}},
      "daily_minutes": {"daily": {"free": 4, "premium": 8}},
      "balance": {"purchased": true}
    },
    "kinds": {
      "text": {"pay_from": [{"pocket": "daily_messages"}], "premium_free": true},
      "image": {"pay_from": [{"pocket": "daily_images"},
                             {"pocket": "balance", "price": 2}],
                "cancel_after_start": "request"},
      "voice": {"pay_from": [{"pocket": "daily_voice"},
                             {"pocket": "daily_minutes", "price": 2},
                             {"pocket": "balance", "price": 3}],
                "cancel_after_start": "request"},
      "video": {"pay_from": [{"pocket": "balance", "price": 5}],
                "premium_free": true, "queue": "video_render"}
    }
  })",
                               out);
  REQUIRE_MESSAGE(problem.empty(), problem);
  return out;
}

} // namespace

TEST_SUITE("batch") {
  TEST_CASE("a set-based batch decides every operation as "
            "chargeonce_apply_one decides it alone (the built-in catalog; 60 "
            "chats with limits of 1 to 4 jobs, 40 random rounds)") {
    differential(builtin_catalog({}), 60, 40, 20261130);
  }

  TEST_CASE("the same with a catalog of four kinds and five pockets, prices "
            "of 1 to 5, and both cancel-after-start policies") {
    differential(four_kinds(), 60, 40, 20261203);
  }
  TEST_CASE("a batch pays each job by the window it was reserved in: holds "
            "of past windows do not count against the new one, and their "
            "commits take nothing of it") {
    store db{test::store_options()};
    std::array<chat_id, 2> chats{};
    std::array<reservation_id, 2> old_jobs{};
    for (size_t i = 0; i < chats.size(); ++i) {
      chats[i] = make_chat(db, {10, 3, 0});
      REQUIRE(db.touch(chats[i])); // opens window 0
      REQUIRE(db.set_limits(chats[i], 2));
      auto r = db.reserve(chats[i], kind::image, "old");
      REQUIRE(r);
      REQUIRE(db.start(chats[i], r->id));
      old_jobs[i] = r->id;
      test::sql("UPDATE chats SET window_started_at = now() - interval "
                "'30 hours' WHERE chat_id = "
                + std::to_string(chats[i]));
      auto refilled = db.touch(chats[i]);
      REQUIRE(refilled);
      REQUIRE(refilled->window == 1);
      // One image left in the new window: the old hold must not take it.
      test::sql("UPDATE chats SET pockets = chargeonce_pockets_with(pockets, "
                "'{\"daily_images\": 1}') WHERE chat_id = "
                + std::to_string(chats[i]));
    }
    auto reserved = db.apply({reserve_op(chats[0], kind::image, "new"),
                              reserve_op(chats[1], kind::image, "new")});
    std::array<reservation_id, 2> new_jobs{};
    for (size_t i = 0; i < chats.size(); ++i) {
      const auto& r = value_of<reservation>(reserved[i]);
      CHECK(r.held == pockets{0, 1, 0});
      CHECK(r.window == 1);
      new_jobs[i] = r.id;
      REQUIRE(db.start(chats[i], r.id));
    }
    auto old_commits =
      db.apply({op(operation_type::commit, chats[0], old_jobs[0]),
                op(operation_type::commit, chats[1], old_jobs[1])});
    for (size_t i = 0; i < chats.size(); ++i) {
      const auto& x = value_of<receipt>(old_commits[i]);
      CHECK(x.charged == pockets{0, 1, 0});
      CHECK(x.window == 0);
      CHECK(db.status(chats[i])->amounts.get(pocket::daily_images) == 1);
    }
    auto new_commits =
      db.apply({op(operation_type::commit, chats[0], new_jobs[0]),
                op(operation_type::commit, chats[1], new_jobs[1])});
    for (size_t i = 0; i < chats.size(); ++i) {
      const auto& x = value_of<receipt>(new_commits[i]);
      CHECK(x.charged == pockets{0, 1, 0});
      CHECK(x.window == 1);
      CHECK(db.status(chats[i])->amounts.get(pocket::daily_images) == 0);
    }
  }
}
