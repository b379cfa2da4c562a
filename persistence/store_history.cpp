// SPDX-License-Identifier: Apache-2.0
// The support view: a chat's history (its ledger rows, newest first, keyset
// pages on the (chat_id, id) index, with its reservations merged in by
// time) and `explain`. Read-only; neither runs on the hot path.
#include "persistence/history_sql.hpp"
#include "persistence/store_internal.hpp"
#include "protocol/validation.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

namespace chargeonce::persistence {

using namespace detail;

namespace {

/// The bounds of the first and the last page, in microseconds since the
/// epoch: before any row and after any (the year 3000), and within what
/// Postgres's timestamps and intervals hold.
constexpr int64_t no_bound_low = 0;
constexpr int64_t no_bound_high = 32503680000LL * 1000000;

/// The ledger's entry as the support view names its cause.
std::string cause_of(const std::string& entry) {
  return entry == "charge" ? "commit" : entry;
}

/// The signed change a ledger row made: a top-up's credits, else its
/// `changed`; a commit written before commits named their window kept no
/// `changed`: less what it charged.
pockets change_of(const std::string& entry, const pockets& charged,
                  int32_t credited, const pockets& changed, bool window_known) {
  pockets out;
  if (entry == "charge" && !window_known) {
    for (const auto& [name, amount] : charged.items())
      if (amount != 0)
        out.set(name, -amount);
  } else if (entry == "top_up") {
    out.set(pocket::balance, credited);
  } else if (entry == "charge") {
    for (const auto& [name, amount] : changed.items())
      if (amount != 0)
        out.set(name, amount);
  } else {
    out = changed;
  }
  return out;
}

/// The committed_at of the chat's ledger row `before` (its page's upper
/// bound), or no_bound_high for the newest page. not_found for an unknown
/// chat, invalid_argument for a row of another chat or none.
caf::expected<int64_t> upper_bound_of(pqxx::work& tx, chat_id chat,
                                      int64_t before) {
  auto rs =
    tx.exec_params("SELECT (SELECT chargeonce_us(committed_at) FROM ledger "
                   "WHERE id = $2 AND chat_id = $1) FROM chats "
                   "WHERE chat_id = $1",
                   chat, before);
  if (rs.empty())
    return caf::make_error(ec::not_found,
                           "unknown chat " + std::to_string(chat));
  if (before == 0)
    return no_bound_high;
  if (rs[0][0].is_null())
    return caf::make_error(ec::invalid_argument,
                           "before=" + std::to_string(before)
                             + " names no ledger row of chat "
                             + std::to_string(chat));
  return rs[0][0].as<int64_t>();
}

/// A ledger row's or a hold's grants, as chargeonce_grant_parts writes
/// them (functions/11_support.sql); a malformed array is a bug, and
/// nlohmann's exceptions are classified as one.
std::vector<grant_part> grant_parts_from_json(const std::string& text) {
  std::vector<grant_part> out;
  for (const auto& j : nlohmann::json::parse(text))
    out.push_back(
      {j.at("grant").get<int64_t>(), j.at("credits").get<int32_t>()});
  return out;
}

/// Up to `limit` + 1 ledger rows of `chat` below `before` (0: the newest),
/// newest first, each with the request id its reservation had when one is
/// still known.
std::vector<history_entry> read_ledger_rows(pqxx::work& tx, chat_id chat,
                                            int64_t before, uint32_t limit,
                                            pocket_ordinals& ordinals) {
  auto rs =
    tx.exec_params(history_ledger_sql, chat,
                   before == 0 ? std::numeric_limits<int64_t>::max() : before,
                   int64_t{limit} + 1);
  std::vector<history_entry> out;
  out.reserve(rs.size());
  for (const auto& r : rs) {
    history_entry x;
    x.ledger_id = r[0].as<int64_t>();
    x.at = from_unix_micros(r[1].as<int64_t>());
    auto entry = r[2].as<std::string>();
    x.cause = cause_of(entry);
    x.detail = r[3].as<std::string>();
    x.reservation = r[4].as<int64_t>();
    x.kind = r[5].as<std::string>();
    x.payment_id = r[6].as<std::string>();
    if (!r[14].is_null())
      x.window = r[14].as<int64_t>();
    x.change =
      change_of(entry, ordinals.read(r[7].c_str()), r[8].as<int32_t>(),
                ordinals.read(r[9].c_str()), static_cast<bool>(x.window));
    if (!r[10].is_null())
      x.after = ordinals.read(r[10].c_str());
    if (entry == "charge") {
      x.units = r[11].as<int32_t>();
      x.released = ordinals.read(r[12].c_str());
    }
    x.request_id = r[13].as<std::string>();
    x.grants = grant_parts_from_json(r[15].as<std::string>());
    out.push_back(std::move(x));
  }
  return out;
}

/// When the sweep releases an active job: a queued or started one at the
/// earlier of its lease and created_at + sweep-timeout, an uncertain one at
/// reconcile-timeout after it went uncertain; none once it ended.
caf::optional<caf::timestamp>
deadline_of(const std::string& status, caf::timestamp created,
            const caf::optional<caf::timestamp>& lease,
            const caf::optional<caf::timestamp>& uncertain,
            const store_options& o) {
  if (status == "outcome_unknown" && uncertain)
    return *uncertain + o.reconcile_timeout;
  if (status != "queued" && status != "in_progress")
    return caf::none;
  auto hard = created + o.sweep_timeout;
  return lease ? std::min(*lease, hard) : hard;
}

/// The chat's reservations whose time lies in (low, high], newest first;
/// true in `truncated` when more than history_reservations_max did.
std::vector<history_entry> read_reservation_events(pqxx::work& tx, chat_id chat,
                                                   int64_t low, int64_t high,
                                                   const store_options& o,
                                                   pocket_ordinals& ordinals,
                                                   bool& truncated) {
  auto rs = tx.exec_params(history_reservations_sql, chat, low, high,
                           int64_t{history_reservations_max} + 1);
  truncated = rs.size() > history_reservations_max;
  std::vector<history_entry> out;
  for (const auto& r : rs) {
    if (out.size() == history_reservations_max)
      break;
    history_entry x;
    x.cause = "reservation";
    x.reservation = r[0].as<int64_t>();
    x.kind = r[1].as<std::string>();
    x.status = r[2].as<std::string>();
    x.detail = r[3].as<std::string>();
    x.request_id = r[4].as<std::string>();
    x.held = ordinals.read(r[5].c_str());
    x.units = r[6].as<int32_t>();
    x.created_at = optional_micros(r[7]);
    x.at = from_unix_micros(r[8].as<int64_t>());
    x.cancel_requested = r[10].as<bool>();
    if (!r[12].is_null())
      x.window = r[12].as<int64_t>();
    x.grants = grant_parts_from_json(r[13].as<std::string>());
    if (x.created_at)
      x.deadline = deadline_of(x.status, *x.created_at, optional_micros(r[9]),
                               optional_micros(r[11]), o);
    out.push_back(std::move(x));
  }
  return out;
}

/// The ledger rows (newest id first) and the reservations (newest first)
/// as one timeline. A merge, not a sort: rows of one chat are ordered by id
/// even where two transactions' times (their start) are out of that order.
/// At the same time, the ledger row first.
std::vector<history_entry> merged(std::vector<history_entry> rows,
                                  std::vector<history_entry> events) {
  std::vector<history_entry> out;
  out.reserve(rows.size() + events.size());
  auto r = rows.begin();
  auto e = events.begin();
  while (r != rows.end() || e != events.end()) {
    if (e == events.end() || (r != rows.end() && r->at >= e->at))
      out.push_back(std::move(*r++));
    else
      out.push_back(std::move(*e++));
  }
  return out;
}

caf::expected<history_page> read_history(pqxx::work& tx, chat_id chat,
                                         int64_t before, uint32_t limit,
                                         const store_options& o,
                                         pocket_ordinals& ordinals) {
  auto high = upper_bound_of(tx, chat, before);
  if (!high)
    return std::move(high.error());
  history_page page;
  page.chat = chat;
  page.entries = read_ledger_rows(tx, chat, before, limit, ordinals);
  // A page's reservations are those after its oldest row; the last page
  // takes every older one.
  auto low = no_bound_low;
  if (page.entries.size() > limit) {
    page.entries.pop_back();
    page.next_before = page.entries.back().ledger_id;
    low = to_unix_micros(page.entries.back().at);
  }
  auto events =
    read_reservation_events(tx, chat, low, *high, o, ordinals, page.truncated);
  page.entries = merged(std::move(page.entries), std::move(events));
  return page;
}

std::string plan_reason_of(const chat_status& x) {
  if (!x.premium_until)
    return "never premium";
  return (x.premium ? "premium until " : "premium ended ")
         + format_iso8601(*x.premium_until);
}

} // namespace

caf::expected<history_page> store::history(chat_id chat, int64_t before,
                                           uint32_t limit) {
  if (auto err = validate_history(chat, before, limit))
    return err;
  return impl_->run<history_page>("history", chat, 0, [&](pqxx::work& tx) {
    return read_history(tx, chat, before, limit, impl_->opts, impl_->ordinals);
  });
}

caf::expected<chat_explanation> store::explain(chat_id chat) {
  if (auto err = validate_chat(chat))
    return err;
  const auto& o = impl_->opts;
  return impl_->run<chat_explanation>(
    "explain", chat, 0, [&](pqxx::work& tx) -> caf::expected<chat_explanation> {
      auto status = read_status(tx, chat, o, impl_->ordinals);
      if (!status)
        return std::move(status.error());
      auto recent =
        read_history(tx, chat, 0, explain_history_entries, o, impl_->ordinals);
      if (!recent)
        return std::move(recent.error());
      chat_explanation out;
      out.status = std::move(*status);
      out.plan_reason = plan_reason_of(out.status);
      if (out.status.window_started_at)
        out.next_refill_at = *out.status.window_started_at + o.refill_interval;
      out.refill_interval_ms = o.refill_interval.count();
      for (const auto& r : out.status.reservations)
        out.deadlines.push_back(deadline_of(to_string(r.status), r.created_at,
                                            r.lease_expires_at, r.uncertain_at,
                                            o));
      out.recent = std::move(*recent);
      if (out.recent.entries.size() > explain_history_entries)
        out.recent.entries.resize(explain_history_entries);
      return out;
    });
}

} // namespace chargeonce::persistence
