// SPDX-License-Identifier: Apache-2.0
// The chaos money auditor on histories built in memory: a consistent one
// passes every invariant, and one mutant per invariant is caught by it.
#include "tools/chaos/audit.hpp"

#include "protocol/errors.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>

using namespace chargeonce;
using namespace chargeonce::chaos;

namespace {

constexpr chat_id chat_a = 1001; ///< commit, top-up, status, cancel
constexpr chat_id chat_b = 1002; ///< a killed worker's job, swept
constexpr chat_id chat_c = 1003; ///< a commit sent while Postgres is paused
constexpr chat_id chat_d = 1004; ///< no operation (a lock left behind)
constexpr chat_id chat_e = 1005; ///< limit 2: two image jobs side by side
constexpr chat_id chat_f = 1006; ///< a job whose provider timed out
constexpr chat_id chat_g = 1007; ///< limit 2: a job that straddles a refill
constexpr chat_id chat_h = 1008; ///< limit 2: grants, a promo spent first

constexpr reservation_id committed = 11;   ///< chat_a, started and committed
constexpr reservation_id cancelled = 12;   ///< chat_a, cancelled while queued
constexpr reservation_id swept = 13;       ///< chat_b, released lease_expired
constexpr reservation_id paused = 17;      ///< chat_c, commit during the outage
constexpr reservation_id daily = 21;       ///< chat_e, holds the daily image
constexpr reservation_id bought = 22;      ///< chat_e, beside it, holds balance
constexpr reservation_id unknown_job = 31; ///< chat_f, uncertain, resolved
constexpr reservation_id first_in_window = 41; ///< chat_g, window 0 only
constexpr reservation_id straddler = 42;       ///< chat_g, window 0 to 1
constexpr reservation_id new_window_job = 43;  ///< chat_g, window 1 only
constexpr reservation_id promo_job = 61;       ///< chat_h, holds the promo
constexpr reservation_id beside_promo = 62;    ///< chat_h, beside it

/// chat_h's grants: create-chat's and a promo top-up's.
constexpr int64_t opening_h = 201;
constexpr int64_t promo_grant = 202;

/// The Postgres pause: [outage_from_ms, outage_to_ms] after t0.
constexpr int64_t outage_from_ms = 5000;
constexpr int64_t outage_to_ms = 8000;

/// Microseconds since the epoch, `ms` after a fixed start.
int64_t at(int64_t ms) {
  return 1'700'000'000'000'000 + ms * 1000;
}

uint8_t code(ec x) {
  return static_cast<uint8_t>(x);
}

constexpr uint8_t ok = static_cast<uint8_t>(outcome::ok);

/// A consistent run: what the record says happened is what Postgres holds.
struct history {
  recorder rec;
  std::map<chat_id, pockets> initial;
  persistence::audit_snapshot snap;
  audit_limits limits; // seed 1: payment ids are "pay-1-<key>"
  std::map<reservation_id, int64_t> created_ms; ///< when reserve inserted it
  std::map<reservation_id, int64_t> windows; ///< its hold's, 0 when not named

  /// An answered request. Like chargeonce-chaos, an ok answer that returns
  /// a reservation records its created_at; one about a job (its receipt
  /// too) names the window of its hold.
  op_record answered(op what, chat_id chat, reservation_id id, int64_t sent_ms,
                     pockets amounts = {}, uint8_t result = ok) const {
    op_record r;
    r.what = what;
    r.chat = chat;
    r.id = id;
    r.sent_us = at(sent_ms);
    r.acked_us = at(sent_ms + 5);
    r.amounts = amounts;
    r.result = result;
    auto returns_reservation = what == op::start || what == op::heartbeat
                               || what == op::fail || what == op::cancel;
    if (auto i = created_ms.find(id);
        r.ok() && returns_reservation && i != created_ms.end())
      r.created_us = at(i->second);
    if (auto i = windows.find(id); i != windows.end())
      r.window = i->second;
    return r;
  }

  /// An acknowledged reserve in window `window`; the reservation is inserted
  /// 2 ms after it was sent, and Postgres keeps it (with its request id)
  /// once it ended.
  op_record reserved(chat_id chat, reservation_id id, int64_t sent_ms,
                     pockets held, int64_t window = 0) {
    created_ms[id] = sent_ms + 2;
    windows[id] = window;
    snap.ended.push_back({id, window, chat, at(sent_ms + 2), 0, held});
    auto r = answered(op::reserve, chat, id, sent_ms, held);
    r.created_us = at(sent_ms + 2);
    r.key = id;
    return r;
  }

