// SPDX-License-Identifier: Apache-2.0
// The support view against a real Postgres: a chat's history (its ledger
// rows and its reservations, by how they ended, in one timeline, newest
// first, in keyset pages) and explain; a chat with 100,000 ledger rows and
// 100,000 ended jobs answers a page from its indexes.
#include "persistence/history_sql.hpp"
#include "persistence/store.hpp"
#include "protocol/errors.hpp"
#include "protocol/time.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

using namespace chargeonce;
using namespace std::chrono_literals;
using persistence::store;

namespace {

std::string where(chat_id chat) {
  return " WHERE chat_id = " + std::to_string(chat);
}

/// "cause/status/detail" of each entry, e.g. "reservation/failed/".
std::string timeline(const history_page& page) {
  std::string out;
  for (const auto& x : page.entries) {
    out += out.empty() ? "" : ",";
    out += x.cause;
    if (x.cause == "reservation")
      out += "/" + x.status;
    if (!x.detail.empty())
      out += "/" + x.detail;
  }
  return out;
}

struct history_fixture {
  store db{test::store_options()};

  chat_id make_chat(pockets initial, int32_t jobs = 8) {
    auto chat = test::fresh_chat();
    chat_spec spec;
    spec.chat = chat;
    spec.initial = initial;
    spec.max_active_jobs = jobs;
    REQUIRE(db.create_chat(spec));
    return chat;
  }

  reservation started(chat_id chat, const std::string& request) {
    auto r = db.reserve(chat, kind::image, request, 0);
    REQUIRE(r);
    auto s = db.start(chat, r->id);
    REQUIRE(s);
    return *s;
  }

  /// A worker that died: its lease ran out, and the sweep releases it.
  void swept(chat_id chat, reservation_id id) {
    test::sql("UPDATE reservations SET lease_expires_at = now() - interval "
              "'1 minute' WHERE id = "
              + std::to_string(id));
    REQUIRE(db.release(chat, id));
  }

  /// Every page of `limit` from the newest, concatenated.
  std::vector<history_entry> all_pages(chat_id chat, uint32_t limit,
                                       int& pages) {
    std::vector<history_entry> out;
    int64_t before = 0;
    pages = 0;
    do {
      auto page = db.history(chat, before, limit);
      REQUIRE(page);
      CHECK_FALSE(page->truncated);
      ++pages;
      out.insert(out.end(), page->entries.begin(), page->entries.end());
      before = page->next_before;
    } while (before != 0);
    return out;
  }
};

/// The rows each scan of a large table read (found plus filtered out,
/// over all its loops), by table, from EXPLAIN (ANALYZE, FORMAT JSON); a
/// sequential scan of one counts under "Seq Scan" too.
void add_rows_read(const nlohmann::json& node,
                   std::map<std::string, double>& out) {
  if (node.is_array()) {
    for (const auto& x : node)
      add_rows_read(x, out);
    return;
  }
  if (!node.is_object())
    return;
  auto table = node.value("Relation Name", "");
  if (table == "ledger" || table == "ended_reservations"
      || table == "released_reservations") {
    auto rows = node.value("Actual Rows", 0.0)
                + node.value("Rows Removed by Filter", 0.0)
                + node.value("Rows Removed by Index Recheck", 0.0);
    out[table] += rows * node.value("Actual Loops", 1.0);
    if (node.value("Node Type", "") == "Seq Scan")
      out["Seq Scan"] += 1;
  }
  for (const auto& [name, child] : node.items())
    if (child.is_structured())
      add_rows_read(child, out);
}

std::map<std::string, double> rows_read(const std::string& plan) {
  std::map<std::string, double> out;
  add_rows_read(nlohmann::json::parse(plan), out);
  return out;
}

} // namespace

