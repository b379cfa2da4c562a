// SPDX-License-Identifier: Apache-2.0
// Daily windows, plans, purchases and reactivation against a real Postgres.
// Time passing is simulated by moving timestamps back with direct SQL.
#include "persistence/store.hpp"
#include "protocol/errors.hpp"
#include "protocol/pockets.hpp"
#include "protocol/time.hpp"
#include "tests/support/test_db.hpp"

#include <doctest/doctest.h>
#include <pqxx/pqxx>

#include <algorithm>
#include <future>
#include <set>
#include <vector>

using namespace chargeonce;
using namespace std::chrono_literals;
using persistence::store;

namespace {

/// refill-interval and reactivation-after 24 h, free plan 10/3 (defaults);
/// premium images differ from the default so that the plan shows.
persistence::store_options options() {
  auto opts = test::store_options();
  builtin_quotas quotas;
  quotas.premium_images = 8;
  opts.products = builtin_catalog(quotas);
  return opts;
}

std::string where(chat_id chat) {
  return " WHERE chat_id = " + std::to_string(chat);
}

/// The window opened `hours` ago.
void window_opened_ago(chat_id chat, int hours) {
  test::sql("UPDATE chats SET window_started_at = now() - interval '"
            + std::to_string(hours) + " hours'" + where(chat));
}

struct limits_fixture {
  store db{options()};

  chat_status touch(chat_id chat) {
    auto st = db.touch(chat);
    REQUIRE(st);
    return *st;
  }

  /// All chats the reactivation scan refills now, page by page.
  std::set<chat_id> reactivate_all() {
    std::set<chat_id> out;
    reactivation_cursor after;
    for (int page = 0; page < 100000; ++page) {
      auto x = db.reactivation_chunk(after, 50);
      REQUIRE(x);
      out.insert(x->chats.begin(), x->chats.end());
      if (!x->more)
        break;
      after = x->next;
    }
    return out;
  }
};

} // namespace

