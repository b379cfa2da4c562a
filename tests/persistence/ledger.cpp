// SPDX-License-Identifier: Apache-2.0
// The ledger of every pocket change against a real Postgres: each change
// (charge, top-up, refill, admin) writes one row with the pockets after it,
// so that a chat's balance replays from its ledger alone, including under
// concurrent changes from many connections. Runs on both stores.
#include "persistence/store.hpp"
#include "protocol/errors.hpp"
#include "tests/support/test_db.hpp"
#include "tools/common/audit.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

using namespace chargeonce;
using namespace std::chrono_literals;
using persistence::store;

namespace {

std::string where(chat_id chat) {
  return " WHERE chat_id = " + std::to_string(chat);
}

/// A chat's ledger and pockets, read as the chaos auditor reads them.
struct chat_ledger {
  std::vector<persistence::audit_ledger_row> rows;
  pockets now;

  /// "entry/detail" of each row in order, e.g. "refill/window,charge".
  std::string causes() const {
    std::string out;
    for (const auto& l : rows)
      out += (out.empty() ? "" : ",") + l.entry
             + (l.detail.empty() ? "" : "/" + l.detail);
    return out;
  }

  /// Empty when the rows chain from nothing to the pockets now: each row
  /// starts (its pockets after, less its change) where the one before it
  /// ended. Otherwise what breaks the chain first.
  std::string broken() const {
    pockets ended;
    for (const auto& l : rows) {
      if (!l.has_after)
        return "row " + std::to_string(l.id) + " records no pockets";
      auto before = l.after;
      before -= l.change();
      if (before != ended)
        return "row " + std::to_string(l.id) + " (" + l.entry
               + ") does not start where the row before it ended";
      ended = l.after;
    }
    if (ended != now)
      return "the pockets are not where the last row ended";
    return "";
  }
};

chat_ledger ledger_of(chat_id chat) {
  auto snap = persistence::read_audit_snapshot(test::dsn(), chat - 1, 1);
  REQUIRE(snap);
  REQUIRE(snap->chats.size() == 1);
  return {snap->ledger, snap->chats[0].available};
}

/// The window opened `hours` ago.
void window_opened_ago(chat_id chat, int hours) {
  test::sql("UPDATE chats SET window_started_at = now() - interval '"
            + std::to_string(hours) + " hours'" + where(chat));
}

struct ledger_fixture {
  store db{test::store_options()};

  reservation started(chat_id chat, const kind& k, const std::string& request,
                      int32_t units = 0) {
    auto r = db.reserve(chat, k, request, units);
    REQUIRE(r);
    auto s = db.start(chat, r->id);
    REQUIRE(s);
    return *s;
  }

  /// Every chat the reactivation scan refills now.
  void reactivate_all() {
    reactivation_cursor after;
    for (;;) {
      auto page = db.reactivation_chunk(after, 100);
      REQUIRE(page);
      if (!page->more)
        return;
      after = page->next;
    }
  }
};

} // namespace

