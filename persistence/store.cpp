// SPDX-License-Identifier: Apache-2.0
#include "persistence/store.hpp"

#include "protocol/errors.hpp"
#include "protocol/pockets.hpp"
#include "protocol/time.hpp"
#include "protocol/validation.hpp"
#include "protocol/window.hpp"

#include <pqxx/pqxx>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <tuple>

namespace chargeonce::persistence {

namespace {

/// SQLSTATE of unique_violation: the only database error that means busy.
constexpr const char* unique_violation_sqlstate = "23505";

// -- row mapping --------------------------------------------------------------

constexpr const char* reservation_columns =
  "id, chat_id, kind, status, queue, held_daily_messages, "
  "held_daily_images, held_balance, request_id, "
  "(extract(epoch FROM created_at) * 1000000)::bigint, "
  "(extract(epoch FROM lease_expires_at) * 1000000)::bigint";

/// A bigint SQL parameter `$n` turned into a timestamptz without floating
/// point: whole seconds plus microseconds.
std::string micros_to_timestamptz(const char* param) {
  return std::string{"(to_timestamp("} + param + " / 1000000) + (" + param
         + " % 1000000) * interval '1 microsecond')";
}

kind parse_kind(const pqxx::field& f) {
  kind k = kind::text;
  from_string(f.as<std::string>(), k);
  return k;
}

reservation to_reservation(const pqxx::row& r) {
  reservation x;
  x.id = r[0].as<int64_t>();
  x.chat = r[1].as<int64_t>();
  x.kind = parse_kind(r[2]);
  from_string(r[3].as<std::string>(), x.status);
  x.queue = r[4].as<std::string>();
  x.held = {r[5].as<int32_t>(), r[6].as<int32_t>(), r[7].as<int32_t>()};
  x.request_id = r[8].as<std::string>();
  x.created_at = from_unix_micros(r[9].as<int64_t>());
  if (!r[10].is_null())
    x.lease_expires_at = from_unix_micros(r[10].as<int64_t>());
  return x;
}

caf::optional<reservation> find_reservation_of_chat(pqxx::work& tx,
                                                    chat_id chat) {
  auto rs = tx.exec_params(std::string{"SELECT "} + reservation_columns
                             + " FROM reservations WHERE chat_id = $1",
                           chat);
  if (rs.empty())
    return caf::none;
  return to_reservation(rs[0]);
}

caf::expected<chat_status> read_status(pqxx::work& tx, chat_id chat) {
  auto rs = tx.exec_params(
    "SELECT daily_messages, daily_images, balance, "
    "(extract(epoch FROM premium_until) * 1000000)::bigint, "
    "coalesce(premium_until > now(), false), started, blocked, banned, "
    "(extract(epoch FROM window_started_at) * 1000000)::bigint, "
    "(extract(epoch FROM last_activity_at) * 1000000)::bigint "
    "FROM chats WHERE chat_id = $1",
    chat);
  if (rs.empty())
    return caf::make_error(ec::not_found,
                           "unknown chat " + std::to_string(chat));
  const auto& r = rs[0];
  auto optional_time = [&](int i) -> caf::optional<caf::timestamp> {
    if (r[i].is_null())
      return caf::none;
    return from_unix_micros(r[i].as<int64_t>());
  };
  chat_status x;
  x.chat = chat;
  x.available = {r[0].as<int32_t>(), r[1].as<int32_t>(), r[2].as<int32_t>()};
  x.premium_until = optional_time(3);
  x.premium = r[4].as<bool>();
  x.started = r[5].as<bool>();
  x.blocked = r[6].as<bool>();
  x.banned = r[7].as<bool>();
  x.window_started_at = optional_time(8);
  x.last_activity_at = optional_time(9);
  x.active = find_reservation_of_chat(tx, chat);
  return x;
}

bool chat_exists(pqxx::work& tx, chat_id chat) {
  return !tx.exec_params("SELECT 1 FROM chats WHERE chat_id = $1", chat)
            .empty();
}

caf::optional<receipt> find_receipt(pqxx::work& tx, reservation_id id) {
  auto rs = tx.exec_params(
    "SELECT chat_id, kind, charged_daily_messages, charged_daily_images, "
    "charged_balance, (extract(epoch FROM committed_at) * 1000000)::bigint "
    "FROM ledger WHERE reservation_id = $1",
    id);
  if (rs.empty())
    return caf::none;
  const auto& r = rs[0];
  receipt x;
  x.reservation = id;
  x.chat = r[0].as<int64_t>();
  x.kind = parse_kind(r[1]);
  x.charged = {r[2].as<int32_t>(), r[3].as<int32_t>(), r[4].as<int32_t>()};
  x.committed_at = from_unix_micros(r[5].as<int64_t>());
  return x;
}

/// libpq messages span lines; a log line and an error context must not.
std::string one_line(const char* text) {
  std::string out{text};
  for (auto& c : out)
    if (c == '\n' || c == '\t' || c == '\r')
      c = ' ';
  while (!out.empty() && out.back() == ' ')
    out.pop_back();
  return out;
}

std::string describe(chat_id chat, reservation_id id) {
  return "reservation " + std::to_string(id) + " of chat "
         + std::to_string(chat);
}

/// The chat a released reservation belonged to, if the sweeper released it
/// within the retention period.
caf::optional<chat_id> released_owner(pqxx::work& tx, reservation_id id) {
  auto rs = tx.exec_params(
    "SELECT chat_id FROM released_reservations WHERE id = $1", id);
  if (rs.empty())
    return caf::none;
  return rs[0][0].as<int64_t>();
}

/// Why reservation `id` is not an active reservation of `chat`: it belongs to
/// another chat, it was committed already, the sweeper released it (fencing:
/// expired), or it is simply gone.
caf::error explain_missing(pqxx::work& tx, chat_id chat, reservation_id id) {
  auto owner =
    tx.exec_params("SELECT chat_id FROM reservations WHERE id = $1", id);
  if (!owner.empty() && owner[0][0].as<int64_t>() != chat)
    return caf::make_error(ec::invalid_argument, "reservation "
                                                   + std::to_string(id)
                                                   + " does not belong to chat "
                                                   + std::to_string(chat));
  if (auto done = find_receipt(tx, id)) {
    if (done->chat != chat)
      return caf::make_error(ec::invalid_argument,
                             "reservation " + std::to_string(id)
                               + " does not belong to chat "
                               + std::to_string(chat));
    return caf::make_error(ec::invalid_state,
                           describe(chat, id) + " was already committed");
  }
  if (auto owner = released_owner(tx, id)) {
    if (*owner != chat)
      return caf::make_error(ec::invalid_argument,
                             "reservation " + std::to_string(id)
                               + " does not belong to chat "
                               + std::to_string(chat));
    return caf::make_error(ec::expired,
                           describe(chat, id) + " was released by the sweeper");
  }
  if (!chat_exists(tx, chat))
    return caf::make_error(ec::not_found,
                           "unknown chat " + std::to_string(chat));
  return caf::make_error(ec::not_found, describe(chat, id) + " is gone");
}

} // namespace

// -- connection handling ------------------------------------------------------

struct store::impl {
  store_options opts;
  std::unique_ptr<pqxx::connection> conn;