TEST_SUITE("limits") {

  TEST_CASE_FIXTURE(limits_fixture,
                    "touch registers an unknown chat on the free plan with an "
                    "open window") {
    auto chat = test::fresh_chat();
    auto st = touch(chat);
    CHECK(st.amounts == pockets{10, 3, 0});
    CHECK_FALSE(st.started);
    CHECK_FALSE(st.premium);
    REQUIRE(st.window_started_at);
    REQUIRE(st.last_activity_at);
    CHECK(*st.window_started_at == *st.last_activity_at);
  }

  TEST_CASE_FIXTURE(limits_fixture,
                    "before refill-interval nothing is refilled; after it the "
                    "quota is restored and a new window opens") {
    auto chat = test::fresh_chat();
    auto first = touch(chat);
    test::sql("UPDATE chats SET pockets = chargeonce_pockets_with(pockets, "
              "'{\"daily_messages\": 1, \"daily_images\": 0}')"
              + where(chat));
    window_opened_ago(chat, 23);
    auto before = touch(chat);
    CHECK(before.amounts == pockets{1, 0, 0});
    window_opened_ago(chat, 24);
    auto after = touch(chat);
    CHECK(after.amounts == pockets{10, 3, 0});
    REQUIRE(after.window_started_at);
    CHECK(*after.window_started_at > *first.window_started_at);
    CHECK(*after.window_started_at == *after.last_activity_at);
  }

  TEST_CASE_FIXTURE(limits_fixture,
                    "a refill uses the plan that holds at refill time") {
    auto chat = test::fresh_chat();
    touch(chat);
    REQUIRE(db.set_premium(chat, caf::timestamp{std::chrono::system_clock::now()
                                                + std::chrono::hours(48)}));
    window_opened_ago(chat, 25);
    CHECK(touch(chat).amounts == pockets{10, 8, 0});
    REQUIRE(db.set_premium(chat, caf::timestamp{std::chrono::system_clock::now()
                                                - std::chrono::hours(1)}));
    window_opened_ago(chat, 25);
    CHECK(touch(chat).amounts == pockets{10, 3, 0});
  }

  TEST_CASE_FIXTURE(
    limits_fixture,
    "a refill never touches reservations: a job reserved before it is paid "
    "by its own window, and the new window opens at its quota") {
    // The straddling job: 2 images used, a third reserved and started, the
    // window turns, the job commits. The old window's unit paid for it.
    auto chat = test::fresh_chat();
    touch(chat);
    for (int i = 0; i < 2; ++i) {
      auto used = db.reserve(chat, kind::image, "");
      REQUIRE(used);
      REQUIRE(db.start(chat, used->id));
      REQUIRE(db.commit(chat, used->id));
    }
    auto r = db.reserve(chat, kind::image, "");
    REQUIRE(r);
    CHECK(r->held == pockets{0, 1, 0});
    CHECK(r->window == 0);
    REQUIRE(db.start(chat, r->id));
    window_opened_ago(chat, 30);
    auto refilled = touch(chat);
    CHECK(refilled.window == 1);
    CHECK(refilled.amounts.get(pocket::daily_images) == 3);
    REQUIRE(refilled.active);
    CHECK(refilled.active->held == pockets{0, 1, 0});
    CHECK(refilled.active->window == 0);
    // The open job's hold is not on this window's pockets.
    CHECK(refilled.held.get(pocket::daily_images) == 0);
    CHECK(spendable(refilled).get(pocket::daily_images) == 3);
    auto receipt = db.commit(chat, r->id);
    REQUIRE(receipt);
    CHECK(receipt->charged == pockets{0, 1, 0});
    CHECK(receipt->window == 0);
    CHECK(db.status(chat)->amounts.get(pocket::daily_images) == 3);
    // The ledger row names the unit and the window that paid; it changed
    // nothing of the new window's pockets.
    auto page = db.history(chat, 0, 1);
    REQUIRE(page);
    REQUIRE_FALSE(page->entries.empty());
    const auto& row = page->entries.front();
    CHECK(row.cause == "commit");
    CHECK(row.window == caf::optional<int64_t>{0});
    CHECK(row.change.items().empty());
    // A repeated commit answers the same receipt.
    auto again = db.commit(chat, r->id);
    REQUIRE(again);
    CHECK(again->window == 0);
    CHECK(again->charged == pockets{0, 1, 0});
  }

  TEST_CASE_FIXTURE(limits_fixture,
                    "a hold of a past window gives nothing to the new window "
                    "when it fails, is cancelled or commits fewer units; its "
                    "balance part is charged as before") {
    auto chat = test::fresh_chat();
    touch(chat);
    REQUIRE(db.set_limits(chat, 4));
    REQUIRE(db.top_up(chat, 10, "pay-" + std::to_string(chat)));
    // Three image units: all 3 daily images, then 2 from balance.
    auto mixed = db.reserve(chat, kind::image, "mixed", 5);
    REQUIRE(mixed);
    CHECK(mixed->held == pockets{0, 3, 2});
    REQUIRE(db.start(chat, mixed->id));
    auto failing = db.reserve(chat, kind::text, "failing");
    REQUIRE(failing);
    REQUIRE(db.start(chat, failing->id));
    auto queued = db.reserve(chat, kind::text, "queued");
    REQUIRE(queued);
    window_opened_ago(chat, 30);
    auto refilled = touch(chat);
    CHECK(refilled.window == 1);
    CHECK(refilled.amounts == pockets{10, 3, 10});
    // Only the balance part of the old holds still counts.
    CHECK(refilled.held == pockets{0, 0, 2});
    REQUIRE(db.fail(chat, failing->id));
    REQUIRE(db.cancel(chat, queued->id, ""));
    // 4 of the 5 units: 3 daily images (the old window's), 1 from balance.
    auto receipt = db.commit(chat, mixed->id, 4);
    REQUIRE(receipt);
    CHECK(receipt->window == 0);
    CHECK(receipt->charged == pockets{0, 3, 1});
    auto st = db.status(chat);
    REQUIRE(st);
    CHECK(st->amounts == pockets{10, 3, 9});
    CHECK(st->held == pockets{});
  }

  TEST_CASE_FIXTURE(limits_fixture,
                    "a job of unknown outcome reserved before a refill, "
                    "resolved succeeded after it, is paid by its own window") {
    auto chat = test::fresh_chat();
    touch(chat);
    auto r = db.reserve(chat, kind::image, "");
    REQUIRE(r);
    REQUIRE(db.start(chat, r->id));
    REQUIRE(db.uncertain(chat, r->id, "prov-" + std::to_string(chat)));
    window_opened_ago(chat, 30);
    auto refilled = touch(chat);
    CHECK(refilled.held == pockets{});
    REQUIRE(refilled.reservations.size() == 1);
    CHECK(refilled.reservations[0].window == 0);
    auto resolved = db.resolve(chat, r->id, "succeeded", 0);
    REQUIRE(resolved);
    CHECK(resolved->charged == pockets{0, 1, 0});
    CHECK(resolved->window == 0);
    CHECK(db.status(chat)->amounts.get(pocket::daily_images) == 3);
  }

  TEST_CASE_FIXTURE(limits_fixture,
                    "the window number goes up at every refill, reactivation "
                    "included, and not when the next activity only opens a "
                    "window") {
    auto chat = test::fresh_chat();
    CHECK(touch(chat).window == 0);
    window_opened_ago(chat, 30);
    CHECK(touch(chat).window == 1);
    CHECK(touch(chat).window == 1);
    REQUIRE(db.set_flags(chat, {true, caf::none, caf::none}));
    test::sql("UPDATE chats SET last_activity_at = now() - interval '100 days'"
              + where(chat));
    CHECK(reactivate_all().count(chat) == 1);
    auto quiet = db.status(chat);
    REQUIRE(quiet);
    CHECK(quiet->window == 2);
    CHECK_FALSE(quiet->window_started_at);
    auto back = touch(chat); // opens a window, no refill
    CHECK(back.window == 2);
    CHECK(back.window_started_at);
  }

  TEST_CASE_FIXTURE(limits_fixture,
                    "refill racing reserve and commit, 200 times: pockets stay "
                    "consistent and never negative") {
    store gateway{options()};
    store worker{options()};
    auto chat = test::fresh_chat();
    touch(chat);
    for (int i = 0; i < 200; ++i) {
      test::sql("UPDATE chats SET pockets = chargeonce_pockets_with(pockets, "
                "'{\"daily_images\": 1}')"
                + where(chat));
      window_opened_ago(chat, 25);
      auto r = worker.reserve(chat, kind::image, "");
      REQUIRE(r);
      REQUIRE(r->held == pockets{0, 1, 0});
      REQUIRE(worker.start(chat, r->id));
      auto refill =
        std::async(std::launch::async, [&] { return gateway.touch(chat); });
      auto commit = std::async(std::launch::async,
                               [&] { return worker.commit(chat, r->id); });
      REQUIRE(refill.get());
      auto c = commit.get();
      REQUIRE(c);
      REQUIRE(c->charged == pockets{0, 1, 0});
      REQUIRE(c->window == r->window);
      // Commit first: 1 - 1 = 0, then refill to 3. Refill first: 3, and the
      // commit of the old window's hold takes nothing of the new one.
      REQUIRE(db.status(chat)->amounts.get(pocket::daily_images) == 3);
    }
    CHECK(test::sql_int("SELECT count(*) FROM chats, unnest(pockets) e"
                        " WHERE e < 0")
          == 0);
  }

  TEST_CASE_FIXTURE(limits_fixture,
                    "refill racing reserve, 200 times: the reserve sees the "
                    "pockets before or after the refill, never a mix") {
    store gateway{options()};
    store worker{options()};
    auto chat = test::fresh_chat();
    touch(chat);
    int held_daily = 0;
    for (int i = 0; i < 200; ++i) {
      test::sql("UPDATE chats SET pockets = chargeonce_pockets_with(pockets, "
                "'{\"daily_images\": 0, \"balance\": 0}')"
                + where(chat));
      window_opened_ago(chat, 25);
      auto refill =
        std::async(std::launch::async, [&] { return gateway.touch(chat); });
      auto reserve = std::async(std::launch::async, [&] {
        return worker.reserve(chat, kind::image, "");
      });
      REQUIRE(refill.get());
      auto r = reserve.get();
      if (r) { // after the refill: a daily image is held, never balance
        REQUIRE(r->held == pockets{0, 1, 0});
        ++held_daily;
        REQUIRE(worker.fail(chat, r->id));
      } else { // before it: nothing to pay with
        REQUIRE(r.error() == ec::insufficient_images);
      }
      REQUIRE(db.status(chat)->amounts.get(pocket::daily_images) == 3);
    }
    MESSAGE("reserve after refill: " << held_daily << " of 200");
  }

  TEST_CASE_FIXTURE(
    limits_fixture,
    "a top-up retried 100 times concurrently is credited once") {
    auto chat = test::fresh_chat();
    touch(chat);
    constexpr int threads = 25;
    std::vector<std::unique_ptr<store>> conns;
    for (int i = 0; i < threads; ++i)
      conns.push_back(std::make_unique<store>(options()));
    std::vector<std::future<std::vector<top_up_receipt>>> results;
    auto payment = "pay-" + std::to_string(chat);
    for (int i = 0; i < threads; ++i)
      results.push_back(std::async(std::launch::async, [&, i] {
        std::vector<top_up_receipt> out;
        for (int k = 0; k < 4; ++k) {
          auto x = conns[i]->top_up(chat, 7, payment);
          REQUIRE(x);
          out.push_back(*x);
        }
        return out;
      }));
    std::set<int64_t> purchased_at;
    for (auto& f : results)
      for (auto& x : f.get())
        purchased_at.insert(to_unix_micros(x.purchased_at));
    CHECK(purchased_at.size() == 1); // every retry saw the first receipt
    CHECK(db.status(chat)->amounts.get(pocket::balance) == 7);
    CHECK(test::sql_int("SELECT count(*) FROM ledger WHERE entry = 'top_up'"
                        + std::string{" AND chat_id = "} + std::to_string(chat))
          == 1);
    CHECK(test::sql_int("SELECT count(*) FROM grants WHERE chat_id = "
                        + std::to_string(chat))
          == 1);
  }

  TEST_CASE_FIXTURE(limits_fixture,
                    "every credit of the balance is a grant's: a top-up "
                    "makes a purchase grant that never expires, a chat "
                    "created with a balance an admin grant, and a reserve "
                    "holds from them") {
    auto topped = test::fresh_chat();
    touch(topped);
    REQUIRE(db.top_up(topped, 5, "grant-" + std::to_string(topped)));
    auto created = test::fresh_chat();
    pockets opening;
    opening.set(pocket::balance, 3);
    REQUIRE(db.create_chat({created, opening, caf::none, caf::none}));
    auto grant_of = [](chat_id chat) {
      return test::sql(
        "SELECT source || ' ' || credits || ' ' || priority || ' ' || "
        "(expires_at IS NULL) FROM grants WHERE chat_id = "
        + std::to_string(chat));
    };
    CHECK(grant_of(topped) == "purchase 5 100 true");
    CHECK(grant_of(created) == "admin 3 100 true");
    auto held = db.reserve(created, kind::image, "");
    REQUIRE(held);
    CHECK(held->held.get(pocket::balance) > 0);
    CHECK(test::sql("SELECT held_grant_credits::text FROM reservations "
                    "WHERE id = "
                    + std::to_string(held->id))
          == "{" + std::to_string(held->held.get(pocket::balance)) + "}");
  }

  TEST_CASE_FIXTURE(
    limits_fixture,
    "one payment_id used for many chats at once credits exactly one of them") {
    // Each chat's lock serializes only its own retries: across chats, only
    // the unique index on ledger.payment_id stops the second purchase.
    constexpr int chats = 16;
    std::vector<chat_id> ids;
    std::vector<std::unique_ptr<store>> conns;
    for (int i = 0; i < chats; ++i) {
      ids.push_back(test::fresh_chat());
      touch(ids.back());
      conns.push_back(std::make_unique<store>(options()));
    }
    auto payment = "shared-" + std::to_string(ids.front());
    std::vector<std::future<caf::expected<top_up_receipt>>> results;
    for (int i = 0; i < chats; ++i)
      results.push_back(std::async(std::launch::async, [&, i] {
        return conns[i]->top_up(ids[i], 5, payment);
      }));
    int credited = 0;
    for (auto& f : results) {
      auto x = f.get();
      if (x)
        ++credited;
      else
        CHECK(x.error() == ec::invalid_argument);
    }
    CHECK(credited == 1);
    CHECK(test::sql_int("SELECT count(*) FROM ledger WHERE payment_id = '"
                        + payment + "'")
          == 1);
    int64_t balances = 0;
    for (auto chat : ids)
      balances += db.status(chat)->amounts.get(pocket::balance);
    CHECK(balances == 5);
  }

  TEST_CASE_FIXTURE(limits_fixture,
                    "bad top-ups are refused and change nothing") {
    auto chat = test::fresh_chat();
    touch(chat);
    auto pay = "p-" + std::to_string(chat);
    CHECK(db.top_up(chat, 0, pay).error() == ec::invalid_argument);
    CHECK(db.top_up(chat, -5, pay).error() == ec::invalid_argument);
    CHECK(db.top_up(chat, int64_t{1} << 40, pay).error()
          == ec::invalid_argument);
    CHECK(db.top_up(chat, 5, "").error() == ec::invalid_argument);
    CHECK(db.top_up(test::fresh_chat(), 5, pay).error() == ec::not_found);
    REQUIRE(db.top_up(chat, 2147483000, pay));
    CHECK(db.top_up(chat, 1000, pay + "-2").error() == ec::invalid_argument);
    CHECK(db.top_up(chat, 9, pay).error() == ec::invalid_argument); // reused
    auto other = test::fresh_chat();
    touch(other);
    CHECK(db.top_up(other, 2147483000, pay).error() == ec::invalid_argument);
    CHECK(db.status(chat)->amounts.get(pocket::balance) == 2147483000);
    CHECK(db.status(other)->amounts.get(pocket::balance) == 0);
  }

  TEST_CASE_FIXTURE(limits_fixture,
                    "a top-up's grant has the terms it names; a retry with "
                    "the same terms returns the first receipt, one with "
                    "other terms is refused and changes nothing") {
    auto chat = test::fresh_chat();
    touch(chat);
    auto pay = "terms-" + std::to_string(chat);
    grant_terms promo;
    promo.expires_in_ms = 30LL * 86'400'000;
    promo.priority = 10;
    promo.source = "promo";
    auto first = db.top_up(chat, 4, pay, promo);
    REQUIRE(first);
    CHECK(first->grant_id > 0);
    CHECK(first->source == "promo");
    CHECK(first->priority == 10);
    CHECK(first->expires_in_ms == promo.expires_in_ms);
    REQUIRE(first->expires_at);
    // Resolved in Postgres time from the top-up: 30 days after it.
    auto after = std::chrono::duration_cast<std::chrono::milliseconds>(
      *first->expires_at - first->purchased_at);
    CHECK(after.count() == promo.expires_in_ms);
    auto retry = db.top_up(chat, 4, pay, promo);
    REQUIRE(retry);
    CHECK(retry->grant_id == first->grant_id);
    CHECK(retry->expires_at == first->expires_at);
    auto other = promo;
    other.priority = 11;
    CHECK(db.top_up(chat, 4, pay, other).error() == ec::invalid_argument);
    CHECK(db.top_up(chat, 4, pay).error() == ec::invalid_argument);
    CHECK(test::sql_int("SELECT count(*) FROM grants WHERE chat_id = "
                        + std::to_string(chat))
          == 1);
    CHECK(db.status(chat)->amounts.get(pocket::balance) == 4);
  }

  TEST_CASE_FIXTURE(limits_fixture,
                    "void-grant removes what nobody holds of a grant, named "
                    "by id or by payment id; a hold on it finishes; a second "
                    "void changes nothing") {
    // Created, not touched: no daily pocket, the balance pays.
    auto chat = test::fresh_chat();
    REQUIRE(db.create_chat({chat, pockets{}, caf::none, caf::none}));
    auto pay = "void-" + std::to_string(chat);
    auto a = db.top_up(chat, 5, pay + "-a");
    auto b = db.top_up(chat, 7, pay + "-b");
    REQUIRE(a);
    REQUIRE(b);
    // Purchases at one priority spend in creation order: the job holds of a.
    auto held = db.reserve(chat, kind::image, "");
    REQUIRE(held);
    auto price = held->held.get(pocket::balance);
    REQUIRE(price > 0);
    REQUIRE(price <= 5);
    auto voided = db.void_grant(chat, a->grant_id, "");
    REQUIRE(voided);
    CHECK(voided->id == a->grant_id);
    CHECK(voided->voided_at);
    CHECK(voided->left == price); // the held part stays until the job ends
    CHECK(voided->held == price);
    CHECK(db.status(chat)->amounts.get(pocket::balance) == 7 + price);
    auto again = db.void_grant(chat, a->grant_id, "");
    REQUIRE(again);
    CHECK(again->voided_at == voided->voided_at);
    CHECK(db.status(chat)->amounts.get(pocket::balance) == 7 + price);
    // The job fails: what it held of the voided grant is voided too.
    REQUIRE(db.start(chat, held->id));
    REQUIRE(db.fail(chat, held->id));
    CHECK(db.status(chat)->amounts.get(pocket::balance) == 7);
    auto by_payment = db.void_grant(chat, 0, pay + "-b");
    REQUIRE(by_payment);
    CHECK(by_payment->id == b->grant_id);
    CHECK(by_payment->left == 0);
    CHECK(db.status(chat)->amounts.get(pocket::balance) == 0);
    CHECK(test::sql_int("SELECT count(*) FROM ledger WHERE chat_id = "
                        + std::to_string(chat) + " AND entry = 'void'")
          == 3);
    CHECK(db.void_grant(chat, b->grant_id + 1000000, "").error()
          == ec::not_found);
    CHECK(db.void_grant(chat, 0, pay + "-none").error() == ec::not_found);
    CHECK(db.void_grant(chat, 0, "").error() == ec::invalid_argument);
    CHECK(db.void_grant(chat, a->grant_id, pay + "-a").error()
          == ec::invalid_argument);
    CHECK(db.void_grant(chat, -1, "").error() == ec::invalid_argument);
    // A grant of another chat is not this chat's.
    auto other = test::fresh_chat();
    touch(other);
    CHECK(db.void_grant(other, b->grant_id, "").error() == ec::not_found);
  }

  TEST_CASE_FIXTURE(limits_fixture,
                    "status lists the grants with credits left in spending "
                    "order; a grant due to expire is shown expired without "
                    "a write, listed only while a hold still holds of it") {
    auto chat = test::fresh_chat();
    touch(chat);
    // Balance pays: the daily pockets are empty.
    test::sql("UPDATE chats SET pockets = chargeonce_pockets_with(pockets, "
              "'{\"daily_messages\": 0, \"daily_images\": 0}')"
              + where(chat));
    auto pay = "status-grants-" + std::to_string(chat);
    auto top_up = [&](const char* suffix, int credits, grant_terms t) {
      auto x = db.top_up(chat, credits, pay + suffix, t);
      REQUIRE(x);
      return x->grant_id;
    };
    auto a = top_up("-a", 10, {}); // purchase, never expires
    grant_terms promo;
    promo.source = "promo";
    promo.expires_in_ms = 2 * 3600 * 1000;
    auto b = top_up("-b", 4, promo);
    grant_terms soon;
    soon.expires_in_ms = 30 * 60 * 1000;
    auto c = top_up("-c", 2, soon);
    grant_terms first;
    first.source = "admin";
    first.priority = 10;
    auto d = top_up("-d", 3, first);
    auto ids = [](const chat_status& x) {
      std::vector<int64_t> out;
      for (const auto& g : x.grants)
        out.push_back(g.id);
      return out;
    };
    auto st = db.status(chat);
    REQUIRE(st);
    // Priority 10 first; then the soonest expiry; never expiring last.
    CHECK(ids(*st) == std::vector<int64_t>{d, c, b, a});
    CHECK(st->amounts.get(pocket::balance) == 19);
    const auto& promo_grant = st->grants[2];
    CHECK(promo_grant.source == "promo");
    CHECK(promo_grant.credits == 4);
    CHECK(promo_grant.left == 4);
    CHECK(promo_grant.held == 0);
    CHECK(promo_grant.priority == grant_priority_default);
    CHECK(promo_grant.payment_id == pay + "-b");
    CHECK(promo_grant.chat == chat);
    REQUIRE(promo_grant.expires_at);
    CHECK(*promo_grant.expires_at - promo_grant.created_at
          == std::chrono::hours{2});
    CHECK_FALSE(promo_grant.expired);
    CHECK_FALSE(st->grants[3].expires_at);
    CHECK(st->grants[0].priority == 10);
    // The answers of the administration read the same status.
    CHECK(ids(*db.set_flags(chat, {caf::none, caf::none, caf::none}))
          == ids(*st));
    // A job holds part of the first grant.
    auto held = db.reserve(chat, kind::image, "");
    REQUIRE(held);
    auto price = held->held.get(pocket::balance);
    REQUIRE(price > 0);
    REQUIRE(price <= 3);
    st = db.status(chat);
    CHECK(st->grants[0].held == price);
    CHECK(st->grants[0].left == 3);
    // Time passes: the first two grants are due, nothing has written it.
    test::sql("UPDATE grants SET created_at = now() - interval '2 hours', "
              "expires_at = now() - interval '1 second' WHERE grant_id IN ("
              + std::to_string(c) + ", " + std::to_string(d) + ")");
    test::sql("UPDATE chats SET next_expiry = now() - interval '1 second'"
              + where(chat));
    auto ledger_rows = [&] {
      return test::sql_int("SELECT count(*) FROM ledger" + where(chat));
    };
    auto rows_before = ledger_rows();
    st = db.status(chat);
    REQUIRE(st);
    // c had nothing held: gone from the list and from the balance. d is
    // listed, expired, with only what the job holds of it.
    CHECK(ids(*st) == std::vector<int64_t>{d, b, a});
    CHECK(st->grants[0].expired);
    CHECK_FALSE(st->grants[0].voided);
    CHECK(st->grants[0].left == price);
    CHECK(st->grants[0].held == price);
    CHECK(st->amounts.get(pocket::balance) == 14 + price);
    CHECK(ledger_rows() == rows_before);
    CHECK(test::sql_int("SELECT count(*) FROM grants WHERE expired_at IS NOT "
                        "NULL AND chat_id = "
                        + std::to_string(chat))
          == 0);
    // The job fails, which expires the two grants for real and then what
    // it held of d: d leaves the list, the balance is what status showed
    // less the hold.
    REQUIRE(db.start(chat, held->id));
    REQUIRE(db.fail(chat, held->id));
    st = db.status(chat);
    CHECK(ids(*st) == std::vector<int64_t>{b, a});
    CHECK(st->amounts.get(pocket::balance) == 14);
    CHECK(test::sql_int("SELECT count(*) FROM grants WHERE expired_at IS NOT "
                        "NULL AND chat_id = "
                        + std::to_string(chat))
          == 2);
    // A voided grant with nothing held leaves the list too.
    REQUIRE(db.void_grant(chat, b, ""));
    CHECK(ids(*db.status(chat)) == std::vector<int64_t>{a});
  }

  TEST_CASE_FIXTURE(limits_fixture,
                    "a top-up's bad terms are refused and change nothing") {
    auto chat = test::fresh_chat();
    touch(chat);
    auto pay = "bad-terms-" + std::to_string(chat);
    auto refused = [&](const grant_terms& t) {
      auto x = db.top_up(chat, 3, pay, t);
      return !x && x.error() == ec::invalid_argument;
    };
    grant_terms t;
    t.priority = -1;
    CHECK(refused(t));
    t.priority = 1001;
    CHECK(refused(t));
    t = {};
    t.source = "gift";
    CHECK(refused(t));
    t = {};
    t.expires_in_ms = -5;
    CHECK(refused(t));
    t.expires_in_ms = grant_expires_in_ms_max + 1;
    CHECK(refused(t));
    t = {};
    t.expires_at = caf::make_timestamp() + std::chrono::hours{1};
    t.expires_in_ms = 1000;
    CHECK(refused(t));
    t = {};
    t.expires_at = caf::make_timestamp() - std::chrono::seconds{1};
    CHECK(refused(t)); // not in the future
    CHECK(db.status(chat)->amounts.get(pocket::balance) == 0);
    CHECK(test::sql_int("SELECT count(*) FROM grants WHERE chat_id = "
                        + std::to_string(chat))
          == 0);
  }

  TEST_CASE_FIXTURE(limits_fixture,
                    "set-flags sets only the flags given; blocked and banned "
                    "chats cannot reserve") {
    auto chat = test::fresh_chat();
    touch(chat);
    auto st = db.set_flags(chat, {true, caf::none, caf::none});
    REQUIRE(st);
    CHECK(st->started);
    CHECK_FALSE(st->blocked);
    REQUIRE(db.set_flags(chat, {caf::none, true, caf::none}));
    CHECK(db.reserve(chat, kind::text, "").error() == ec::chat_blocked);
    st = db.set_flags(chat, {caf::none, false, true});
    REQUIRE(st);
    CHECK(st->started);
    CHECK(db.reserve(chat, kind::text, "").error() == ec::chat_banned);
    CHECK(db.set_flags(test::fresh_chat(), {true, caf::none, caf::none}).error()
          == ec::not_found);
  }

  TEST_CASE_FIXTURE(limits_fixture,
                    "reactivation selects exactly the started, unblocked, "
                    "unbanned chats quiet since before reactivation-after and "
                    "not yet reactivated") {
    auto make = [&](bool started, bool blocked, bool banned, int quiet_hours) {
      auto chat = test::fresh_chat();
      touch(chat);
      REQUIRE(db.set_flags(chat, {started, blocked, banned}));
      test::sql("UPDATE chats SET pockets = chargeonce_pockets_with(pockets, "
                "'{\"daily_images\": 0}'),"
                " last_activity_at = now() - interval '"
                + std::to_string(quiet_hours) + " hours'" + where(chat));
      return chat;
    };
    auto due = make(true, false, false, 48);
    auto blocked = make(true, true, false, 48);
    auto banned = make(true, false, true, 48);
    auto never_started = make(false, false, false, 48);
    auto recently_active = make(true, false, false, 2);
    auto mine =
      std::set<chat_id>{due, blocked, banned, never_started, recently_active};
    auto first = reactivate_all();
    std::set<chat_id> picked;
    std::set_intersection(first.begin(), first.end(), mine.begin(), mine.end(),
                          std::inserter(picked, picked.end()));
    CHECK(picked == std::set<chat_id>{due});
    auto st = db.status(due);
    CHECK(st->amounts.get(pocket::daily_images) == 3);
    CHECK_FALSE(st->window_started_at); // closed until the next activity
    CHECK(db.status(blocked)->amounts.get(pocket::daily_images) == 0);
    // Already reactivated in this idle period: left out.
    CHECK(reactivate_all().count(due) == 0);
    // Active again (opens a window, no second refill), then quiet again: due.
    test::sql("UPDATE chats SET pockets = chargeonce_pockets_with(pockets, "
              "'{\"daily_images\": 1}')"
              + where(due));
    auto back = touch(due);
    CHECK(back.amounts.get(pocket::daily_images) == 1);
    CHECK(back.window_started_at);
    // Time passes: reactivated 40 hours ago, last active 30 hours ago.
    test::sql("UPDATE chats SET reactivated_at = now() - interval '40 hours', "
              "last_activity_at = now() - interval '30 hours'"
              + where(due));
    CHECK(reactivate_all().count(due) == 1);
  }

  TEST_CASE_FIXTURE(limits_fixture,
                    "the reactivation scan locks its page's chats in chat-id "
                    "order, as every writer does: a writer that holds the "
                    "lower chat and then takes the higher one does not "
                    "deadlock with it, and the scan completes") {
    auto x = test::fresh_chat();
    auto y = test::fresh_chat();
    auto low = std::min(x, y);
    auto high = std::max(x, y);
    // The two quietest chats of the database; the higher id quiet longer,
    // so that the page's order (quiet first) differs from the lock order.
    for (auto [chat, hours] :
         {std::pair{low, 100000}, std::pair{high, 100001}}) {
      touch(chat);
      REQUIRE(db.set_flags(chat, {true, caf::none, caf::none}));
      test::sql("UPDATE chats SET last_activity_at = now() - interval '"
                + std::to_string(hours) + " hours'" + where(chat));
    }
    auto pid = db.backend_pid();
    REQUIRE(pid > 0);
    pqxx::connection writer_conn{test::dsn()};
    pqxx::work writer{writer_conn};
    writer.exec("SELECT 1 FROM chats" + where(low) + " FOR UPDATE");
    auto scan = std::async(std::launch::async, [&] {
      return db.reactivation_chunk(reactivation_cursor{}, 2);
    });
    auto waiting = test::await_lock_wait("pid = " + std::to_string(pid));
    MESSAGE("the scan waited for a chat's lock after " << waiting.ms()
                                                       << " ms");
    REQUIRE(waiting);
    // Today's writers take chats in id order: the higher one next.
    std::string writer_error;
    try {
      writer.exec("SELECT 1 FROM chats" + where(high) + " FOR UPDATE");
      writer.commit();
    } catch (const std::exception& e) {
      writer_error = e.what();
    }
    CHECK(writer_error == "");
    auto page = scan.get();
    INFO("scan: ", page ? "" : error_message(page.error()));
    REQUIRE(page);
    CHECK(std::set<chat_id>(page->chats.begin(), page->chats.end())
          == std::set<chat_id>{low, high});
    CHECK_FALSE(db.status(low)->window_started_at); // refilled, closed
  }

} // TEST_SUITE