TEST_SUITE("history") {

  TEST_CASE_FIXTURE(history_fixture,
                    "the history shows every pocket change with its cause and "
                    "the pockets after it, and every reservation by how it "
                    "ended, newest first") {
    auto chat = make_chat({0, 0, 10});
    auto payment = "history-" + std::to_string(chat);
    REQUIRE(db.top_up(chat, 5, payment));
    auto a = started(chat, "a");
    REQUIRE(db.commit(chat, a.id));
    auto b = db.reserve(chat, kind::image, "b", 0);
    REQUIRE(b);
    REQUIRE(db.cancel(chat, b->id, ""));
    auto c = started(chat, "c");
    REQUIRE(db.fail(chat, c.id));
    auto d = started(chat, "d");
    swept(chat, d.id);
    auto e = started(chat, "e");
    REQUIRE(db.uncertain(chat, e.id, "provider-e"));
    // No request id (a chat of one job at a time): only its release is
    // kept.
    REQUIRE(db.set_limits(chat, 1));
    auto g = started(chat, "");
    swept(chat, g.id);
    REQUIRE(db.set_limits(chat, 8));
    auto f = db.reserve(chat, kind::image, "f", 0);
    REQUIRE(f);

    auto page = db.history(chat, 0, 50);
    REQUIRE(page);
    CHECK(page->chat == chat);
    CHECK(page->next_before == 0);
    CHECK_FALSE(page->truncated);
    CHECK(timeline(*page)
          == "reservation/queued,reservation/released/lease_expired,"
             "reservation/outcome_unknown/uncertain,"
             "reservation/released/lease_expired,reservation/failed,"
             "reservation/cancelled,commit,top_up,admin/create_chat");
    REQUIRE(page->entries.size() == 9);
    const auto& x = page->entries;
    // f: queued, its deadline the sweep's.
    CHECK(x[0].reservation == f->id);
    CHECK(x[0].request_id == "f");
    CHECK(x[0].held == pockets{0, 0, 1});
    REQUIRE(x[0].deadline);
    CHECK(*x[0].deadline
          == f->created_at + test::store_options().sweep_timeout);
    // g: known by its release alone.
    CHECK(x[1].reservation == g.id);
    CHECK(x[1].kind == "");
    // e: its hold still counts until resolved or reconcile-timeout.
    CHECK(x[2].reservation == e.id);
    REQUIRE(x[2].deadline);
    CHECK(*x[2].deadline - x[2].at == test::store_options().reconcile_timeout);
    CHECK(x[3].reservation == d.id);
    CHECK(x[3].request_id == "d");
    CHECK(x[3].kind == "image");
    CHECK_FALSE(x[3].deadline);
    CHECK(x[4].reservation == c.id);
    CHECK(x[5].reservation == b->id);
    // a: its ledger row is its end.
    CHECK(x[6].reservation == a.id);
    CHECK(x[6].request_id == "a");
    CHECK(x[6].kind == "image");
    CHECK(x[6].units == 1);
    CHECK(x[6].change == pockets{0, 0, -1});
    REQUIRE(x[6].after);
    CHECK(*x[6].after == pockets{0, 0, 14});
    CHECK(x[7].payment_id == payment);
    CHECK(x[7].change == pockets{0, 0, 5});
    CHECK(*x[7].after == pockets{0, 0, 15});
    CHECK(x[8].change == pockets{0, 0, 10});
    CHECK(*x[8].after == pockets{0, 0, 10});
    for (size_t i = 1; i < x.size(); ++i)
      CHECK(x[i - 1].at >= x[i].at);

    // Resolved, the uncertain job shows how it ended, once, beside the
    // ledger row of its charge.
    REQUIRE(db.resolve(chat, e.id, "succeeded", 0));
    auto after = db.history(chat, 0, 50);
    REQUIRE(after);
    CHECK(timeline(*after).rfind("commit,reservation/committed/succeeded,", 0)
          == 0);
    CHECK(std::count_if(
            after->entries.begin(), after->entries.end(),
            [&](const history_entry& y) { return y.reservation == e.id; })
          == 2);
  }

  TEST_CASE_FIXTURE(history_fixture,
                    "the history names the grants of each balance change and "
                    "hold: the grant a top-up made, what a commit charged "
                    "each grant in spending order, what an active hold "
                    "holds, the grant an expiry ended") {
    auto chat = make_chat({0, 0, 0});
    auto pay = "history-grants-" + std::to_string(chat);
    grant_terms soon;
    soon.expires_in_ms = 3600 * 1000;
    auto first = db.top_up(chat, 1, pay + "-a", soon);
    REQUIRE(first);
    auto second = db.top_up(chat, 5, pay + "-b");
    REQUIRE(second);
    auto a = started(chat, "a");
    auto price = a.held.get(pocket::balance);
    REQUIRE(price >= 1);
    REQUIRE(price <= 3);
    auto held = db.reserve(chat, kind::image, "b", 0);
    REQUIRE(held);
    auto page = db.history(chat, 0, 50);
    REQUIRE(page);
    REQUIRE(page->entries.size() >= 4);
    using parts = std::vector<std::pair<int64_t, int32_t>>;
    auto parts_of = [](const history_entry& x) {
      parts out;
      for (const auto& g : x.grants)
        out.emplace_back(g.grant, g.credits);
      return out;
    };
    // Newest first: the two holds, the top-ups, the chat's creation.
    const auto& x = page->entries;
    CHECK(x[0].reservation == held->id);
    CHECK(x[1].reservation == a.id);
    // a took the grant that expires first, then the other for the rest.
    parts a_hold{{first->grant_id, 1}};
    if (price > 1)
      a_hold.emplace_back(second->grant_id, price - 1);
    CHECK(parts_of(x[1]) == a_hold);
    CHECK(parts_of(x[0]) == parts{{second->grant_id, price}});
    CHECK(parts_of(x[2]) == parts{{second->grant_id, 5}});
    CHECK(parts_of(x[3]) == parts{{first->grant_id, 1}});
    // The commit row names what it charged each grant, in the hold's order.
    REQUIRE(db.commit(chat, a.id));
    page = db.history(chat, 0, 1);
    REQUIRE(page);
    CHECK(page->entries[0].cause == "commit");
    CHECK(parts_of(page->entries[0]) == a_hold);
    // Ended reservations name none: their commit row does.
    REQUIRE(db.cancel(chat, held->id, ""));
    // The second grant expires with nothing held: one row naming it.
    test::sql("UPDATE grants SET created_at = now() - interval '2 hours', "
              "expires_at = now() - interval '1 second' WHERE grant_id = "
              + std::to_string(second->grant_id));
    test::sql("UPDATE chats SET next_expiry = now() - interval '1 second'"
              + where(chat));
    auto scanned = db.expire_grants();
    REQUIRE(scanned);
    CHECK(*scanned >= 1);
    page = db.history(chat, 0, 50);
    REQUIRE(page);
    auto expired =
      std::find_if(page->entries.begin(), page->entries.end(),
                   [](const history_entry& y) { return y.cause == "expire"; });
    REQUIRE(expired != page->entries.end());
    CHECK(parts_of(*expired) == parts{{second->grant_id, 5 - (price - 1)}});
    for (const auto& y : page->entries)
      if (y.cause == "reservation" && y.status == "cancelled")
        CHECK(y.grants.empty());
  }

  TEST_CASE_FIXTURE(history_fixture,
                    "keyset pages, newest first, show each ledger row and "
                    "each reservation exactly once, as one page does") {
    auto chat = make_chat({0, 0, 100});
    for (int i = 0; i < 12; ++i) {
      REQUIRE(db.top_up(
        chat, 1, "page-" + std::to_string(chat) + "-" + std::to_string(i)));
      if (i % 2 == 0) {
        auto r = db.reserve(chat, kind::image, "r" + std::to_string(i), 0);
        REQUIRE(r);
        REQUIRE(db.cancel(chat, r->id, ""));
      }
    }
    auto whole = db.history(chat, 0, 1000);
    REQUIRE(whole);
    CHECK(whole->entries.size() == 13 + 6);
    for (uint32_t limit : {1u, 4u, 5u, 13u}) {
      CAPTURE(limit);
      int pages = 0;
      auto paged = all_pages(chat, limit, pages);
      CHECK(pages == (13 + limit - 1) / limit);
      REQUIRE(paged.size() == whole->entries.size());
      for (size_t i = 0; i < paged.size(); ++i) {
        CHECK(paged[i].ledger_id == whole->entries[i].ledger_id);
        CHECK(paged[i].reservation == whole->entries[i].reservation);
      }
    }
    std::vector<int64_t> ids;
    for (const auto& x : whole->entries)
      if (x.ledger_id != 0)
        ids.push_back(x.ledger_id);
    CHECK(std::is_sorted(ids.rbegin(), ids.rend()));
    CHECK(std::set<int64_t>(ids.begin(), ids.end()).size() == 13);
  }

  TEST_CASE_FIXTURE(history_fixture,
                    "an unknown chat, a cursor of another chat and a page "
                    "out of range are refused with their own errors") {
    CHECK(db.history(test::fresh_chat(), 0, 10).error() == ec::not_found);
    CHECK(db.explain(test::fresh_chat()).error() == ec::not_found);
    auto chat = make_chat({1, 1, 1});
    auto other = make_chat({1, 1, 1});
    auto theirs = test::sql_int("SELECT max(id) FROM ledger" + where(other));
    CHECK(db.history(chat, theirs, 10).error() == ec::invalid_argument);
    CHECK(db.history(chat, -1, 10).error() == ec::invalid_argument);
    CHECK(db.history(chat, 0, 0).error() == ec::invalid_argument);
    CHECK(db.history(chat, 0, 1001).error() == ec::invalid_argument);
    CHECK(db.history(0, 0, 10).error() == ec::invalid_argument);
    CHECK(db.history(chat, 0, 1000));
  }

  TEST_CASE_FIXTURE(history_fixture,
                    "explain: the pockets, the plan and why, the next "
                    "refill, each active job's deadline, the last ten "
                    "entries") {
    auto chat = make_chat({2, 2, 30});
    REQUIRE(db.touch(chat));
    for (int i = 0; i < 12; ++i)
      REQUIRE(db.top_up(
        chat, 1, "explain-" + std::to_string(chat) + "-" + std::to_string(i)));
    auto queued = db.reserve(chat, kind::image, "q", 0);
    REQUIRE(queued);
    auto running = started(chat, "s");
    auto beat = db.heartbeat(chat, running.id); // its lease
    REQUIRE(beat);
    running = *beat;
    auto x = db.explain(chat);
    REQUIRE(x);
    CHECK(x->status.chat == chat);
    CHECK(x->status.amounts == pockets{2, 2, 42});
    CHECK(x->plan_reason == "never premium");
    REQUIRE(x->status.window_started_at);
    REQUIRE(x->next_refill_at);
    auto o = test::store_options();
    CHECK(*x->next_refill_at
          == *x->status.window_started_at + o.refill_interval);
    CHECK(x->refill_interval_ms == o.refill_interval.count());
    REQUIRE(x->status.reservations.size() == 2);
    REQUIRE(x->deadlines.size() == 2);
    std::map<reservation_id, caf::optional<caf::timestamp>> deadline;
    for (size_t i = 0; i < 2; ++i)
      deadline[x->status.reservations[i].id] = x->deadlines[i];
    CHECK(deadline[queued->id] == queued->created_at + o.sweep_timeout);
    REQUIRE(running.lease_expires_at);
    CHECK(deadline[running.id]
          == std::min(*running.lease_expires_at,
                      running.created_at + o.sweep_timeout));
    auto page = db.history(chat, 0, 10);
    REQUIRE(page);
    REQUIRE(x->recent.entries.size() == 10);
    for (size_t i = 0; i < 10; ++i) {
      CHECK(x->recent.entries[i].ledger_id == page->entries[i].ledger_id);
      CHECK(x->recent.entries[i].reservation == page->entries[i].reservation);
    }
    // The plan and why.
    auto until = std::chrono::system_clock::now() + 48h;
    REQUIRE(db.set_premium(chat, until));
    auto premium = db.explain(chat);
    REQUIRE(premium);
    CHECK(premium->plan_reason.rfind("premium until ", 0) == 0);
    REQUIRE(db.set_premium(chat, std::chrono::system_clock::now() - 1h));
    auto ended = db.explain(chat);
    REQUIRE(ended);
    CHECK(ended->plan_reason.rfind("premium ended ", 0) == 0);
    // A chat no activity has opened a window for: no refill is due.
    auto quiet = make_chat({0, 0, 0});
    auto q = db.explain(quiet);
    REQUIRE(q);
    CHECK_FALSE(q->next_refill_at);
  }

  TEST_CASE_FIXTURE(history_fixture,
                    "a chat with 100,000 ledger rows and 100,000 ended jobs "
                    "answers any page from its indexes, in milliseconds") {
    constexpr int rows = 100000;
    auto chat = make_chat({0, 0, 0});
    auto c = std::to_string(chat);
    // Half charges, half admin rows; between every two rows an ended job,
    // every other one committed. Negative reservation ids: no real job's.
    auto base = std::to_string(-std::llabs(chat) * 1000000);
    // Another chat's 100,000 rows first, below this one's ids: a plan that
    // walks the primary key past this chat's first row reads them.
    auto busy = test::fresh_chat();
    REQUIRE(db.create_chat(chat_spec{busy, {}, caf::none, caf::none}));
    test::sql("SET LOCAL chargeonce.references_checked = on; "
              "INSERT INTO ledger (entry, chat_id, detail, pockets) SELECT "
              "'admin', "
              + std::to_string(busy) + ", 'test', '{}' FROM generate_series(1, "
              + std::to_string(rows) + ")");
    test::sql("SET LOCAL chargeonce.references_checked = on; "
              "INSERT INTO ledger (entry, chat_id, reservation_id, kind, "
              "detail, pockets, committed_at) SELECT CASE WHEN g % 2 = 0 "
              "THEN 'charge' ELSE 'admin' END, "
              + c + ", CASE WHEN g % 2 = 0 THEN " + base
              + " - g END, CASE WHEN g % 2 = 0 THEN 'image' END, CASE WHEN g "
                "% 2 = 1 THEN 'test' END, '{}', now() - ("
              + std::to_string(rows)
              + " - g) * interval '1 second' FROM generate_series(1, "
              + std::to_string(rows) + ") g");
    test::sql("INSERT INTO ended_reservations (id, chat_id, kind, status, "
              "queue, held, request_id, slot, created_at, ended_at) SELECT "
              + base + " - g, " + c
              + ", 'image', CASE WHEN g % 2 = 0 THEN 'committed' ELSE "
                "'failed' END, 'image_generation', '{NULL,NULL,1}', 'r' "
                "|| g, 0, now() - ("
              + std::to_string(rows) + " - g) * interval '1 second', now() - ("
              + std::to_string(rows)
              + " - g) * interval '1 second' + interval '500 ms' FROM "
                "generate_series(1, "
              + std::to_string(rows) + ") g");
    test::sql("ANALYZE ledger; ANALYZE ended_reservations");

    auto middle = test::sql_int("SELECT id FROM ledger" + where(chat)
                                + " ORDER BY id LIMIT 1 OFFSET "
                                + std::to_string(rows / 2));
    auto oldest = test::sql_int("SELECT id FROM ledger" + where(chat)
                                + " ORDER BY id LIMIT 1 OFFSET 10");
    for (auto [name, before] :
         {std::pair{"newest", 0LL}, std::pair{"middle", middle},
          std::pair{"oldest", oldest}}) {
      CAPTURE(std::string{name});
      auto t0 = std::chrono::steady_clock::now();
      auto page = db.history(chat, before, 50);
      auto took = std::chrono::steady_clock::now() - t0;
      REQUIRE(page);
      // The figure is shown, not asserted: the plans below are.
      MESSAGE(std::string{name}
              << " page of 100,000 rows: "
              << std::chrono::duration<double, std::milli>(took).count()
              << " ms, " << page->entries.size() << " entries");
      auto ledger_rows =
        std::count_if(page->entries.begin(), page->entries.end(),
                      [](const history_entry& x) { return x.ledger_id != 0; });
      CHECK(ledger_rows == (before == oldest ? 10 : 50));
      // The failed jobs between them (the committed ones are their rows).
      CHECK(page->entries.size() - ledger_rows
            >= static_cast<size_t>(ledger_rows / 2 - 1));
    }
    // How Postgres runs both queries on a page in the middle: from the
    // indexes, reading about what the page shows, never the chat's past.
    auto at = test::sql_int("SELECT chargeonce_us(committed_at) FROM ledger "
                            "WHERE id = "
                            + std::to_string(middle));
    // The busy chat again, within that page's time: 20,000 failed jobs
    // that a plan by time alone (the ended_at index) would read.
    test::sql("INSERT INTO ended_reservations (id, chat_id, kind, status, "
              "queue, held, request_id, slot, created_at, ended_at) SELECT "
              + std::to_string(-std::llabs(busy) * 1000000) + " - g, "
              + std::to_string(busy)
              + ", 'image', 'failed', 'image_generation', '{}', 'b' || g, 0, "
                "to_timestamp(0) + ("
              + std::to_string(at)
              + " - g * 2000) * interval '1 microsecond', to_timestamp(0) + ("
              + std::to_string(at)
              + " - g * 2000) * interval '1 microsecond' FROM "
                "generate_series(1, 20000) g");
    test::sql("ANALYZE ended_reservations");
    auto analyze = [](std::string sql, const std::vector<std::string>& args) {
      for (size_t i = args.size(); i > 0; --i) {
        auto param = "$" + std::to_string(i);
        for (auto p = sql.find(param); p != std::string::npos;
             p = sql.find(param))
          sql.replace(p, param.size(), args[i - 1]);
      }
      return test::sql("EXPLAIN (ANALYZE, FORMAT JSON) " + sql);
    };
    auto ledger_plan = analyze(persistence::history_ledger_sql,
                               {c, std::to_string(middle), "51"});
    auto reservations_plan =
      analyze(persistence::history_reservations_sql,
              {c, std::to_string(at - 50'000'000), std::to_string(at), "1001"});
    // The last page: nothing older of this chat, and no other chat's rows.
    auto last_plan = analyze(persistence::history_ledger_sql,
                             {c, std::to_string(oldest), "51"});
    for (const auto& plan : {ledger_plan, reservations_plan, last_plan}) {
      INFO(plan);
      auto read = rows_read(plan);
      CHECK(read.count("Seq Scan") == 0);
      for (const auto& [table, rows] : read) {
        CAPTURE(table);
        CHECK(rows <= 1000);
      }
    }
    CHECK(rows_read(reservations_plan).count("ended_reservations") == 1);
    // Over 300,000 rows that the suites after this one, run on the same
    // database again and again, should not meet in their plans and prunes.
    for (const auto& id : {c, std::to_string(busy)}) {
      test::sql("DELETE FROM ended_reservations WHERE chat_id = " + id);
      test::sql("DELETE FROM ledger WHERE chat_id = " + id);
    }
  }
}