  pqxx::connection& connection() {
    if (!conn || !conn->is_open()) {
      conn.reset();
      auto fresh = std::make_unique<pqxx::connection>(opts.dsn);
      pqxx::nontransaction setup{*fresh};
      setup.exec("SET statement_timeout = "
                 + std::to_string(opts.statement_timeout.count()));
      setup.commit();
      conn = std::move(fresh);
    }
    return *conn;
  }

  caf::error unavailable(const char* op, chat_id chat, reservation_id id,
                         const std::string& sqlstate, const char* what) {
    // A failed connection is rebuilt on the next call rather than trusted.
    conn.reset();
    auto text = one_line(what);
    spdlog::error("storage_unavailable op={} chat={} reservation={} "
                  "sqlstate={} error={}",
                  op, chat, id, sqlstate.empty() ? "-" : sqlstate, text);
    return caf::make_error(ec::storage_unavailable,
                           std::string{op} + ": " + text);
  }

  /// Runs `fn` in one transaction and commits only if it produced a value.
  /// Business errors come back from `fn`; anything thrown is an outage.
  template <class T, class F>
  caf::expected<T> run(const char* op, chat_id chat, reservation_id id,
                       F&& fn) {
    try {
      pqxx::work tx{connection()};
      caf::expected<T> result = fn(tx);
      if (result)
        tx.commit();
      return result;
    } catch (const pqxx::sql_error& e) {
      return unavailable(op, chat, id, e.sqlstate(), e.what());
    } catch (const pqxx::in_doubt_error& e) {
      return unavailable(op, chat, id, {}, e.what());
    } catch (const pqxx::broken_connection& e) {
      return unavailable(op, chat, id, {}, e.what());
    } catch (const std::exception& e) {
      return unavailable(op, chat, id, {}, e.what());
    }
  }
};

store::store(store_options opts) : impl_(std::make_unique<impl>()) {
  impl_->opts = std::move(opts);
}

store::~store() = default;

int store::backend_pid() const {
  return impl_->conn && impl_->conn->is_open() ? impl_->conn->backendpid() : 0;
}

// -- operations ---------------------------------------------------------------

caf::expected<chat_status> store::create_chat(const chat_spec& spec) {
  if (auto err = validate_spec(spec))
    return err;
  auto premium_us =
    spec.premium_until ? to_unix_micros(*spec.premium_until) : int64_t{0};
  return impl_->run<chat_status>(
    "create_chat", spec.chat, 0,
    [&](pqxx::work& tx) -> caf::expected<chat_status> {
      auto rs = tx.exec_params(
        "INSERT INTO chats (chat_id, daily_messages, daily_images, balance, "
        "premium_until) VALUES ($1, $2, $3, $4, CASE WHEN $5 THEN "
          + micros_to_timestamptz("$6::bigint")
          + " END) ON CONFLICT (chat_id) DO NOTHING RETURNING chat_id",
        spec.chat, spec.initial.daily_messages, spec.initial.daily_images,
        spec.initial.balance, static_cast<bool>(spec.premium_until),
        premium_us);
      if (rs.empty())
        return caf::make_error(ec::already_exists, "chat "
                                                     + std::to_string(spec.chat)
                                                     + " already exists");
      return read_status(tx, spec.chat);
    });
}

caf::expected<reservation> store::reserve(chat_id chat, kind k,
                                          const std::string& request_id) {
  if (auto err = validate_reserve(chat, k, request_id))
    return err;
  return impl_->run<reservation>(
    "reserve", chat, 0, [&](pqxx::work& tx) -> caf::expected<reservation> {
      // Lock, read, decide, insert: the row lock makes the balance check and
      // the hold one step for every writer of this chat.
      auto rs = tx.exec_params(
        "SELECT daily_messages, daily_images, balance, "
        "coalesce(premium_until > now(), false), blocked, banned "
        "FROM chats WHERE chat_id = $1 FOR UPDATE",
        chat);
      if (rs.empty())
        return caf::make_error(ec::not_found,
                               "unknown chat " + std::to_string(chat));
      // A retry of the same request (after a timeout or a dropped
      // connection) gets its reservation back, with the price decided then.
      // Under the chat lock this sees every committed reservation; it is a
      // replay, never the busy decision, which stays with the index.
      if (auto replay = find_reservation_of_chat(tx, chat);
          replay && !request_id.empty() && replay->request_id == request_id
          && replay->kind == k)
        return *replay;
      const auto& r = rs[0];
      if (r[5].as<bool>())
        return caf::make_error(ec::chat_banned,
                               "chat " + std::to_string(chat) + " is banned");
      if (r[4].as<bool>())
        return caf::make_error(ec::chat_blocked,
                               "chat " + std::to_string(chat) + " is blocked");
      pockets available{r[0].as<int32_t>(), r[1].as<int32_t>(),
                        r[2].as<int32_t>()};
      pocket_choice choice;
      if (auto code = choose_pockets(k, r[3].as<bool>(), available, choice);
          code != ec::none)
        return caf::make_error(code, "chat " + std::to_string(chat)
                                       + " cannot pay for " + to_string(k));
      try {
        auto inserted = tx.exec_params(
          std::string{"INSERT INTO reservations (chat_id, kind, queue, "
                      "held_daily_messages, held_daily_images, held_balance, "
                      "request_id) VALUES ($1, $2, $3, $4, $5, $6, $7) "
                      "RETURNING "}
            + reservation_columns,
          chat, to_string(k), choice.queue, choice.held.daily_messages,
          choice.held.daily_images, choice.held.balance, request_id);
        return to_reservation(inserted[0]);
      } catch (const pqxx::sql_error& e) {
        // The index, not a SELECT beforehand, is the guarantee; and only its
        // own SQLSTATE means busy. Anything else is an outage, rethrown.
        if (e.sqlstate() != unique_violation_sqlstate)
          throw;
        return caf::make_error(ec::busy, "chat " + std::to_string(chat)
                                           + " has an active reservation");
      }
    });
}

caf::expected<reservation> store::start(chat_id chat, reservation_id id) {
  if (auto err = validate_reservation(chat, id))
    return err;
  return impl_->run<reservation>(
    "start", chat, id, [&](pqxx::work& tx) -> caf::expected<reservation> {
      auto rs = tx.exec_params(
        std::string{"UPDATE reservations SET status = 'in_progress', "
                    "started_at = now() WHERE id = $1 AND chat_id = $2 "
                    "AND status = 'queued' RETURNING "}
          + reservation_columns,
        id, chat);
      if (!rs.empty())
        return to_reservation(rs[0]);
      // A worker retrying its start must not be told the job is gone.
      if (auto current = find_reservation_of_chat(tx, chat);
          current && current->id == id)
        return *current;
      return explain_missing(tx, chat, id);
    });
}

caf::expected<reservation> store::heartbeat(chat_id chat, reservation_id id) {
  if (auto err = validate_reservation(chat, id))
    return err;
  auto lease_ms = static_cast<int64_t>(impl_->opts.lease_duration.count());
  return impl_->run<reservation>(
    "heartbeat", chat, id, [&](pqxx::work& tx) -> caf::expected<reservation> {
      auto rs = tx.exec_params(
        std::string{"UPDATE reservations SET lease_expires_at = now() + $3 "
                    "* interval '1 millisecond' WHERE id = $1 AND chat_id = $2 "
                    "AND status = 'in_progress' RETURNING "}
          + reservation_columns,
        id, chat, lease_ms);
      if (!rs.empty())
        return to_reservation(rs[0]);
      if (auto current = find_reservation_of_chat(tx, chat);
          current && current->id == id)
        return caf::make_error(ec::invalid_state,
                               describe(chat, id) + " was never started");
      return explain_missing(tx, chat, id);
    });
}

caf::expected<receipt> store::commit(chat_id chat, reservation_id id) {
  if (auto err = validate_reservation(chat, id))
    return err;
  return impl_->run<receipt>(
    "commit", chat, id, [&](pqxx::work& tx) -> caf::expected<receipt> {
      auto locked = tx.exec_params(
        "SELECT daily_messages, daily_images, balance FROM chats "
        "WHERE chat_id = $1 FOR UPDATE",
        chat);
      if (locked.empty())
        return caf::make_error(ec::not_found,
                               "unknown chat " + std::to_string(chat));
      if (auto done = find_receipt(tx, id)) {
        if (done->chat != chat)
          return explain_missing(tx, chat, id);
        return *done; // idempotent: the first receipt, nothing charged again
      }
      auto rs = tx.exec_params(std::string{"SELECT "} + reservation_columns
                                 + " FROM reservations WHERE id = $1 "
                                   "FOR UPDATE",
                               id);
      if (rs.empty() || rs[0][1].as<int64_t>() != chat)
        return explain_missing(tx, chat, id);
      auto held = to_reservation(rs[0]);
      if (held.status != reservation_status::in_progress)
        return caf::make_error(ec::invalid_state,
                               describe(chat, id) + " was never started");
      // Exactly the held amounts, never re-priced; a pocket lowered meanwhile
      // stops at zero (the clamp is part of the contract).
      const auto& row = locked[0];
      pockets charged{std::min(held.held.daily_messages, row[0].as<int32_t>()),
                      std::min(held.held.daily_images, row[1].as<int32_t>()),
                      std::min(held.held.balance, row[2].as<int32_t>())};
      tx.exec_params("UPDATE chats SET "
                     "daily_messages = GREATEST(0, daily_messages - $2), "
                     "daily_images = GREATEST(0, daily_images - $3), "
                     "balance = GREATEST(0, balance - $4) WHERE chat_id = $1",
                     chat, held.held.daily_messages, held.held.daily_images,
                     held.held.balance);
      auto written = tx.exec_params(
        "INSERT INTO ledger (reservation_id, chat_id, kind, "
        "charged_daily_messages, charged_daily_images, charged_balance) "
        "VALUES ($1, $2, $3, $4, $5, $6) "
        "RETURNING (extract(epoch FROM committed_at) * 1000000)::bigint",
        id, chat, to_string(held.kind), charged.daily_messages,
        charged.daily_images, charged.balance);
      tx.exec_params("DELETE FROM reservations WHERE id = $1", id);
      return receipt{id, chat, held.kind, charged,
                     from_unix_micros(written[0][0].as<int64_t>())};
    });
}

caf::expected<reservation> store::fail(chat_id chat, reservation_id id) {
  if (auto err = validate_reservation(chat, id))
    return err;
  return impl_->run<reservation>(
    "fail", chat, id, [&](pqxx::work& tx) -> caf::expected<reservation> {
      auto rs = tx.exec_params(std::string{"DELETE FROM reservations "
                                           "WHERE id = $1 AND chat_id = $2 "
                                           "RETURNING "}
                                 + reservation_columns,
                               id, chat);
      if (!rs.empty())
        return to_reservation(rs[0]);
      return explain_missing(tx, chat, id);
    });
}

caf::expected<reservation> store::cancel(chat_id chat) {
  if (auto err = validate_chat(chat))
    return err;
  return impl_->run<reservation>(
    "cancel", chat, 0, [&](pqxx::work& tx) -> caf::expected<reservation> {
      // Conditional on status: a start that won the row lock first leaves
      // nothing to delete, and this transaction sees in_progress below.
      auto rs = tx.exec_params(std::string{"DELETE FROM reservations "
                                           "WHERE chat_id = $1 AND "
                                           "status = 'queued' RETURNING "}
                                 + reservation_columns,
                               chat);
      if (!rs.empty())
        return to_reservation(rs[0]);
      if (auto current = find_reservation_of_chat(tx, chat))
        return caf::make_error(ec::too_late, describe(chat, current->id)
                                               + " is already in progress");
      if (!chat_exists(tx, chat))
        return caf::make_error(ec::not_found,
                               "unknown chat " + std::to_string(chat));
      return caf::make_error(ec::not_found, "chat " + std::to_string(chat)
                                              + " has no reservation");
    });
}

caf::expected<chat_status> store::status(chat_id chat) {
  if (auto err = validate_chat(chat))
    return err;
  return impl_->run<chat_status>(
    "status", chat, 0, [&](pqxx::work& tx) { return read_status(tx, chat); });
}

// -- sweeping -----------------------------------------------------------------

namespace {

/// The keyset query of one sweep phase. Both use their own index: the
/// `>=` bound is an index condition, the row comparison breaks ties.
std::string sweep_query(sweep_phase phase) {
  const char* column =
    phase == sweep_phase::lease ? "lease_expires_at" : "created_at";
  const char* due = phase == sweep_phase::lease
                      ? "lease_expires_at < now()"
                      : "created_at < now() - $4 * interval '1 millisecond'";
  auto after = micros_to_timestamptz("$1::bigint");
  return std::string{"SELECT id, chat_id, (extract(epoch FROM "} + column
         + ") * 1000000)::bigint FROM reservations WHERE " + due + " AND "
         + column + " >= " + after + " AND (" + column + ", id) > (" + after
         + ", $2) ORDER BY " + column + ", id LIMIT $3";
}

} // namespace

caf::expected<std::vector<sweep_candidate>>
store::sweep_chunk(const sweep_cursor& after, uint32_t limit) {
  auto timeout_ms = static_cast<int64_t>(impl_->opts.sweep_timeout.count());
  using result_type = std::vector<sweep_candidate>;
  return impl_->run<result_type>(
    "sweep", 0, after.reservation,
    [&](pqxx::work& tx) -> caf::expected<result_type> {
      auto rs = after.phase == sweep_phase::lease
                  ? tx.exec_params(sweep_query(after.phase), after.at_us,
                                   after.reservation, limit)
                  : tx.exec_params(sweep_query(after.phase), after.at_us,
                                   after.reservation, limit, timeout_ms);
      result_type out;
      out.reserve(rs.size());
      for (const auto& r : rs)
        out.push_back(sweep_candidate{
          r[1].as<int64_t>(),
          sweep_cursor{after.phase, r[2].as<int64_t>(), r[0].as<int64_t>()}});
      return out;
    });
}

caf::expected<reservation_released> store::release(chat_id chat,
                                                   reservation_id id) {
  if (auto err = validate_reservation(chat, id))
    return err;
  auto timeout_ms = static_cast<int64_t>(impl_->opts.sweep_timeout.count());
  return impl_->run<reservation_released>(
    "release", chat, id,
    [&](pqxx::work& tx) -> caf::expected<reservation_released> {
      // Deadline re-checked under the row lock: a heartbeat or a commit that
      // came first wins, and the row is left alone.
      auto rs = tx.exec_params(
        "WITH gone AS (DELETE FROM reservations WHERE id = $1 AND chat_id = $2 "
        "AND (created_at < now() - $3 * interval '1 millisecond' "
        "OR lease_expires_at < now()) RETURNING id, chat_id, "
        "CASE WHEN lease_expires_at < now() THEN 'lease_expired' "
        "ELSE 'sweep_timeout' END AS reason) "
        "INSERT INTO released_reservations (id, chat_id, reason) "
        "SELECT id, chat_id, reason FROM gone RETURNING reason",
        id, chat, timeout_ms);
      if (rs.empty())
        return caf::make_error(ec::not_found, describe(chat, id)
                                                + " is not past its deadline");
      return reservation_released{chat, id, rs[0][0].as<std::string>()};
    });
}

caf::expected<uint64_t> store::prune() {
  constexpr int64_t chunk_rows_max = 1000;
  constexpr int chunks_max = 1000; // a bound, not a goal: 1M rows per call
  auto retention_ms =
    static_cast<int64_t>(impl_->opts.release_retention.count());
  uint64_t total = 0;
  for (int i = 0; i < chunks_max; ++i) {
    auto deleted = impl_->run<uint64_t>(
      "prune", 0, 0, [&](pqxx::work& tx) -> caf::expected<uint64_t> {
        auto rs = tx.exec_params(
          "DELETE FROM released_reservations WHERE id IN (SELECT id FROM "
          "released_reservations WHERE released_at < now() - $1 * interval "
          "'1 millisecond' ORDER BY released_at LIMIT $2)",
          retention_ms, chunk_rows_max);
        return static_cast<uint64_t>(rs.affected_rows());
      });
    if (!deleted)
      return deleted;
    total += *deleted;
    if (*deleted < static_cast<uint64_t>(chunk_rows_max))
      break;
  }
  return total;
}

// -- limits and purchases -----------------------------------------------------

namespace {

/// `daily_* = <quota of the chat's plan now>`, as an UPDATE's SET list; $n
/// and $n+1 are the free quota, $n+2 and $n+3 the premium one.
std::string refill_to_quota(int n) {
  auto p = [&](int i) {
    return "$" + std::to_string(n + i) + "::integer";
  };
  std::string premium = "coalesce(premium_until > now(), false)";
  return "daily_messages = CASE WHEN " + premium + " THEN " + p(2) + " ELSE "
         + p(0) + " END, daily_images = CASE WHEN " + premium + " THEN " + p(3)
         + " ELSE " + p(1) + " END";
}

} // namespace

caf::expected<chat_status> store::touch(chat_id chat) {
  if (auto err = validate_chat(chat))
    return err;
  const auto& o = impl_->opts;
  auto interval = std::chrono::duration_cast<caf::timespan>(o.refill_interval);
  return impl_->run<chat_status>(
    "touch", chat, 0, [&](pqxx::work& tx) -> caf::expected<chat_status> {
      // A new chat starts on the free plan with its first window open.
      tx.exec_params("INSERT INTO chats (chat_id, daily_messages, "
                     "daily_images, window_started_at, last_activity_at) "
                     "VALUES ($1, $2, $3, now(), now()) "
                     "ON CONFLICT (chat_id) DO NOTHING",
                     chat, o.free_plan.daily_messages,
                     o.free_plan.daily_images);
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
        tx.exec_params("UPDATE chats SET last_activity_at = now(), "
                       "window_started_at = now(), "
                         + refill_to_quota(2) + " WHERE chat_id = $1",
                       chat, o.free_plan.daily_messages,
                       o.free_plan.daily_images, o.premium_plan.daily_messages,
                       o.premium_plan.daily_images);
        spdlog::info("window refilled chat={}", chat);
        break;
      }
      return read_status(tx, chat);
    });
}