  history() {
    initial = {{chat_a, {0, 1, 5}}, {chat_b, {0, 0, 2}}, {chat_c, {0, 1, 0}},
               {chat_d, {0, 0, 1}}, {chat_e, {1, 1, 1}}, {chat_f, {0, 0, 2}}};
    limits.max_active_jobs[chat_e] = 2;
    // chat_f: the provider timed out; a reconciler resolved it succeeded.
    rec.add(reserved(chat_f, unknown_job, 4000, {0, 0, 1}));
    rec.add(answered(op::start, chat_f, unknown_job, 4010, {0, 0, 1}));
    rec.add(answered(op::uncertain, chat_f, unknown_job, 4100, {0, 0, 1}));
    auto resolved = answered(op::resolve, chat_f, unknown_job, 4500, {0, 0, 1});
    resolved.resolution = "succeeded";
    rec.add(resolved);
    // chat_a: reserve, start, commit; a top-up of 3; a reserve cancelled.
    rec.add(reserved(chat_a, committed, 0, {0, 1, 0}));
    auto started = answered(op::start, chat_a, committed, 10, {0, 1, 0});
    started.worker = "w1-a";
    rec.add(started);
    // The queue delivered it twice: the second worker was refused.
    auto again =
      answered(op::start, chat_a, committed, 12, {}, code(ec::already_started));
    again.worker = "w2-a";
    rec.add(again);
    rec.add(answered(op::commit, chat_a, committed, 100, {0, 1, 0}));
    auto top_up = answered(op::top_up, chat_a, 0, 200);
    top_up.key = 7;
    top_up.credits = 3;
    rec.add(top_up);
    rec.add(answered(op::status, chat_a, 0, 300, {0, 0, 8}));
    rec.add(reserved(chat_a, cancelled, 400, {0, 0, 1}));
    rec.add(answered(op::cancel, chat_a, cancelled, 500, {0, 0, 1}));
    // A tap that came late, after `committed` ended: the same reservation,
    // with its final status.
    auto late = answered(op::reserve, chat_a, committed, 150, {0, 1, 0});
    late.created_us = at(2);
    late.key = committed;
    late.ended = true;
    rec.add(late);
    // chat_e: two image jobs at once, each from its own pocket; both are
    // cancelled.
    rec.add(reserved(chat_e, daily, 3000, {0, 1, 0}));
    rec.add(reserved(chat_e, bought, 3010, {0, 0, 1}));
    rec.add(answered(op::cancel, chat_e, daily, 3100, {0, 1, 0}));
    rec.add(answered(op::cancel, chat_e, bought, 3110, {0, 0, 1}));
    // chat_b: its worker is killed after start; the sweeper releases it.
    rec.add(reserved(chat_b, swept, 1000, {0, 0, 1}));
    rec.add(answered(op::start, chat_b, swept, 1010, {0, 0, 1}));
    rec.add_process_release(swept);
    // chat_c: the commit is sent while Postgres is paused; the answer says
    // storage_unavailable, and the charge lands once Postgres runs again.
    rec.add(reserved(chat_c, paused, 2000, {0, 1, 0}));
    rec.add(answered(op::start, chat_c, paused, 2010, {0, 1, 0}));
    rec.add(fault_record{fault::pause_postgres, at(outage_from_ms),
                         at(outage_to_ms), "postgres"});
    rec.add(outage{at(outage_from_ms), at(outage_to_ms)});
    rec.add(answered(op::commit, chat_c, paused, 5100, {},
                     code(ec::storage_unavailable)));
    rec.add(
      answered(op::status, chat_a, 0, 6000, {}, code(ec::storage_unavailable)));

    snap.chats = {{chat_a, {0, 0, 8}}, {chat_b, {0, 0, 2}},
                  {chat_c, {0, 0, 0}}, {chat_d, {0, 0, 1}},
                  {chat_e, {1, 1, 1}}, {chat_f, {0, 0, 1}}};
    snap.uncertain = {{unknown_job, chat_f, "succeeded", at(4100)}};
    snap.ledger = {charge(1, committed, chat_a, {0, 1, 0}, 103),
                   top_up_row(2, chat_a, 3, "pay-1-7", 203),
                   charge(3, paused, chat_c, {0, 1, 0}, outage_to_ms + 100),
                   charge(4, unknown_job, chat_f, {0, 0, 1}, 4501)};
    snap.releases = {{swept, chat_b, "lease_expired", at(3000)}};
    // Each written with its change (migration 010's triggers).
    snap.events = {{"reconcile_needed", chat_f, unknown_job, "prov-31"},
                   {"reservation_released", chat_b, swept, "lease_expired"}};
    // The balances are grants: create-chat's (100 + the chat's last digit)
    // and the top-up's; the job of unknown outcome held and was charged
    // chat_f's.
    snap.grants = {
      opening(chat_a, 101, 5), opening(chat_b, 102, 2),
      opening(chat_d, 104, 1), opening(chat_e, 105, 1),
      opening(chat_f, 106, 2), grant(chat_a, 107, 3, "pay-1-7", 100, 203)};
    snap.grants[4].charged = 1;
    snap.ledger[1].grant_ids = {107};
    snap.ledger[1].grant_credits = {3};
    snap.ledger[3].grant_ids = {106};
    snap.ledger[3].grant_credits = {1};
    snap.uncertain[0].created_us = at(4002);
    snap.holds = {{unknown_job, chat_f, at(4002), false, {106}, {1}}};
  }

  /// create-chat's grant of a chat's opening balance.
  static persistence::audit_grant opening(chat_id chat, int64_t id,
                                          int32_t credits) {
    auto g = grant(chat, id, credits, "", 100, -100);
    g.source = "admin";
    return g;
  }

  /// A grant made at `at_ms`, that never expires unless a test says so.
  static persistence::audit_grant grant(chat_id chat, int64_t id,
                                        int32_t credits, std::string payment,
                                        int32_t priority, int64_t at_ms) {
    persistence::audit_grant g;
    g.id = id;
    g.chat = chat;
    g.credits = credits;
    g.payment_id = std::move(payment);
    g.priority = priority;
    g.created_us = at(at_ms);
    return g;
  }

  /// The grant `id`.
  persistence::audit_grant& grant_of(int64_t id) {
    for (auto& g : snap.grants)
      if (g.id == id)
        return g;
    FAIL("no grant ", id, " in the snapshot");
    return snap.grants.front();
  }

