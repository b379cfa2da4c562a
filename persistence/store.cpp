// SPDX-License-Identifier: Apache-2.0
// The billing operations: one transaction each.
#include "persistence/store_internal.hpp"
#include "protocol/pockets.hpp"
#include "protocol/validation.hpp"

#include <algorithm>

namespace chargeonce::persistence {

store::store(store_options opts) : impl_(std::make_unique<impl>()) {
  impl_->opts = std::move(opts);
}

store::~store() = default;

int store::connect_backend() {
  try {
    return impl_->connection().backendpid();
  } catch (const std::exception& e) {
    spdlog::warn("connect_backend failed error={}", one_line(e.what()));
    impl_->conn.reset();
    return 0;
  }
}

namespace {

/// One hot operation through the server-side functions: a batch of one.
template <class T>
caf::expected<T> single(store& db, batch_operation op) {
  auto result = db.apply({std::move(op)}).front();
  if (auto err = std::get_if<caf::error>(&result))
    return std::move(*err);
  return std::get<T>(std::move(result));
}

} // namespace

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
  if (impl_->opts.server_functions)
    return single<reservation>(*this,
                               {batch_op::reserve, chat, 0, k, request_id});
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
  if (impl_->opts.server_functions)
    return single<reservation>(*this,
                               {batch_op::start, chat, id, kind::text, {}});
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
  if (impl_->opts.server_functions)
    return single<reservation>(*this,
                               {batch_op::heartbeat, chat, id, kind::text, {}});
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
  if (impl_->opts.server_functions)
    return single<receipt>(*this, {batch_op::commit, chat, id, kind::text, {}});
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
  if (impl_->opts.server_functions)
    return single<reservation>(*this,
                               {batch_op::fail, chat, id, kind::text, {}});
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
  if (impl_->opts.server_functions)
    return single<reservation>(*this,
                               {batch_op::cancel, chat, 0, kind::text, {}});
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
  if (impl_->opts.server_functions)
    return single<chat_status>(*this,
                               {batch_op::status, chat, 0, kind::text, {}});
  if (auto err = validate_chat(chat))
    return err;
  return impl_->run<chat_status>(
    "status", chat, 0, [&](pqxx::work& tx) { return read_status(tx, chat); });
}

} // namespace chargeonce::persistence