caf::expected<top_up_receipt> store::top_up(chat_id chat, int64_t credits,
                                            const std::string& payment_id) {
  if (auto err = validate_top_up(chat, credits, payment_id))
    return err;
  return impl_->run<top_up_receipt>(
    "top_up", chat, 0, [&](pqxx::work& tx) -> caf::expected<top_up_receipt> {
      auto locked = tx.exec_params(
        "SELECT balance FROM chats WHERE chat_id = $1 FOR UPDATE", chat);
      if (locked.empty())
        return caf::make_error(ec::not_found,
                               "unknown chat " + std::to_string(chat));
      // Under the chat lock, a retry of the same purchase sees the first.
      auto first =
        tx.exec_params("SELECT chat_id, credited_balance, "
                       "(extract(epoch FROM committed_at) * 1000000)::bigint "
                       "FROM ledger WHERE payment_id = $1",
                       payment_id);
      if (!first.empty()) {
        top_up_receipt x{first[0][0].as<int64_t>(), payment_id,
                         first[0][1].as<int32_t>(),
                         from_unix_micros(first[0][2].as<int64_t>())};
        if (x.chat != chat || x.credits != credits)
          return caf::make_error(
            ec::invalid_argument,
            "payment_id " + payment_id + " was already used for "
              + std::to_string(x.credits) + " credits of chat "
              + std::to_string(x.chat));
        return x;
      }
      if (locked[0][0].as<int64_t>() + credits
          > std::numeric_limits<int32_t>::max())
        return caf::make_error(ec::invalid_argument, "balance of chat "
                                                       + std::to_string(chat)
                                                       + " would overflow");
      tx.exec_params("UPDATE chats SET balance = balance + $2 "
                     "WHERE chat_id = $1",
                     chat, credits);
      try {
        auto written = tx.exec_params(
          "INSERT INTO ledger (entry, chat_id, payment_id, credited_balance, "
          "charged_daily_messages, charged_daily_images, charged_balance) "
          "VALUES ('top_up', $1, $2, $3, 0, 0, 0) "
          "RETURNING (extract(epoch FROM committed_at) * 1000000)::bigint",
          chat, payment_id, credits);
        spdlog::info("top_up chat={} payment_id={} credits={}", chat,
                     payment_id, credits);
        return top_up_receipt{chat, payment_id, static_cast<int32_t>(credits),
                              from_unix_micros(written[0][0].as<int64_t>())};
      } catch (const pqxx::sql_error& e) {
        // The same payment_id committed for another chat in the meantime.
        if (e.sqlstate() != unique_violation_sqlstate)
          throw;
        return caf::make_error(ec::invalid_argument,
                               "payment_id " + payment_id
                                 + " was already used for another chat");
      }
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
      return read_status(tx, chat);
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
      return read_status(tx, chat);
    });
}

