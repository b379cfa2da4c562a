// SPDX-License-Identifier: Apache-2.0
// Daily windows, purchases, premium, flags and reactivation.
#include "persistence/store_internal.hpp"
#include "protocol/validation.hpp"
#include "protocol/window.hpp"

#include <limits>
#include <tuple>

namespace chargeonce::persistence {

// -- limits and purchases -----------------------------------------------------

namespace {

/// The ledger row of a refill, as the end of a statement whose CTEs `b`
/// (pockets before) and `a` (pockets and window number after, of chat
/// `chat`) are given, its change `change` (refill_change_sql): nothing
/// when no pocket changed (the window number moves all the same).
std::string record_refill(const char* detail, const char* chat,
                          const std::string& change) {
  return std::string{"INSERT INTO ledger (entry, detail, chat_id, changed, "
                     "pockets, window_number) SELECT 'refill', '"}
         + detail + "', " + chat + ", " + change
         + ", a.pockets, a.window_number FROM a, b "
           "WHERE a.pockets <> b.pockets";
}

/// CTEs `clock` and `announced`: one limits_refilled event per chat of CTE
/// `refilled`, numbered at once in one step of the event clock, so that a
/// million refills are not numbered again by the readers
/// (chargeonce_number_events, functions/10_events.sql). The clock's row lock is
/// taken after `refilled` is complete, so after every chat lock of the page.
std::string announce_refills() {
  return "clock AS (UPDATE event_clock SET last_id = last_id + "
         "(SELECT count(*) FROM refilled) WHERE EXISTS (SELECT 1 FROM "
         "refilled) RETURNING last_id), "
         "announced AS (INSERT INTO events (id, event, chat_id) "
         "SELECT clock.last_id - r.n + r.i, 'limits_refilled', r.chat_id "
         "FROM clock, (SELECT chat_id, row_number() OVER (ORDER BY chat_id) "
         "AS i, count(*) OVER () AS n FROM refilled) r)";
}

} // namespace

caf::expected<chat_status> store::touch(chat_id chat) {
  if (auto err = validate_chat(chat))
    return err;
  const auto& o = impl_->opts;
  auto interval = std::chrono::duration_cast<caf::timespan>(o.refill_interval);
  const auto& free_quotas = impl_->free_quotas_text;
  const auto& premium_quotas = impl_->premium_quotas_text;
  return impl_->run<chat_status>(
    "touch", chat, 0, [&](pqxx::work& tx) -> caf::expected<chat_status> {
      // A new chat starts on the free plan with its first window open: its
      // ledger opens with that window's refill.
      auto created = tx.exec_params("INSERT INTO chats (chat_id, pockets, "
                                    "window_started_at, last_activity_at) "
                                    "VALUES ($1, $2::integer[], now(), now()) "
                                    "ON CONFLICT (chat_id) DO NOTHING "
                                    "RETURNING chat_id",
                                    chat, free_quotas);
      if (!created.empty())
        record_opening(tx, chat, "refill", "window");
      auto rs = tx.exec_params(
        "SELECT (extract(epoch FROM window_started_at) * 1000000)::bigint, "
        "(extract(epoch FROM now()) * 1000000)::bigint "
        "FROM chats WHERE chat_id = $1 FOR UPDATE",
        chat);
      caf::optional<caf::timestamp> started;
      if (!rs[0][0].is_null())
        started = from_unix_micros(rs[0][0].as<int64_t>());
      auto now = from_unix_micros(rs[0][1].as<int64_t>());
      switch (on_activity(started, now, interval)) {
      case window_action::none:
        tx.exec_params("UPDATE chats SET last_activity_at = now() "
                       "WHERE chat_id = $1",
                       chat);
        break;
      case window_action::open:
        tx.exec_params("UPDATE chats SET last_activity_at = now(), "
                       "window_started_at = now() WHERE chat_id = $1",
                       chat);
        break;
      case window_action::refill:
        tx.exec_params(
          "WITH b AS (SELECT pockets FROM chats WHERE chat_id = $1), "
          "a AS (UPDATE chats SET last_activity_at = now(), "
          "window_started_at = now(), window_number = window_number + 1, "
            + impl_->refill_to_quota
            + " WHERE chat_id = $1 RETURNING pockets, window_number) "
            + record_refill("window", "$1", impl_->refill_change),
          chat, free_quotas, premium_quotas);
        spdlog::info("window refilled chat={}", chat);
        break;
      }
      return read_status(tx, chat, impl_->opts, impl_->ordinals);
    });
}

namespace {

/// A top-up's answer (chargeonce_grant_answer) as its receipt. A top-up of
/// 0.2 names no grant: the terms of then.
top_up_receipt receipt_of(const pqxx::row& r, const std::string& payment_id) {
  top_up_receipt out{r["chat_id"].as<int64_t>(), payment_id,
                     r["credits"].as<int32_t>(),
                     from_unix_micros(r["committed_us"].as<int64_t>())};
  if (r["grant_id"].is_null())
    return out;
  out.grant_id = r["grant_id"].as<int64_t>();
  out.source = r["source"].as<std::string>();
  out.priority = r["priority"].as<int32_t>();
  out.expires_at = optional_micros(r["expires_us"]);
  out.expires_in_ms =
    r["expires_in_ms"].is_null() ? 0 : r["expires_in_ms"].as<int64_t>();
  return out;
}

/// A grant as chargeonce_grant_answer gives it.
grant_info grant_of(const pqxx::row& r) {
  grant_info out;
  out.id = r["grant_id"].as<int64_t>();
  out.chat = r["chat_id"].as<int64_t>();
  out.source = r["source"].as<std::string>();
  out.credits = r["credits"].as<int32_t>();
  out.left = r["left_credits"].as<int32_t>();
  out.held = r["held"].as<int32_t>();
  out.priority = r["priority"].as<int32_t>();
  out.expires_at = optional_micros(r["expires_us"]);
  out.payment_id =
    r["payment_id"].is_null() ? "" : r["payment_id"].as<std::string>();
  out.created_at = from_unix_micros(r["created_us"].as<int64_t>());
  out.expired_at = optional_micros(r["expired_us"]);
  out.voided_at = optional_micros(r["voided_us"]);
  out.expired =
    !r["ended"].is_null() && r["ended"].as<std::string>() == "expire";
  out.voided = !r["ended"].is_null() && r["ended"].as<std::string>() == "void";
  return out;
}

} // namespace

caf::expected<grant_info> store::void_grant(chat_id chat, int64_t grant,
                                            const std::string& payment_id) {
  if (auto err = validate_void_grant(chat, grant, payment_id))
    return err;
  return impl_->run<grant_info>(
    "void_grant", chat, 0, [&](pqxx::work& tx) -> caf::expected<grant_info> {
      auto rs = tx.exec_params(
        "SELECT * FROM chargeonce_void_grant($1, nullif($2::bigint, 0), "
        "nullif($3, ''))",
        chat, grant, payment_id);
      const auto& r = rs[0];
      if (r["outcome"].as<std::string>() != "ok")
        return refusal_of(r);
      auto out = grant_of(r);
      spdlog::info("void_grant chat={} grant={} left={} held={}", chat, out.id,
                   out.left, out.held);
      return out;
    });
}

caf::expected<top_up_receipt> store::top_up(chat_id chat, int64_t credits,
                                            const std::string& payment_id,
                                            const grant_terms& terms) {
  if (auto err = validate_top_up(chat, credits, payment_id, terms))
    return err;
  // functions/12_grants.sql, chargeonce_top_up: NULL terms are its
  // defaults, and a retry compares the terms as given; expiry-notice lets
  // it write credits_expiring at once for a grant that expires sooner.
  auto expires_us = terms.expires_at ? to_unix_micros(*terms.expires_at) : 0;
  return impl_->run<top_up_receipt>(
    "top_up", chat, 0, [&](pqxx::work& tx) -> caf::expected<top_up_receipt> {
      auto rs = tx.exec_params(
        "SELECT outcome, message, chat_id, credits, committed_us, grant_id, "
        "source, priority, expires_us, expires_in_ms "
        "FROM chargeonce_top_up($1, $2::integer, $3, CASE WHEN $4 THEN "
          + micros_to_timestamptz("$5::bigint")
          + " END, nullif($6::bigint, 0), $7::integer, $8, $9::bigint)",
        chat, credits, payment_id, static_cast<bool>(terms.expires_at),
        expires_us, terms.expires_in_ms, terms.priority, terms.source,
        static_cast<int64_t>(impl_->opts.expiry_notice.count()));
      const auto& r = rs[0];
      if (r["outcome"].as<std::string>() != "ok")
        return refusal_of(r);
      auto out = receipt_of(r, payment_id);
      spdlog::info("top_up chat={} payment_id={} credits={} grant={} "
                   "source={} priority={}",
                   chat, payment_id, credits, out.grant_id, out.source,
                   out.priority);
      return out;
    });
}

caf::expected<chat_status> store::set_premium(chat_id chat,
                                              caf::timestamp until) {
  if (auto err = validate_chat(chat))
    return err;
  return impl_->run<chat_status>(
    "set_premium", chat, 0, [&](pqxx::work& tx) -> caf::expected<chat_status> {
      auto rs = tx.exec_params("UPDATE chats SET premium_until = "
                                 + micros_to_timestamptz("$2::bigint")
                                 + " WHERE chat_id = $1 RETURNING chat_id",
                               chat, to_unix_micros(until));
      if (rs.empty())
        return caf::make_error(ec::not_found,
                               "unknown chat " + std::to_string(chat));
      // No amount changes, the plan does: support reads it in the history.
      record_admin(tx, chat, "set_premium");
      return read_status(tx, chat, impl_->opts, impl_->ordinals);
    });
}

caf::expected<chat_status> store::set_flags(chat_id chat,
                                            const flags_update& x) {
  if (auto err = validate_chat(chat))
    return err;
  auto given = [](const caf::optional<bool>& f) {
    return static_cast<bool>(f);
  };
  auto value = [](const caf::optional<bool>& f) {
    return f ? *f : false;
  };
  return impl_->run<chat_status>(
    "set_flags", chat, 0, [&](pqxx::work& tx) -> caf::expected<chat_status> {
      auto rs = tx.exec_params(
        "UPDATE chats SET started = CASE WHEN $2 THEN $3 ELSE started END, "
        "blocked = CASE WHEN $4 THEN $5 ELSE blocked END, "
        "banned = CASE WHEN $6 THEN $7 ELSE banned END "
        "WHERE chat_id = $1 RETURNING chat_id",
        chat, given(x.started), value(x.started), given(x.blocked),
        value(x.blocked), given(x.banned), value(x.banned));
      if (rs.empty())
        return caf::make_error(ec::not_found,
                               "unknown chat " + std::to_string(chat));
      return read_status(tx, chat, impl_->opts, impl_->ordinals);
    });
}

caf::expected<chat_status> store::set_limits(chat_id chat,
                                             const limits_update& x) {
  if (auto err = validate_chat(chat))
    return err;
  if (auto err = validate_limits(x))
    return err;
  auto shown = [](bool set, const caf::optional<int32_t>& v) {
    return !set ? std::string{"unchanged"}
           : v  ? std::to_string(*v)
                : std::string{"default"};
  };
  return impl_->run<chat_status>(
    "set_limits", chat, 0, [&](pqxx::work& tx) -> caf::expected<chat_status> {
      auto rs = tx.exec_params(
        "UPDATE chats SET max_active_jobs = CASE WHEN NOT $2 THEN "
        "max_active_jobs WHEN $3 THEN $4::integer END, "
        "balance_low_threshold = CASE WHEN NOT $5 THEN balance_low_threshold "
        "WHEN $6 THEN $7::integer END WHERE chat_id = $1 RETURNING chat_id",
        chat, x.set_max_active_jobs, static_cast<bool>(x.max_active_jobs),
        x.max_active_jobs ? *x.max_active_jobs : 0, x.set_balance_low_threshold,
        static_cast<bool>(x.balance_low_threshold),
        x.balance_low_threshold ? *x.balance_low_threshold : 0);
      if (rs.empty())
        return caf::make_error(ec::not_found,
                               "unknown chat " + std::to_string(chat));
      spdlog::info("limits chat={} max_active_jobs={} balance_low_threshold={}",
                   chat, shown(x.set_max_active_jobs, x.max_active_jobs),
                   shown(x.set_balance_low_threshold, x.balance_low_threshold));
      return read_status(tx, chat, impl_->opts, impl_->ordinals);
    });
}

caf::expected<reactivation_page>
store::reactivation_chunk(const reactivation_cursor& after, uint32_t limit) {
  const auto& o = impl_->opts;
  return impl_->run<reactivation_page>(
    "reactivate", 0, 0,
    [&](pqxx::work& tx) -> caf::expected<reactivation_page> {
      auto after_ts = micros_to_timestamptz("$1::bigint");
      // Which chats are due, without locks (the WHERE clause repeats the
      // partial index's predicate so that the planner walks that index);
      // then their rows are locked in chat-id order, as every writer locks
      // chats, with the predicate checked again on the locked rows: a chat
      // touched meanwhile is skipped. The page's last (last_activity_at,
      // chat_id) is the cursor, whether or not its chats were refilled.
      const std::string due_predicate =
        "started AND NOT blocked AND NOT banned "
        "AND last_activity_at IS NOT NULL "
        "AND (reactivated_at IS NULL OR reactivated_at < last_activity_at) "
        "AND last_activity_at < now() - $3 * interval '1 millisecond' ";
      auto query =
        "WITH page AS (SELECT chat_id, last_activity_at FROM chats WHERE "
        + due_predicate + "AND last_activity_at >= " + after_ts
        + " AND (last_activity_at, chat_id) > (" + after_ts
        + ", $2) ORDER BY last_activity_at, chat_id LIMIT $4), "
          "due AS (SELECT chat_id, last_activity_at, pockets AS before "
          "FROM chats WHERE chat_id IN (SELECT chat_id FROM page) AND "
        + due_predicate
        + "ORDER BY chat_id FOR UPDATE), "
          "refilled AS (UPDATE chats c SET reactivated_at = now(), "
          "window_started_at = NULL, window_number = c.window_number + 1, "
        + refill_to_quota_sql(o.products, impl_->ordinals, 5)
        + " FROM due WHERE c.chat_id = due.chat_id RETURNING c.chat_id, "
          "due.before, c.pockets AS after, c.window_number), "
          "booked AS (INSERT INTO ledger (entry, detail, chat_id, changed, "
          "pockets, window_number) SELECT 'refill', 'reactivation', "
          "chat_id, "
        + refill_change_sql(o.products, impl_->ordinals, "before", "after")
        + ", after, window_number FROM refilled WHERE after <> before "
          "ORDER BY chat_id), "
        + announce_refills()
        + " SELECT p.chat_id, "
          "(extract(epoch FROM p.last_activity_at) * 1000000)::bigint, "
          "r.chat_id IS NOT NULL FROM page p LEFT JOIN refilled r "
          "ON r.chat_id = p.chat_id";
      // Each ledger row names a chat this statement has locked: the
      // per-row check that it exists (a trigger) can be skipped.
      tx.exec("SET LOCAL chargeonce.references_checked = 'on'");
      auto rs = tx.exec_params(
        query, after.at_us, after.chat,
        static_cast<int64_t>(o.reactivation_after.count()), limit,
        impl_->free_quotas_text, impl_->premium_quotas_text);
      reactivation_page page;
      page.next = after;
      page.more = rs.size() == limit;
      for (const auto& r : rs) {
        reactivation_cursor c{r[1].as<int64_t>(), r[0].as<int64_t>()};
        if (r[2].as<bool>())
          page.chats.push_back(c.chat);
        if (std::tie(c.at_us, c.chat)
            > std::tie(page.next.at_us, page.next.chat))
          page.next = c;
      }
      return page;
    });
}

} // namespace chargeonce::persistence