TEST_SUITE("ledger") {

  TEST_CASE_FIXTURE(ledger_fixture,
                    "every change of a chat's pockets writes one row with its "
                    "cause and the pockets after it, and the rows chain") {
    auto chat = test::fresh_chat();
    REQUIRE(db.touch(chat)); // a new chat: its first window
    REQUIRE(db.touch(chat)); // nothing changes: no row
    REQUIRE(db.top_up(chat, 4, "ledger-" + std::to_string(chat)));
    auto job = started(chat, kind::image, "a");
    REQUIRE(db.commit(chat, job.id));
    REQUIRE(db.set_premium(chat, std::chrono::system_clock::now() + 24h));
    window_opened_ago(chat, 25);
    REQUIRE(db.touch(chat)); // the premium quotas
    auto second = started(chat, kind::image, "b");
    REQUIRE(db.commit(chat, second.id));
    test::sql("UPDATE chats SET started = true, last_activity_at = now() - "
              "interval '25 hours'"
              + where(chat));
    reactivate_all();
    auto l = ledger_of(chat);
    CHECK(l.causes()
          == "refill/window,top_up,charge,admin/set_premium,refill/window,"
             "charge,refill/reactivation");
    CHECK(l.broken() == "");
    // What each row says it changed.
    REQUIRE(l.rows.size() == 7);
    CHECK(l.rows[0].change() == pockets{10, 3, 0});
    CHECK(l.rows[1].change() == pockets{0, 0, 4});
    CHECK(l.rows[2].change() == pockets{0, -1, 0});
    CHECK(l.rows[3].change() == pockets{});
    CHECK(l.rows[4].change() == pockets{0, 8, 0});
    CHECK(l.rows[6].change() == pockets{0, 1, 0});
    CHECK(l.rows[6].after == pockets{10, 10, 4});
    // Created by an admin: the ledger opens with what was asked for.
    auto created = test::fresh_chat();
    chat_spec spec;
    spec.chat = created;
    spec.initial = {0, 1, 7};
    REQUIRE(db.create_chat(spec));
    auto c = ledger_of(created);
    CHECK(c.causes() == "admin/create_chat");
    CHECK(c.rows[0].after == pockets{0, 1, 7});
    CHECK(c.broken() == "");
  }

  TEST_CASE_FIXTURE(ledger_fixture,
                    "a refill or a reactivation that leaves every pocket as "
                    "it was writes no row") {
    auto chat = test::fresh_chat();
    REQUIRE(db.touch(chat));
    window_opened_ago(chat, 25);
    REQUIRE(db.touch(chat)); // still at the quota
    test::sql("UPDATE chats SET started = true, last_activity_at = now() - "
              "interval '25 hours'"
              + where(chat));
    reactivate_all();
    CHECK(
      test::sql("SELECT reactivated_at IS NOT NULL FROM chats" + where(chat))
      == "t");
    auto l = ledger_of(chat);
    CHECK(l.causes() == "refill/window");
    CHECK(l.broken() == "");
  }

  TEST_CASE_FIXTURE(ledger_fixture,
                    "commits by every path record the pockets after them: a "
                    "batch, a second commit of one chat in a batch, fewer "
                    "units, a resolve, a clamp") {
    auto chat = test::fresh_chat();
    chat_spec spec;
    spec.chat = chat;
    spec.initial = {5, 2, 20};
    spec.max_active_jobs = 4;
    REQUIRE(db.create_chat(spec));
    auto a = started(chat, kind::image, "a", 3);
    auto b = started(chat, kind::text, "b");
    // Two commits of one chat in one batch: the second is decided on its
    // own, by the per-operation function (chargeonce_apply_one).
    auto out =
      db.apply({{operation_type::commit, chat, a.id, kind::image, "", 2},
                {operation_type::commit, chat, b.id, kind::text, "", 0}});
    REQUIRE(out.size() == 2);
    CHECK(std::holds_alternative<receipt>(out[0]));
    CHECK(std::holds_alternative<receipt>(out[1]));
    auto u = started(chat, kind::image, "u");
    REQUIRE(db.uncertain(chat, u.id, "provider-" + std::to_string(u.id)));
    REQUIRE(db.resolve(chat, u.id, "succeeded", 0));
    // A pocket an admin emptied under a hold: the charge stops at zero.
    auto d = started(chat, kind::image, "d");
    test::sql("WITH b AS (SELECT pockets FROM chats" + where(chat)
              + "), a AS (UPDATE chats SET pockets = "
                "chargeonce_pockets_with(pockets, '{\"balance\": 0}')"
              + where(chat)
              + " RETURNING pockets) INSERT INTO ledger (entry, detail, "
                "chat_id, changed, pockets) SELECT 'admin', 'test', "
              + std::to_string(chat)
              + ", chargeonce_pockets_change(b.pockets, a.pockets), a.pockets "
                "FROM a, b");
    auto clamped = db.commit(chat, d.id);
    REQUIRE(clamped);
    CHECK(clamped->charged == pockets{});
    auto l = ledger_of(chat);
    CHECK(l.causes()
          == "admin/create_chat,charge,charge,charge,admin/test,charge");
    CHECK(l.broken() == "");
    CHECK(l.now == pockets{4, 0, 0});
  }

  TEST_CASE_FIXTURE(ledger_fixture,
                    "the chain check sees a change without its row and a row "
                    "that does not start where the one before it ended") {
    auto chat = test::fresh_chat();
    REQUIRE(db.touch(chat));
    REQUIRE(db.top_up(chat, 2, "ledger-" + std::to_string(chat)));
    REQUIRE(ledger_of(chat).broken() == "");
    test::sql("UPDATE chats SET pockets = chargeonce_pockets_with(pockets, "
              "'{\"balance\": 3}')"
              + where(chat));
    CHECK(ledger_of(chat).broken()
          == "the pockets are not where the last row ended");
    test::sql("UPDATE ledger SET pockets = chargeonce_pockets_with(pockets, "
              "'{\"balance\": 3}')"
              + where(chat) + " AND entry = 'top_up'");
    CHECK(ledger_of(chat).broken().find("(top_up) does not start where")
          != std::string::npos);
  }

  TEST_CASE("16 connections racing top-ups, refills, admin changes and "
            "commits of one chat leave a chain that replays to its pockets") {
    auto chat = test::fresh_chat();
    {
      store setup{test::store_options()};
      chat_spec spec;
      spec.chat = chat;
      spec.initial = {10, 3, 50};
      spec.max_active_jobs = 8;
      REQUIRE(setup.create_chat(spec));
    }
    constexpr int threads = 16;
    constexpr int rounds = 25;
    std::atomic<int> unexpected{0};
    std::atomic<int> charged{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        store db{test::store_options()};
        for (int i = 0; i < rounds; ++i) {
          auto request = std::to_string(t) + "-" + std::to_string(i);
          switch ((t + i) % 4) {
          case 0:
            if (!db.top_up(chat, 1,
                           "race-" + std::to_string(chat) + "-" + request))
              ++unexpected;
            break;
          case 1:
            // The window is due again: this touch refills, or one beside.
            test::sql("UPDATE chats SET window_started_at = now() - "
                      "interval '25 hours'"
                      + where(chat));
            if (!db.touch(chat))
              ++unexpected;
            break;
          case 2:
            if (!db.set_premium(chat, std::chrono::system_clock::now()
                                        + (i % 2 == 0 ? 1h : -1h)))
              ++unexpected;
            break;
          default:
            auto r =
              db.reserve(chat, i % 2 == 0 ? kind::image : kind::text, request);
            if (!r) {
              if (r.error() != ec::busy && r.error() != ec::insufficient_images
                  && r.error() != ec::insufficient_messages)
                ++unexpected;
              break;
            }
            if (!db.start(chat, r->id) || !db.commit(chat, r->id))
              ++unexpected;
            else
              ++charged;
          }
        }
      });
    for (auto& x : pool)
      x.join();
    CHECK(unexpected == 0);
    auto l = ledger_of(chat);
    MESSAGE(l.rows.size() << " ledger rows, " << charged.load() << " charges");
    CHECK(charged > 0);
    CHECK(test::sql_int("SELECT count(*) FROM ledger" + where(chat)
                        + " AND entry = 'charge'")
          == charged);
    CHECK(test::sql_int("SELECT count(*) FROM ledger" + where(chat)
                        + " AND entry = 'refill'")
          > 0);
    CHECK(l.broken() == "");
  }

} // TEST_SUITE