caf::expected<reactivation_page>
store::reactivation_chunk(const reactivation_cursor& after, uint32_t limit) {
  const auto& o = impl_->opts;
  auto after_ts = micros_to_timestamptz("$1::bigint");
  // The WHERE clause repeats the partial index's predicate so that the
  // planner walks that index; FOR UPDATE re-checks each row, so a chat
  // touched meanwhile is skipped.
  auto query =
    "WITH due AS (SELECT chat_id, last_activity_at FROM chats "
    "WHERE started AND NOT blocked AND NOT banned "
    "AND last_activity_at IS NOT NULL "
    "AND (reactivated_at IS NULL OR reactivated_at < last_activity_at) "
    "AND last_activity_at < now() - $3 * interval '1 millisecond' "
    "AND last_activity_at >= "
    + after_ts + " AND (last_activity_at, chat_id) > (" + after_ts
    + ", $2) ORDER BY last_activity_at, chat_id LIMIT $4 FOR UPDATE) "
      "UPDATE chats c SET reactivated_at = now(), window_started_at = NULL, "
    + refill_to_quota(5)
    + " FROM due WHERE c.chat_id = due.chat_id RETURNING c.chat_id, "
      "(extract(epoch FROM due.last_activity_at) * 1000000)::bigint";
  return impl_->run<reactivation_page>(
    "reactivate", 0, 0,
    [&](pqxx::work& tx) -> caf::expected<reactivation_page> {
      auto rs = tx.exec_params(
        query, after.at_us, after.chat,
        static_cast<int64_t>(o.reactivation_after.count()), limit,
        o.free_plan.daily_messages, o.free_plan.daily_images,
        o.premium_plan.daily_messages, o.premium_plan.daily_images);
      reactivation_page page;
      page.next = after;
      for (const auto& r : rs) {
        reactivation_cursor c{r[1].as<int64_t>(), r[0].as<int64_t>()};
        page.chats.push_back(c.chat);
        if (std::tie(c.at_us, c.chat)
            > std::tie(page.next.at_us, page.next.chat))
          page.next = c;
      }
      return page;
    });
}

} // namespace chargeonce::persistence