  /// chat_h (limit 2, 4 credits of balance: create-chat's grant
  /// `opening_h`): a promo top-up of 3 (`promo_grant`, priority 10, due at
  /// 20 s, its expiry noticed at once), then `promo_job` reserves 2 of the
  /// balance and commits them. Taken from the promo, as the spending order
  /// has it, unless `from_opening`; the promo expires with what is left of
  /// it (one ledger row, one event) unless `expire` is false. With
  /// `beside`, `beside_promo` held the promo's 3 (in a run where the hold
  /// of `promo_job` took create-chat's grant) and failed after it.
  void promo(bool from_opening = false, bool expire = true,
             bool beside = false) {
    initial[chat_h] = {0, 0, 4};
    limits.max_active_jobs[chat_h] = 2;
    rec.add(answered(op::create, chat_h, 0, -200));
    auto paid = answered(op::top_up, chat_h, 0, 8000);
    paid.key = 8;
    paid.credits = 3;
    paid.grant = promo_grant;
    rec.add(paid);
    auto top_up = top_up_row(71, chat_h, 3, "pay-1-8", 8003);
    top_up.grant_ids = {promo_grant};
    top_up.grant_credits = {3};
    snap.ledger.push_back(top_up);
    auto p = grant(chat_h, promo_grant, 3, "pay-1-8", 10, 8003);
    p.source = "promo";
    p.expires = true;
    p.expires_us = at(20'000);
    p.noticed_us = at(8004);
    snap.events.push_back(
      {"credits_expiring", chat_h, 0, "grant 202: 3 credits expire at …"});
    auto o = opening(chat_h, opening_h, 4);
    if (beside) {
      rec.add(reserved(chat_h, beside_promo, 8050, {0, 0, 3}));
      rec.add(answered(op::start, chat_h, beside_promo, 8060, {0, 0, 3}));
    }
    rec.add(reserved(chat_h, promo_job, 8100, {0, 0, 2}));
    rec.add(answered(op::start, chat_h, promo_job, 8110, {0, 0, 2}));
    if (beside)
      rec.add(answered(op::fail, chat_h, beside_promo, 8200, {0, 0, 3}));
    rec.add(answered(op::commit, chat_h, promo_job, 8300, {0, 0, 2}));
    auto charged = charge(72, promo_job, chat_h, {0, 0, 2}, 8302);
    charged.grant_ids = {from_opening ? opening_h : promo_grant};
    charged.grant_credits = {2};
    snap.ledger.push_back(charged);
    (from_opening ? o : p).charged = 2;
    int32_t balance = 4 + 3 - 2;
    if (expire) {
      auto left = p.credits - p.charged;
      persistence::audit_ledger_row l;
      l.id = 73;
      l.entry = "expire";
      l.charge = false;
      l.chat = chat_h;
      l.detail = "grant 202 expired";
      l.changed = {0, 0, -left};
      l.at_us = at(20'001);
      l.grant_ids = {promo_grant};
      l.grant_credits = {left};
      snap.ledger.push_back(l);
      p.expired = left;
      p.expired_us = at(20'001);
      snap.events.push_back(
        {"credits_expired", chat_h, 0,
         "grant 202: " + std::to_string(left) + " credits expired"});
      balance -= left;
    }
    snap.grants.push_back(o);
    snap.grants.push_back(p);
    snap.chats.push_back({chat_h, {0, 0, balance}, 0});
  }

  /// A charge that window `window` paid, written in that window: it took
  /// all it charged.
  static persistence::audit_ledger_row charge(int64_t row, reservation_id id,
                                              chat_id chat, pockets amounts,
                                              int64_t at_ms,
                                              int64_t window = 0) {
    persistence::audit_ledger_row l;
    l.id = row;
    l.reservation = id;
    l.chat = chat;
    l.charged = amounts;
    l.changed -= amounts;
    l.at_us = at(at_ms);
    l.has_window = true;
    l.window = window;
    return l;
  }

  static persistence::audit_ledger_row top_up_row(int64_t row, chat_id chat,
                                                  int32_t credits,
                                                  std::string payment,
                                                  int64_t at_ms) {
    persistence::audit_ledger_row l;
    l.id = row;
    l.entry = "top_up";
    l.charge = false;
    l.chat = chat;
    l.credited = credits;
    l.payment_id = std::move(payment);
    l.at_us = at(at_ms);
    return l;
  }

  /// A refill that opened window `window` and changed the pockets by
  /// `changed`.
  static persistence::audit_ledger_row refill_row(int64_t row, chat_id chat,
                                                  pockets changed,
                                                  int64_t at_ms,
                                                  int64_t window = 1) {
    persistence::audit_ledger_row l;
    l.id = row;
    l.entry = "refill";
    l.detail = "window";
    l.charge = false;
    l.chat = chat;
    l.changed = std::move(changed);
    l.at_us = at(at_ms);
    l.has_window = true;
    l.window = window;
    return l;
  }

  /// An admin change of the pockets by `changed`, within the window.
  static persistence::audit_ledger_row
  admin_row(int64_t row, chat_id chat, pockets changed, int64_t at_ms) {
    persistence::audit_ledger_row l;
    l.id = row;
    l.entry = "admin";
    l.detail = "set_pockets";
    l.charge = false;
    l.chat = chat;
    l.changed = std::move(changed);
    l.at_us = at(at_ms);
    return l;
  }

  /// chat_g (limit 2, three daily images, no balance): `first_in_window`
  /// reserved and committed in window 0; `straddler` reserved and started
  /// in window 0, committed after a refill (its image back to 3) opened
  /// window 1, taking nothing of window 1's images: window 0's paid. With
  /// `beside`, `new_window_job` is reserved in window 1 while the straddler
  /// is still open, holds all three of window 1's images (the straddler's
  /// hold no longer counts against them) and is committed.
  void straddle(bool beside = true) {
    initial[chat_g] = {0, 3, 0};
    limits.max_active_jobs[chat_g] = 2;
    rec.add(reserved(chat_g, first_in_window, 9000, {0, 1, 0}));
    rec.add(answered(op::start, chat_g, first_in_window, 9010, {0, 1, 0}));
    rec.add(answered(op::commit, chat_g, first_in_window, 9100, {0, 1, 0}));
    snap.ledger.push_back(charge(51, first_in_window, chat_g, {0, 1, 0}, 9102));
    rec.add(reserved(chat_g, straddler, 9200, {0, 1, 0}));
    rec.add(answered(op::start, chat_g, straddler, 9210, {0, 1, 0}));
    snap.ledger.push_back(refill_row(52, chat_g, {0, 1, 0}, 9500, 1));
    if (beside) {
      rec.add(reserved(chat_g, new_window_job, 9550, {0, 3, 0}, 1));
      rec.add(answered(op::start, chat_g, new_window_job, 9560, {0, 3, 0}));
    }
    rec.add(answered(op::commit, chat_g, straddler, 9600, {0, 1, 0}));
    auto paid = charge(53, straddler, chat_g, {0, 1, 0}, 9602);
    paid.changed = {}; // window 0's image paid for it
    snap.ledger.push_back(paid);
    if (beside) {
      rec.add(answered(op::commit, chat_g, new_window_job, 9800, {0, 3, 0}));
      snap.ledger.push_back(
        charge(54, new_window_job, chat_g, {0, 3, 0}, 9802, 1));
    }
    snap.chats.push_back(
      {chat_g, beside ? pockets{0, 0, 0} : pockets{0, 3, 0}, 1});
  }

  /// The ledger row that charged reservation `id`.
  persistence::audit_ledger_row& charge_of(reservation_id id) {
    for (auto& l : snap.ledger)
      if (l.charge && l.reservation == id)
        return l;
    FAIL("no charge of reservation ", id, " in the ledger");
    return snap.ledger.front();
  }

  persistence::audit_chat& chat(chat_id id) {
    for (auto& c : snap.chats)
      if (c.chat == id)
        return c;
    FAIL("no chat ", id, " in the snapshot");
    return snap.chats.front();
  }

  /// What create-chat's admin row opened each chat's ledger with; the
  /// initial pockets unless a test says otherwise.
  std::map<chat_id, pockets> opened;

  /// What a chat's grants have left where a test forges it; elsewhere its
  /// balance, as the server keeps them.
  std::map<chat_id, int64_t> grants_left;

  /// Grants that contradict a chat's sole grant, where a test forges them.
  std::map<chat_id, int64_t> sole_grant_rivals;

  /// The snapshot as the server writes it: each chat's ledger opens with
  /// create-chat's row, and a row that names no pockets after it gets the
  /// ones its change leads to (a test that sets them forges them).
  persistence::audit_snapshot chained() const {
    persistence::audit_snapshot out = snap;
    for (auto& c : out.chats) {
      auto forged = grants_left.find(c.chat);
      c.grants_left = forged != grants_left.end()
                        ? forged->second
                        : c.available.get(pocket::balance);
      auto rivals = sole_grant_rivals.find(c.chat);
      c.sole_grant_rivals =
        rivals != sole_grant_rivals.end() ? rivals->second : 0;
    }
    out.ledger.clear();
    std::map<chat_id, pockets> now;
    for (const auto& [chat, amounts] : initial) {
      persistence::audit_ledger_row l;
      l.entry = "admin";
      l.detail = "create_chat";
      l.charge = false;
      l.chat = chat;
      auto i = opened.find(chat);
      now[chat] = i == opened.end() ? amounts : i->second;
      l.changed = now[chat];
      l.has_after = true;
      l.after = now[chat];
      out.ledger.push_back(l);
    }
    for (auto l : snap.ledger) {
      now[l.chat] += l.change();
      if (!l.has_after) {
        l.has_after = true;
        l.after = now[l.chat];
      }
      now[l.chat] = l.after;
      out.ledger.push_back(l);
    }
    return out;
  }

  /// The record's entry for `what` of reservation `id`.
  op_record& find(op what, reservation_id id) {
    for (auto& r : rec.ops)
      if (r.what == what && r.id == id)
        return r;
    FAIL("no ", to_string(what), " of reservation ", id, " in the record");
    return rec.ops.front();
  }

  audit_result run() const {
    auto chain = chained();
    return audit(rec, initial, chain, limits);
  }

  /// The invariants with at least one violation, in order, comma-separated
  /// (a string, so that a failed CHECK shows it).
  std::string failed() const {
    std::string out;
    for (const auto& x : run().invariants)
      if (x.violations > 0)
        out += (out.empty() ? "" : ",") + x.name;
    return out;
  }
};

const std::string charged_once = invariant_names[0];
const std::string conservation = invariant_names[1];
const std::string one_active = invariant_names[2];
const std::string no_lock_left = invariant_names[3];
const std::string outage_answers = invariant_names[4];
const std::string cancel_xor_start = invariant_names[5];
const std::string within_limit = invariant_names[6];
const std::string holds_within_pockets = invariant_names[7];
const std::string one_job_per_request_id = invariant_names[8];
const std::string cancelled_never_charged = invariant_names[9];
const std::string uncertain_charged_by_resolve = invariant_names[10];
const std::string nothing_left_uncertain = invariant_names[11];
const std::string ledger_chain = invariant_names[12];
const std::string event_with_each_change = invariant_names[13];
const std::string reservation_kept = invariant_names[14];
const std::string one_worker_per_job = invariant_names[15];
const std::string paid_by_its_window = invariant_names[16];
const std::string balance_is_its_grants = invariant_names[17];
const std::string sole_grant_alone = invariant_names[18];
const std::string grant_conserved = invariant_names[19];
const std::string nothing_held_expired = invariant_names[20];
const std::string spending_order = invariant_names[21];
const std::string expiry_and_void_once = invariant_names[22];

/// Whether a violation of `invariant` says `text`.
bool says(const audit_result& result, const std::string& invariant,
          const std::string& text) {
  for (const auto& v : result.violations)
    if (v.invariant == invariant && v.what.find(text) != std::string::npos)
      return true;
  return false;
}

} // namespace

TEST_SUITE("chaos.audit") {

  TEST_CASE("a consistent history checks every invariant and violates none") {
    history h;
    auto result = h.run();
    REQUIRE(result.invariants.size() == invariant_count);
    for (size_t i = 0; i < invariant_count; ++i) {
      CAPTURE(i);
      CHECK(result.invariants[i].name == invariant_names[i]);
      CHECK(result.invariants[i].checked > 0);
      CHECK(result.invariants[i].violations == 0);
    }
    CHECK(result.violations_total == 0);
    CHECK(result.violations.empty());
  }

  TEST_CASE("18: a balance that is not what the chat's grants have left is "
            "caught, either way") {
    history less;
    less.grants_left[chat_a] = 7; // balance 8: a grant charged behind it
    CHECK(less.failed() == balance_is_its_grants);
    CHECK(says(less.run(), balance_is_its_grants,
               "balance is 8, its grants have 7 left"));
    history more;
    more.grants_left[chat_c] = 1; // balance 0: credits no pocket shows
    CHECK(more.failed() == balance_is_its_grants);
  }

  TEST_CASE("19: a sole grant with a rival is caught") {
    history h;
    h.sole_grant_rivals[chat_b] = 1;
    CHECK(h.failed() == sole_grant_alone);
    CHECK(says(h.run(), sole_grant_alone, "1 grant(s) contradict"));
  }

  TEST_CASE("20-23: a promo held first and expired with what was left "
            "passes, its events included") {
    history h;
    h.promo();
    CHECK(h.failed() == "");
    auto result = h.run();
    CHECK(result.grants["expired"] == 1);
    CHECK(result.grants["promo"] == 1);
  }

  TEST_CASE("20: a grant whose parts are not what the ledger's rows say is "
            "caught") {
    history charged;
    charged.grant_of(106).charged = 0; // the charge row took 1 of it
    CHECK(charged.failed() == grant_conserved);
    CHECK(says(charged.run(), grant_conserved,
               "grant 106: charged 0, the ledger's rows say 1"));
    history given;
    given.grant_of(107).credits = 4; // its top-up gave 3
    given.grant_of(107).charged = 1; // left unchanged: 18 cannot see it
    CHECK(given.failed() == grant_conserved);
    CHECK(says(given.run(), grant_conserved, "its top-up gave 3"));
    history opened;
    opened.grant_of(101).credits = 6; // create-chat gave 5
    opened.grant_of(101).voided = 1;
    opened.grant_of(101).voided_us = at(50);
    CHECK(opened.failed() == grant_conserved + "," + expiry_and_void_once);
    history foreign;
    foreign.snap.ledger[3].grant_ids = {101}; // chat_a's, charged for chat_f
    CHECK(says(foreign.run(), grant_conserved, "which is not its chat's"));
  }

  TEST_CASE("21: a hold on a grant that had expired when the reservation "
            "was created is caught; one expiring a moment later passes") {
    history later;
    later.promo();
    later.grant_of(promo_grant).expires_us = at(8102) + 1;
    CHECK(later.failed() == "");
    history expired;
    expired.promo();
    expired.grant_of(promo_grant).expires_us = at(8102);
    CHECK(expired.failed() == nothing_held_expired);
    CHECK(says(expired.run(), nothing_held_expired,
               "holds grant 202, which expired 0 ms before"));
  }

  TEST_CASE("22: a hold that passes over an earlier grant with credits "
            "nobody held is caught") {
    history h;
    h.promo(true);
    CHECK(h.failed() == spending_order);
    CHECK(says(h.run(), spending_order,
               "takes grant 201 while grant 202, earlier in spending order, "
               "had at least 3 credits"));
  }

  TEST_CASE("22: passing over a grant that another job may have held whole, "
            "or one voided before, passes") {
    history beside;
    beside.promo(true, true, true);
    CHECK(beside.failed() == "");
    history voided;
    voided.promo(true);
    auto& p = voided.grant_of(promo_grant);
    p.voided_us = at(8000);
    CHECK(voided.failed() == expiry_and_void_once); // a void needs its row
    // Voided after the answer: it could still give when the hold was taken.
    p.voided_us = at(8200);
    CHECK(
      says(voided.run(), spending_order, "takes grant 201 while grant 202"));
  }

  TEST_CASE("22: a hold that lists its grants out of spending order is "
            "caught") {
    history h;
    h.promo();
    auto& row = h.charge_of(promo_job);
    row.grant_ids = {opening_h, promo_grant};
    row.grant_credits = {0, 2};
    CHECK(h.failed() == spending_order);
    CHECK(says(h.run(), spending_order,
               "takes grant 202 after grant 201, which comes later"));
  }

  TEST_CASE("23: a grant expired twice, early, with two events or both "
            "expired and voided is caught") {
    history twice;
    twice.promo();
    auto again = twice.charge_of(promo_job);
    for (const auto& l : twice.snap.ledger)
      if (l.entry == "expire")
        again = l;
    again.id = 74;
    again.grant_credits = {0};
    again.changed = {};
    twice.snap.ledger.push_back(again);
    CHECK(twice.failed() == expiry_and_void_once);
    CHECK(says(twice.run(), expiry_and_void_once, "expired 2 times"));
    history events;
    events.promo();
    events.snap.events.push_back(
      {"credits_expired", chat_h, 0, "grant 202: 1 credits expired"});
    CHECK(events.failed() == expiry_and_void_once);
    CHECK(says(events.run(), expiry_and_void_once,
               "2 credits_expired events for its 1 expiry rows"));
    history early;
    early.promo();
    early.grant_of(promo_grant).expired_us = at(19'999);
    CHECK(early.failed() == expiry_and_void_once);
    CHECK(says(early.run(), expiry_and_void_once,
               "expired 1 ms before its expires_at"));
    // chat_a's top-up due at 100 ms: 1 credit expired at 600 ms, another
    // voided at 700 ms; a grant's credits expire or are voided, not both.
    history both;
    auto& g = both.grant_of(107);
    g.expires = true;
    g.expires_us = at(100);
    g.expired = 1;
    g.expired_us = at(600);
    g.voided = 1;
    g.voided_us = at(700);
    const std::pair<std::string, int64_t> rows[] = {{"expire", 600},
                                                    {"void", 700}};
    for (const auto& [entry, at_ms] : rows) {
      persistence::audit_ledger_row l;
      l.id = at_ms;
      l.entry = entry;
      l.charge = false;
      l.chat = chat_a;
      l.detail = "grant 107 " + entry + "d";
      l.changed = {0, 0, -1};
      l.at_us = at(at_ms);
      l.grant_ids = {107};
      l.grant_credits = {1};
      both.snap.ledger.push_back(l);
    }
    both.snap.events.push_back(
      {"credits_expired", chat_a, 0, "grant 107: 1 credits expired"});
    both.chat(chat_a).available = {0, 0, 6};
    CHECK(both.failed() == expiry_and_void_once);
    CHECK(says(both.run(), expiry_and_void_once,
               "has both expired (1) and voided (1) credits"));
  }

  TEST_CASE("23: a grant voided twice, or due and never expired, is caught") {
    history voided;
    voided.promo(false, false);
    auto& p = voided.grant_of(promo_grant);
    p.voided = 1;
    p.voided_us = at(9000);
    persistence::audit_ledger_row l;
    l.id = 75;
    l.entry = "void";
    l.charge = false;
    l.chat = chat_h;
    l.detail = "grant 202 voided";
    l.changed = {0, 0, -1};
    l.at_us = at(9000);
    l.grant_ids = {promo_grant};
    l.grant_credits = {1};
    voided.snap.ledger.push_back(l);
    voided.chat(chat_h).available = {0, 0, 4};
    CHECK(voided.failed() == "");
    l.id = 76;
    l.changed = {};
    l.grant_credits = {0};
    voided.snap.ledger.push_back(l);
    CHECK(voided.failed() == expiry_and_void_once);
    CHECK(says(voided.run(), expiry_and_void_once, "voided 2 times"));
    history due;
    due.promo(false, false);
    due.snap.read_us = at(20'000 + 4'000 - 1); // a sweep and the slack
    CHECK(due.failed() == "");
    due.snap.read_us = at(20'000 + 4'000 + 1);
    CHECK(due.failed() == expiry_and_void_once);
    CHECK(says(due.run(), expiry_and_void_once, "has not expired"));
  }

  TEST_CASE("16: a job whose start was acknowledged to two workers is "
            "caught; its own worker's retry is not") {
    history h;
    auto retry = h.answered(op::start, chat_a, committed, 20, {0, 1, 0});
    retry.worker = "w1-a";
    h.rec.add(retry);
    CHECK(h.failed() == "");
    auto second = h.answered(op::start, chat_a, committed, 30, {0, 1, 0});
    second.worker = "w2-a";
    h.rec.add(second);
    CHECK(h.failed() == one_worker_per_job);
  }

  TEST_CASE("17: a job reserved in one window and committed after a refill "
            "opened the next passes, paid by its own window; beside it a "
            "job of the new window may hold all of that window's images") {
    history h;
    h.straddle();
    CHECK(h.failed() == "");
    history alone;
    alone.straddle(false);
    CHECK(alone.failed() == "");
  }

  TEST_CASE("17: a refill that changed no pocket wrote no row, yet its window "
            "turned: a charge after it that took nothing of the new window "
            "passes") {
    // The straddler alone: window 0's images were all there when the
    // window turned, so the refill found them at quota and wrote no row.
    history h;
    h.straddle(false);
    auto& ops = h.rec.ops;
    ops.erase(std::remove_if(
                ops.begin(), ops.end(),
                [](const op_record& r) { return r.id == first_in_window; }),
              ops.end());
    auto& ledger = h.snap.ledger;
    ledger.erase(
      std::remove_if(ledger.begin(), ledger.end(),
                     [](const auto& l) { return l.id == 51 || l.id == 52; }),
      ledger.end());
    h.chat(chat_g).available = {0, 3, 0};
    CHECK(h.failed() == "");
  }

  TEST_CASE("17 (a): a charge that names the window it was written in, not "
            "its hold's, is caught") {
    // Today's behaviour: the straddler's commit took its image from window
    // 1 and said window 1 paid, though its hold was taken in window 0 (whose
    // image the refill threw away). Every total adds up.
    history h;
    h.straddle(false);
    auto& row = h.charge_of(straddler);
    row.window = 1;
    row.changed = {0, -1, 0};
    h.find(op::commit, straddler).window = 1;
    h.chat(chat_g).available = {0, 2, 0};
    CHECK(h.failed() == paid_by_its_window);
    auto result = h.run();
    CHECK(result.invariants[16].violations == 1);
    CHECK(says(result, paid_by_its_window, "its hold was taken in window 0"));
  }

  TEST_CASE("17 (b): a past window's charge that took its daily part from "
            "the new window's pockets too is caught") {
    // What chargeonce-chaos --self-test-window-paid-twice forges: the row
    // names its hold's window, and its change, the pockets after it and the
    // chat's lose the image all the same; the chain holds.
    history h;
    h.straddle(false);
    h.charge_of(straddler).changed = {0, -1, 0};
    h.chat(chat_g).available = {0, 2, 0};
    CHECK(h.failed() == paid_by_its_window);
    auto result = h.run();
    CHECK(result.invariants[16].violations == 1);
    CHECK(says(result, paid_by_its_window, "two windows paid"));
  }

  TEST_CASE("17 (c): a window that paid more daily units than it opened with "
            "is caught, where the holds' timing leaves 8 blind") {
    // The first job's commit crossed the straddler's reserve (sent before
    // it, answered after): 8 cannot tell whether the two holds overlapped,
    // and the straddler held all three images. Window 0 paid four.
    history h;
    h.straddle(false);
    auto& first = h.find(op::commit, first_in_window);
    first.sent_us = at(9190);
    first.acked_us = at(9260);
    h.charge_of(first_in_window).at_us = at(9195);
    for (auto what : {op::reserve, op::start, op::commit})
      h.find(what, straddler).amounts = {0, 3, 0};
    h.charge_of(straddler).charged = {0, 3, 0};
    CHECK(h.failed() == paid_by_its_window);
    auto result = h.run();
    CHECK(result.invariants[16].violations == 1);
    CHECK(says(result, paid_by_its_window,
               "window 0 paid 4 daily_images, it opened with 3"));
  }

  TEST_CASE("17: a chat whose window is behind the one its ledger opened is "
            "caught") {
    history h;
    h.straddle();
    h.chat(chat_g).window = 0;
    CHECK(h.failed() == paid_by_its_window);
    CHECK(says(h.run(), paid_by_its_window, "had opened window 1"));
  }

  TEST_CASE("1: a retried commit that charges a second time is caught") {
    history h;
    h.rec.add(h.answered(op::commit, chat_a, committed, 150, {0, 0, 1}));
    CHECK(h.failed() == charged_once);
    auto result = h.run();
    REQUIRE(result.violations.size() == 1);
    CHECK(result.violations[0].chat == chat_a);
    CHECK(result.violations[0].reservation == committed);
  }

  TEST_CASE("1: an acknowledged commit without its ledger row is caught") {
    history h;
    h.snap.ledger.erase(h.snap.ledger.begin()); // the charge of `committed`
    h.snap.chats[0].available = {0, 1, 8};      // and its debit
    CHECK(h.failed() == charged_once);
  }

  TEST_CASE("1, 2, 13: a ledger charge that no commit requested is caught") {
    // What chargeonce-chaos --self-test-violation forges in Postgres.
    history h;
    h.snap.ledger.push_back(history::charge(9, 99, chat_a, {0, 0, 1}, 900));
    CHECK(h.failed() == charged_once + "," + conservation + "," + ledger_chain);
  }

  TEST_CASE("2, 13: a forged top-up amount is caught") {
    history h;
    h.snap.ledger[1].credited = 30;
    CHECK(h.failed() == conservation + "," + ledger_chain);
  }

  TEST_CASE("2, 13: pockets that do not match the ledger are caught") {
    history h;
    h.snap.chats[1].available.set(pocket::balance, 3); // chat_b: from nowhere
    CHECK(h.failed() == conservation + "," + ledger_chain);
  }

  TEST_CASE("2: a status answer with a negative pocket is caught") {
    history h;
    h.find(op::status, 0).amounts = {0, 0, -1};
    CHECK(h.failed() == conservation);
  }

  TEST_CASE("3, 7: two acknowledged reservations of a chat with one slot at "
            "once are caught") {
    // Reserved and acknowledged while `committed` was surely still active.
    history h;
    h.rec.add(h.reserved(chat_a, 15, 50, {0, 0, 1}));
    h.rec.add(h.answered(op::cancel, chat_a, 15, 60, {0, 0, 1}));
    CHECK(h.failed() == one_active + "," + within_limit);
    auto result = h.run();
    REQUIRE(result.violations.size() == 2);
    CHECK(result.violations[0].reservation == 15);
    CHECK(result.violations[1].reservation == 15);
  }

  TEST_CASE("7: a third job in a chat with two slots is caught") {
    // A reserve that ignores the limit: a text job beside the two images
    // (the pockets would pay for all three, so only the limit is broken).
    history h;
    h.rec.add(h.reserved(chat_e, 23, 3020, {1, 0, 0}));
    h.rec.add(h.answered(op::cancel, chat_e, 23, 3120, {1, 0, 0}));
    CHECK(h.failed() == within_limit);
    auto result = h.run();
    REQUIRE(result.violations.size() == 1);
    CHECK(result.violations[0].reservation == 23);
  }

  TEST_CASE("7: two jobs one after the other in a chat with one slot pass") {
    history h;
    h.rec.add(h.reserved(chat_d, 24, 100, {0, 0, 1}));
    h.rec.add(h.answered(op::cancel, chat_d, 24, 200, {0, 0, 1}));
    h.rec.add(h.reserved(chat_d, 25, 300, {0, 0, 1}));
    h.rec.add(h.answered(op::cancel, chat_d, 25, 400, {0, 0, 1}));
    CHECK(h.failed() == "");
  }

  TEST_CASE("8: a second job that holds the daily image the first one holds "
            "is caught") {
    // A reserve that ignores the other job's hold: one daily image, two
    // holds of it.
    history h;
    h.find(op::reserve, bought).amounts = {0, 1, 0};
    h.find(op::cancel, bought).amounts = {0, 1, 0};
    CHECK(h.failed() == holds_within_pockets);
    auto result = h.run();
    REQUIRE(result.violations.size() == 1);
    CHECK(result.violations[0].reservation == bought);
  }

  TEST_CASE("8: a hold that a top-up made possible passes, one paid by a "
            "charge already made is caught") {
    // chat_a after its top-up has 8 credits and its daily image was
    // charged: a job holding the image again over-commits, one holding 8
    // credits does not.
    history h;
    h.rec.add(h.reserved(chat_a, 26, 600, {0, 0, 8}));
    h.rec.add(h.answered(op::cancel, chat_a, 26, 700, {0, 0, 8}));
    CHECK(h.failed() == "");
    h.find(op::reserve, 26).amounts = {0, 1, 0};
    h.find(op::cancel, 26).amounts = {0, 1, 0};
    CHECK(h.failed() == holds_within_pockets);
  }

  TEST_CASE("9: a reserve retried with an ended job's request id that makes "
            "a new job is caught") {
    // A server that forgot the request id once `committed` ended.
    history h;
    auto again = h.reserved(chat_a, 18, 600, {0, 0, 1});
    again.key = committed;
    h.rec.add(again);
    h.rec.add(h.answered(op::cancel, chat_a, 18, 700, {0, 0, 1}));
    CHECK(h.failed() == one_job_per_request_id);
    auto result = h.run();
    REQUIRE(result.violations.size() == 1);
    CHECK(result.violations[0].reservation == 18);
  }

  TEST_CASE("3: a charge after the sweeper released the reservation is "
            "caught") {
    history h;
    h.rec.add(h.answered(op::commit, chat_b, swept, 3100, {0, 0, 1}));
    h.snap.ledger.push_back(history::charge(4, swept, chat_b, {0, 0, 1}, 3102));
    h.snap.chats[1].available = {0, 0, 1};
    CHECK(h.failed() == one_active);
  }

  TEST_CASE("4: a reservation still held after the run is caught") {
    history h;
    h.rec.add(h.reserved(chat_d, 16, 9000, {0, 0, 1}));
    h.snap.reservations.push_back({16, chat_d, false, {0, 0, 1}, at(9002)});
    CHECK(h.failed() == no_lock_left);
  }

  TEST_CASE("4: a release later than the deadline plus the pause is caught") {
    // Allowed: sweep-timeout 6 s + one sweep 1 s + slack 3 s + the 3 s the
    // Postgres pause overlapped its life, so 13 s after the reserve.
    history h;
    h.snap.releases[0].released_us = at(1002 + 12'000);
    CHECK(h.failed() == "");
    h.snap.releases[0].released_us = at(1002 + 14'000);
    CHECK(h.failed() == no_lock_left);
  }

  TEST_CASE("4: a killed worker's reservation the sweeper never released is "
            "caught") {
    history h;
    h.snap.releases.clear();
    h.snap.events.pop_back(); // never released, so never announced
    h.snap.reservations.push_back({swept, chat_b, true, {0, 0, 1}, at(1002)});
    CHECK(h.failed() == no_lock_left);
  }

  TEST_CASE("5: a refusal during the outage whose commit took effect is "
            "caught") {
    // The answer says the commit did not happen (only storage_unavailable
    // may be answered while Postgres is down), yet the ledger has the charge.
    history h;
    h.find(op::commit, paused).result = code(ec::expired);
    CHECK(h.failed() == outage_answers);
  }

  TEST_CASE("5: a success answered while Postgres was down is caught") {
    history h;
    auto& during = h.rec.ops.back(); // the status sent during the outage
    during.result = ok;
    during.amounts = {0, 0, 8};
    CHECK(h.failed() == outage_answers);
  }

  TEST_CASE("6: a cancel and a start of one reservation both acknowledged "
            "are caught") {
    history h;
    h.rec.add(h.answered(op::start, chat_a, cancelled, 450, {0, 0, 1}));
    CHECK(h.failed() == cancel_xor_start);
    auto result = h.run();
    REQUIRE(result.violations.size() == 1);
    CHECK(result.violations[0].reservation == cancelled);
  }

  TEST_CASE("10: a job acknowledged as cancelled while queued, then charged, "
            "is caught") {
    // What chargeonce-chaos --self-test-cancel-charged forges, with a
    // commit request and the debit, so that only invariant 10 sees it.
    history h;
    h.rec.add(
      h.answered(op::commit, chat_a, cancelled, 600, {}, code(ec::not_found)));
    h.snap.ledger.push_back(
      history::charge(9, cancelled, chat_a, {0, 0, 1}, 601));
    h.snap.chats[0].available = {0, 0, 7};
    CHECK(h.failed() == cancelled_never_charged);
    auto result = h.run();
    REQUIRE(result.violations.size() == 1);
    CHECK(result.violations[0].reservation == cancelled);
  }

  TEST_CASE("6, 10: under the request policy, a started job answered "
            "cancel_requested and then committed passes; answered as "
            "cancelled, it is caught") {
    constexpr reservation_id asked = 14;
    history h;
    h.rec.add(h.reserved(chat_a, asked, 700, {0, 0, 1}));
    h.rec.add(h.answered(op::start, chat_a, asked, 710, {0, 0, 1}));
    auto cancel = h.answered(op::cancel, chat_a, asked, 720, {0, 0, 1});
    cancel.cancel_requested = true;
    h.rec.add(cancel);
    h.rec.add(h.answered(op::commit, chat_a, asked, 800, {0, 0, 1}));
    h.snap.ledger.push_back(history::charge(9, asked, chat_a, {0, 0, 1}, 801));
    h.snap.chats[0].available = {0, 0, 7};
    h.snap.events.push_back({"cancel_requested", chat_a, asked, ""});
    CHECK(h.failed() == "");
    h.find(op::cancel, asked).cancel_requested = false;
    CHECK(h.failed() == cancel_xor_start + "," + cancelled_never_charged);
  }

  TEST_CASE("11: an uncertain job charged by anything but resolve succeeded "
            "is caught") {
    history h;
    // The worker's stale commit instead of the reconciler's resolve.
    auto& r = h.find(op::resolve, unknown_job);
    r.what = op::commit;
    r.resolution.clear();
    CHECK(h.failed() == uncertain_charged_by_resolve);
  }

  TEST_CASE("11: an uncertain job resolved failed and charged is caught") {
    history h;
    auto failed = h.answered(op::resolve, chat_f, unknown_job, 4600, {});
    failed.resolution = "failed";
    h.rec.add(failed);
    CHECK(h.failed() == uncertain_charged_by_resolve);
  }

  TEST_CASE("11: a resolve succeeded without its ledger row is caught") {
    history h;
    auto& ledger = h.snap.ledger;
    ledger.erase(std::remove_if(
                   ledger.begin(), ledger.end(),
                   [](const auto& l) { return l.reservation == unknown_job; }),
                 ledger.end());
    h.snap.chats.back().available = {0, 0, 2};
    h.grant_of(106).charged = 0; // nothing charged it, as the chat says
    CHECK(h.failed() == uncertain_charged_by_resolve);
  }

  TEST_CASE("12: a job still uncertain after the run is caught") {
    history h;
    h.snap.uncertain.push_back({32, chat_f, "", at(4700)});
    h.snap.events.push_back({"reconcile_needed", chat_f, 32, "prov-32"});
    CHECK(h.failed() == nothing_left_uncertain);
  }

  TEST_CASE("2, 13: refills in the ledger are conserved; a refill with no "
            "row is caught") {
    // chat_b's window refilled 2 credits away and one daily message in;
    // chat_d's 1 credit stayed.
    history h;
    h.snap.ledger.push_back(history::refill_row(5, chat_b, {1, 0, -2}, 6100));
    h.snap.chats[1].available = {1, 0, 0};
    h.snap.chats[1].window = 1;
    CHECK(h.failed() == "");
    h.snap.ledger.pop_back(); // the refill changed the pockets, no row says so
    h.snap.chats[1].window = 0;
    CHECK(h.failed() == conservation + "," + ledger_chain);
  }

  TEST_CASE("2: a ledger that opens with other pockets than create-chat was "
            "asked for is caught") {
    history h;
    h.opened[chat_d] = {0, 0, 2};
    h.snap.chats[3].available = {0, 0, 2}; // the chain itself is whole
    CHECK(h.failed() == conservation);
  }

  TEST_CASE("13: a row whose pockets do not follow from the row before it is "
            "caught, and so is one that records none") {
    history h;
    auto& row = h.snap.ledger[0]; // chat_a's charge: {0, 1, 5} -> {0, 0, 5}
    row.has_after = true;
    row.after = {0, 0, 6};
    CHECK(h.failed() == ledger_chain);
    auto result = h.run();
    // The forged row does not start where create-chat's row ended, and the
    // chat's pockets are not where its last row (chained to the forged
    // one) ends.
    CHECK(result.invariants[12].violations == 2);
    h.snap.ledger[0].after = {0, 0, 5};
    CHECK(h.failed() == "");
    auto chain = h.chained();
    chain.ledger[6].has_after = false; // the first row after the openings
    CHECK(audit(h.rec, h.initial, chain, h.limits).invariants[12].violations
          >= 1);
  }

  TEST_CASE("1: a charge that an admin change cut short passes only when it "
            "emptied the pocket") {
    // An admin took chat_a's daily image within the window before the
    // commit took it: the commit charged nothing of it (it had none), as
    // the clamp says. (A refill no longer cuts a hold short: its own
    // window pays for it, see 17.)
    history h;
    h.snap.ledger.insert(h.snap.ledger.begin(),
                         history::admin_row(0, chat_a, {0, -1, 0}, 90));
    h.snap.ledger[1].charged = {0, 0, 0};
    h.snap.ledger[1].changed = {0, 0, 0};
    h.find(op::commit, committed).amounts = {0, 0, 0};
    h.snap.chats[0].available = {0, 0, 8};
    CHECK(h.failed() == "");
    // The same charge with the image still there is a charge cut short.
    h.snap.ledger.erase(h.snap.ledger.begin());
    h.snap.chats[0].available = {0, 1, 8};
    CHECK(h.failed() == charged_once);
  }

  TEST_CASE("14: a release whose event was lost, or written twice, is "
            "caught") {
    history h;
    h.snap.events.pop_back(); // the release of `swept`
    CHECK(h.failed() == event_with_each_change);
    history twice;
    twice.snap.events.push_back(twice.snap.events.back());
    CHECK(twice.failed() == event_with_each_change);
  }

  TEST_CASE("14: an event without its change, and a job of unknown outcome "
            "without reconcile_needed, are caught") {
    history h;
    h.snap.events.push_back(
      {"reservation_released", chat_a, committed, "sweep_timeout"});
    CHECK(h.failed() == event_with_each_change);
    history lost;
    lost.snap.events.erase(lost.snap.events.begin()); // reconcile_needed
    CHECK(lost.failed() == event_with_each_change);
  }

  TEST_CASE("14: a cancel answered cancel_requested needs its event; one "
            "whose answer was lost may have written it") {
    constexpr reservation_id asked = 15;
    history h;
    h.rec.add(h.reserved(chat_d, asked, 700, {0, 0, 1}));
    h.rec.add(h.answered(op::start, chat_d, asked, 710, {0, 0, 1}));
    auto cancel = h.answered(op::cancel, chat_d, asked, 720, {0, 0, 1});
    cancel.cancel_requested = true;
    h.rec.add(cancel);
    h.rec.add(h.answered(op::fail, chat_d, asked, 800, {0, 0, 1}));
    CHECK(h.failed() == event_with_each_change);
    h.snap.events.push_back({"cancel_requested", chat_d, asked, ""});
    CHECK(h.failed() == "");
    auto& sent = h.find(op::cancel, asked);
    sent.result = static_cast<uint8_t>(outcome::transport);
    sent.cancel_requested = false;
    CHECK(h.failed() == "");
  }

  TEST_CASE("15: an acknowledged reservation Postgres has no trace of (lost "
            "with a failover) is caught; one still active or only charged "
            "passes") {
    auto of = [](reservation_id id) {
      return [id](const persistence::audit_ended& x) {
        return x.id == id;
      };
    };
    history h;
    h.snap.ended.erase(
      std::find_if(h.snap.ended.begin(), h.snap.ended.end(), of(cancelled)));
    CHECK(h.failed() == reservation_kept);
    history charged;
    charged.snap.ended.erase(std::find_if(
      charged.snap.ended.begin(), charged.snap.ended.end(), of(committed)));
    CHECK(charged.failed() == "");
  }
}
