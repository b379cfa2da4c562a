// SPDX-License-Identifier: Apache-2.0
// The billing operations: one transaction each.
#include "persistence/store_internal.hpp"
#include "protocol/pockets.hpp"
#include "protocol/validation.hpp"

#include <algorithm>
#include <iterator>

namespace chargeonce::persistence {

store::store(store_options opts) : impl_(std::make_unique<impl>()) {
  impl_->opts = std::move(opts);
  // Filled on the first connection (impl::learn_ordinals).
  impl_->ordinals = pocket_ordinals{impl_->opts.dsn};
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

namespace {

std::string busy_message(chat_id chat, size_t active, int32_t limit) {
  return "chat " + std::to_string(chat) + " has " + std::to_string(active)
         + " of " + std::to_string(limit) + " jobs active";
}

/// The chat's active reservations, oldest first: its rows by its index,
/// then sorted (OFFSET 0 keeps the planner off the created_at index).
std::vector<reservation> active_of(pqxx::work& tx, chat_id chat,
                                   pocket_ordinals& ordinals) {
  auto rs = tx.exec_params(std::string{"SELECT "} + reservation_columns
                             + " FROM (SELECT * FROM reservations WHERE "
                               "chat_id = $1 OFFSET 0) r "
                               "ORDER BY created_at, id",
                           chat);
  std::vector<reservation> out;
  for (const auto& r : rs)
    out.push_back(to_reservation(r, ordinals));
  return out;
}

/// The chat's active reservations and its jobs of unknown outcome (status
/// outcome_unknown, slot -1), whose holds count too: one statement.
std::vector<reservation> holding_of(pqxx::work& tx, chat_id chat,
                                    pocket_ordinals& ordinals) {
  auto rs = tx.exec_params(
    std::string{"SELECT "} + reservation_columns
      + " FROM reservations WHERE chat_id = $1 UNION ALL SELECT id, chat_id, "
        "kind, 'outcome_unknown', queue, held::text, request_id, "
        "(extract(epoch FROM created_at) * 1000000)::bigint, NULL::bigint, "
        "-1, units, held_units::text, cancel_requested, window_number FROM "
        "uncertain_reservations WHERE chat_id = $1 AND outcome IS NULL",
    chat);
  std::vector<reservation> out;
  for (const auto& r : rs)
    out.push_back(to_reservation(r, ordinals));
  return out;
}

/// The lowest slot below `limit` no active reservation occupies; -1: none,
/// or as many jobs as the limit (a lowered limit leaves slots above it
/// taken).
int32_t free_slot(const std::vector<reservation>& active, int32_t limit) {
  if (active.size() >= static_cast<size_t>(limit))
    return -1;
  for (int32_t slot = 0; slot < limit; ++slot)
    if (std::none_of(active.begin(), active.end(),
                     [&](const reservation& r) { return r.slot == slot; }))
      return slot;
  return -1;
}

/// Lock, read, decide, insert: the row lock makes the slot, the balance
/// check and the hold one step for every writer of this chat.
caf::expected<reservation> reserve_in(pqxx::work& tx, chat_id chat,
                                      const kind& k,
                                      const std::string& request_id,
                                      int32_t units, const store_options& o,
                                      pocket_ordinals& ordinals) {
  auto rs = tx.exec_params(
    "SELECT pockets::text, coalesce(premium_until > now(), false), blocked, "
    "banned, max_active_jobs, window_number FROM chats WHERE chat_id = $1 "
    "FOR UPDATE",
    chat);
  if (rs.empty())
    return caf::make_error(ec::not_found,
                           "unknown chat " + std::to_string(chat));
  // A retry of the same request (after a timeout or a dropped connection)
  // gets its job back, active or ended, with the price decided then: a
  // replay, never a new hold.
  if (auto replay = find_request(tx, chat, request_id, ordinals)) {
    if (replay->kind != k)
      return caf::make_error(ec::invalid_argument,
                             "request_id " + request_id + " of chat "
                               + std::to_string(chat) + " names a "
                               + to_string(replay->kind) + " job, not "
                               + to_string(k));
    return *replay;
  }
  const auto& r = rs[0];
  if (r[3].as<bool>())
    return caf::make_error(ec::chat_banned,
                           "chat " + std::to_string(chat) + " is banned");
  if (r[2].as<bool>())
    return caf::make_error(ec::chat_blocked,
                           "chat " + std::to_string(chat) + " is blocked");
  bool premium = r[1].as<bool>();
  caf::optional<int32_t> own;
  if (!r[4].is_null())
    own = r[4].as<int32_t>();
  auto limit = job_limit(own, premium, o);
  // Beyond one job at once, only the request id tells a double tap from a
  // second job.
  // An id a client made up (auto:) replays, but does not tell a double
  // tap from a second job: here it counts as none.
  if (limit > 1 && (request_id.empty() || is_auto_request_id(request_id)))
    return caf::make_error(
      ec::invalid_argument,
      "chat " + std::to_string(chat) + " runs up to " + std::to_string(limit)
        + " jobs at once: reserve needs a request_id"
        + (request_id.empty() ? "" : " of the caller's own, not an auto: one"));
  // validate_kind found it before the transaction began.
  const auto& spec = *o.products.find_kind(to_string(k));
  auto amounts = ordinals.read(r[0].c_str());
  auto window = r[5].as<int64_t>();
  pocket_choice choice;
  // The refusal order of 0.1.0, where one job at a time made "busy" and
  // "cannot pay" exclusive: pockets that cannot pay even with no job
  // holding anything say so first (insufficient_*), then no free slot
  // (busy), then pockets the other jobs' holds leave short (insufficient_*).
  if (auto code =
        choose_pockets(spec, premium, amounts, std::max(units, 1), choice);
      code != ec::none)
    return caf::make_error(code, cannot_pay_message(chat, spec));
  auto holding = holding_of(tx, chat, ordinals);
  std::vector<reservation> active;
  std::copy_if(holding.begin(), holding.end(), std::back_inserter(active),
               [](const reservation& x) { return is_active(x.status); });
  auto slot = free_slot(active, limit);
  if (slot < 0)
    return caf::make_error(ec::busy, busy_message(chat, active.size(), limit));
  if (auto code = choose_pockets(spec, premium,
                                 left_after(amounts, held_by(holding, window)),
                                 std::max(units, 1), choice);
      code != ec::none)
    return caf::make_error(code, cannot_pay_message(chat, spec));
  // The slot's unique index, as the ON CONFLICT arbiter, is the lock: no
  // other error can pass for busy.
  auto inserted = tx.exec_params(
    std::string{"INSERT INTO reservations (chat_id, kind, queue, held, "
                "request_id, slot, units, held_units, window_number) "
                "VALUES ($1, $2, $3, $4::integer[], $5, $6, $7, "
                "$8::integer[], $9) "
                "ON CONFLICT (chat_id, slot) DO NOTHING RETURNING "}
      + reservation_columns,
    chat, to_string(k), choice.queue, ordinals.text(choice.held), request_id,
    slot, std::max(units, 1), ordinals.text(choice.held_units), window);
  if (inserted.empty())
    return caf::make_error(ec::busy,
                           busy_message(chat, active.size() + 1, limit));
  return to_reservation(inserted[0], ordinals);
}

/// Deletes the reservations `where` selects ($1, $2, ...: `params`), and
/// remembers those with a request id as ended `how`; returns them.
template <class... Ts>
pqxx::result delete_and_remember(pqxx::work& tx, const std::string& where,
                                 const char* how, const Ts&... params) {
  return tx.exec_params(
    std::string{"WITH gone AS (DELETE FROM reservations WHERE "} + where
      + " RETURNING *), " + remember_ended(how) + " SELECT "
      + reservation_columns + " FROM gone",
    params...);
}

} // namespace

int store::backend_pid() const {
  return impl_->conn && impl_->conn->is_open() ? impl_->conn->backendpid() : 0;
}

caf::expected<bool> store::ping() {
  return impl_->run<bool, pqxx::nontransaction>(
    "ping", 0, 0, [](pqxx::nontransaction& tx) -> caf::expected<bool> {
      tx.exec("SELECT 1");
      return true;
    });
}

uint64_t store::connections_made() const {
  return impl_->connections_made;
}

bool store::unavailable() const {
  return impl_->unavailable;
}

// -- operations ---------------------------------------------------------------

caf::expected<chat_status> store::create_chat(const chat_spec& spec) {
  if (auto err = validate_spec(spec))
    return err;
  if (auto err = validate_pockets(impl_->opts.products, spec.initial))
    return err;
  auto premium_us =
    spec.premium_until ? to_unix_micros(*spec.premium_until) : int64_t{0};
  return impl_->run<chat_status>(
    "create_chat", spec.chat, 0,
    [&](pqxx::work& tx) -> caf::expected<chat_status> {
      auto rs = tx.exec_params(
        "INSERT INTO chats (chat_id, pockets, premium_until, "
        "max_active_jobs) VALUES ($1, $2::integer[], CASE WHEN $3 THEN "
          + micros_to_timestamptz("$4::bigint")
          + " END, CASE WHEN $5 THEN $6::integer END) "
            "ON CONFLICT (chat_id) DO NOTHING RETURNING chat_id",
        spec.chat, impl_->ordinals.text(spec.initial),
        static_cast<bool>(spec.premium_until), premium_us,
        static_cast<bool>(spec.max_active_jobs),
        spec.max_active_jobs ? *spec.max_active_jobs : 0);
      if (rs.empty())
        return caf::make_error(ec::already_exists, "chat "
                                                     + std::to_string(spec.chat)
                                                     + " already exists");
      record_opening(tx, spec.chat, "admin", "create_chat");
      return read_status(tx, spec.chat, impl_->opts, impl_->ordinals);
    });
}

caf::expected<reservation> store::reserve(chat_id chat, const kind& k,
                                          const std::string& request_id,
                                          int32_t units) {
  if (impl_->opts.server_functions)
    return single<reservation>(
      *this, {operation_type::reserve, chat, 0, k, request_id, units});
  if (auto err = validate_reserve(chat, k, request_id))
    return err;
  if (auto err = validate_units(units))
    return err;
  if (auto err = validate_kind(impl_->opts.products, k))
    return err;
  return impl_->run<reservation>(
    "reserve", chat, 0, [&](pqxx::work& tx) -> caf::expected<reservation> {
      return reserve_in(tx, chat, k, request_id, units, impl_->opts,
                        impl_->ordinals);
    });
}

caf::expected<reservation> store::start(chat_id chat, reservation_id id,
                                        const std::string& worker) {
  if (impl_->opts.server_functions)
    return single<reservation>(
      *this, {operation_type::start, chat, id, kind::text, {}, 0, worker});
  if (auto err = validate_reservation(chat, id))
    return err;
  if (auto err = validate_worker(worker))
    return err;
  return impl_->run<reservation>(
    "start", chat, id, [&](pqxx::work& tx) -> caf::expected<reservation> {
      if (auto refused = claim(tx, "start", chat, id, worker))
        return refused;
      auto rs = tx.exec_params(
        std::string{"UPDATE reservations SET status = 'in_progress', "
                    "started_at = now() WHERE id = $1 AND chat_id = $2 "
                    "AND status = 'queued' RETURNING "}
          + reservation_columns,
        id, chat);
      if (!rs.empty())
        return to_reservation(rs[0], impl_->ordinals);
      // A worker retrying its start must not be told the job is gone.
      if (auto current = find_active(tx, chat, id, impl_->ordinals))
        return *current;
      return explain_missing(tx, chat, id);
    });
}

caf::expected<reservation> store::heartbeat(chat_id chat, reservation_id id,
                                            const std::string& worker) {
  if (impl_->opts.server_functions)
    return single<reservation>(
      *this, {operation_type::heartbeat, chat, id, kind::text, {}, 0, worker});
  if (auto err = validate_reservation(chat, id))
    return err;
  if (auto err = validate_worker(worker))
    return err;
  auto lease_ms = static_cast<int64_t>(impl_->opts.lease_duration.count());
  return impl_->run<reservation>(
    "heartbeat", chat, id, [&](pqxx::work& tx) -> caf::expected<reservation> {
      if (auto refused = claim(tx, "heartbeat", chat, id, worker))
        return refused;
      auto rs = tx.exec_params(
        std::string{"UPDATE reservations SET lease_expires_at = now() + $3 "
                    "* interval '1 millisecond' WHERE id = $1 AND chat_id = $2 "
                    "AND status = 'in_progress' RETURNING "}
          + reservation_columns,
        id, chat, lease_ms);
      if (!rs.empty())
        return to_reservation(rs[0], impl_->ordinals);
      if (find_active(tx, chat, id, impl_->ordinals))
        return caf::make_error(ec::invalid_state,
                               describe(chat, id) + " was never started");
      return explain_missing(tx, chat, id);
    });
}

caf::expected<receipt> store::commit(chat_id chat, reservation_id id,
                                     int32_t units, const std::string& worker) {
  if (impl_->opts.server_functions)
    return single<receipt>(
      *this, {operation_type::commit, chat, id, kind::text, {}, units, worker});
  if (auto err = validate_reservation(chat, id))
    return err;
  if (auto err = validate_units(units))
    return err;
  if (auto err = validate_worker(worker))
    return err;
  return impl_->run<receipt>(
    "commit", chat, id, [&](pqxx::work& tx) -> caf::expected<receipt> {
      auto locked = tx.exec_params("SELECT pockets::text, window_number "
                                   "FROM chats WHERE chat_id = $1 FOR UPDATE",
                                   chat);
      if (locked.empty())
        return caf::make_error(ec::not_found,
                               "unknown chat " + std::to_string(chat));
      // After the chat's lock, as every writer takes them.
      if (auto refused = claim(tx, "commit", chat, id, worker))
        return refused;
      if (auto done = find_receipt(tx, id, impl_->ordinals)) {
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
      auto held = to_reservation(rs[0], impl_->ordinals);
      if (held.status != reservation_status::in_progress)
        return caf::make_error(ec::invalid_state,
                               describe(chat, id) + " was never started");
      if (units > held.units)
        return caf::make_error(
          ec::invalid_argument,
          describe(chat, id) + " holds " + std::to_string(held.units)
            + " units: a commit of " + std::to_string(units)
            + " units charges more");
      // Exactly the held amounts of the units named, never re-priced; a
      // pocket lowered meanwhile stops at zero (the clamp is part of the
      // contract). A hold of a past window takes nothing more of the daily
      // pockets: its own window's unit paid, and `charged` names it. Under
      // the row lock: the pockets written are the ones just read.
      auto nominal = captured(held.held, held.held_units, held.units, units);
      auto amounts = impl_->ordinals.read(locked[0][0].c_str());
      auto before = amounts;
      auto now_part =
        in_window(nominal, held.window, locked[0][1].as<int64_t>());
      auto charged = take_clamped(amounts, now_part);
      auto past_part = nominal;
      past_part -= now_part;
      charged += without_zeros(past_part);
      auto change = amounts;
      change -= before;
      auto rest = held.held;
      rest -= nominal;
      auto released = without_zeros(rest);
      auto charged_units = units == 0 ? held.units : units;
      tx.exec_params(
        "UPDATE chats SET pockets = $2::integer[] WHERE chat_id = $1", chat,
        impl_->ordinals.text(amounts));
      auto written = tx.exec_params(
        "INSERT INTO ledger (reservation_id, chat_id, kind, charged, units, "
        "released, pockets, changed, window_number) VALUES ($1, $2, $3, "
        "$4::integer[], $5, $6::integer[], $7::integer[], $8::integer[], $9) "
        "RETURNING (extract(epoch FROM committed_at) * 1000000)::bigint",
        id, chat, to_string(held.kind), impl_->ordinals.text(charged),
        charged_units, impl_->ordinals.text(released),
        impl_->ordinals.text(amounts),
        impl_->ordinals.text(without_zeros(change)), held.window);
      delete_and_remember(tx, "id = $1", "committed", id);
      receipt x{id, chat, held.kind, charged,
                from_unix_micros(written[0][0].as<int64_t>())};
      x.units = charged_units;
      x.released = released;
      x.window = held.window;
      return x;
    });
}

caf::expected<reservation> store::fail(chat_id chat, reservation_id id,
                                       const std::string& worker) {
  if (impl_->opts.server_functions)
    return single<reservation>(
      *this, {operation_type::fail, chat, id, kind::text, {}, 0, worker});
  if (auto err = validate_reservation(chat, id))
    return err;
  if (auto err = validate_worker(worker))
    return err;
  return impl_->run<reservation>(
    "fail", chat, id, [&](pqxx::work& tx) -> caf::expected<reservation> {
      if (auto refused = claim(tx, "fail", chat, id, worker))
        return refused;
      auto rs =
        delete_and_remember(tx, "id = $1 AND chat_id = $2", "failed", id, chat);
      if (!rs.empty())
        return to_reservation(rs[0], impl_->ordinals);
      return explain_missing(tx, chat, id);
    });
}

caf::expected<reservation> store::cancel(chat_id chat) {
  return cancel(chat, 0, {});
}

namespace {

/// The job a cancel names: `id`, else the job of `request_id`, else the
/// chat's only active one; 0 with the refusal when there is none or more
/// than one.
caf::expected<reservation_id> cancel_target(pqxx::work& tx, chat_id chat,
                                            reservation_id id,
                                            const std::string& request_id,
                                            pocket_ordinals& ordinals) {
  if (id != 0)
    return id;
  auto unknown = [&]() -> caf::expected<reservation_id> {
    return caf::make_error(ec::not_found,
                           "unknown chat " + std::to_string(chat));
  };
  if (!request_id.empty()) {
    if (auto job = find_request(tx, chat, request_id, ordinals))
      return job->id;
    if (!chat_exists(tx, chat))
      return unknown();
    return caf::make_error(ec::not_found, "chat " + std::to_string(chat)
                                            + " has no job of request_id "
                                            + request_id);
  }
  auto active = active_of(tx, chat, ordinals);
  if (active.size() > 1) {
    std::string ids;
    for (const auto& r : active)
      ids += (ids.empty() ? "" : ", ") + std::to_string(r.id);
    return caf::make_error(
      ec::invalid_argument,
      "chat " + std::to_string(chat) + " has " + std::to_string(active.size())
        + " active reservations (" + ids + "): name the one to cancel");
  }
  if (active.empty()) {
    if (!chat_exists(tx, chat))
      return unknown();
    return caf::make_error(ec::not_found, "chat " + std::to_string(chat)
                                            + " has no reservation");
  }
  return active.front().id;
}

/// A started job's cancel marks it cancel_requested (instead of too_late)
/// when its kind's policy is `request`.
bool cancel_may_request(const catalog& products, const reservation& r) {
  const auto* spec = products.find_kind(to_string(r.kind));
  return r.status == reservation_status::in_progress && spec != nullptr
         && spec->cancel_after_start == cancel_policy::request;
}

} // namespace

caf::expected<reservation> store::cancel(chat_id chat, reservation_id id,
                                         const std::string& request_id) {
  if (impl_->opts.server_functions)
    return single<reservation>(
      *this, {operation_type::cancel, chat, id, kind::text, request_id});
  if (auto err = validate_cancel(chat, id, request_id))
    return err;
  return impl_->run<reservation>(
    "cancel", chat, id, [&](pqxx::work& tx) -> caf::expected<reservation> {
      auto target = cancel_target(tx, chat, id, request_id, impl_->ordinals);
      if (!target)
        return target.error();
      // Conditional on status: a start that won the row lock first leaves
      // nothing to delete, and this transaction sees in_progress below.
      auto rs = delete_and_remember(
        tx, "id = $1 AND chat_id = $2 AND status = 'queued'", "cancelled",
        *target, chat);
      if (!rs.empty())
        return to_reservation(rs[0], impl_->ordinals);
      auto started = find_active(tx, chat, *target, impl_->ordinals);
      if (!started)
        return explain_missing(tx, chat, *target);
      if (!cancel_may_request(impl_->opts.products, *started))
        return caf::make_error(ec::too_late, describe(chat, *target)
                                               + " is already in progress");
      // Conditional on status too: a commit or fail since the read leaves
      // nothing to mark.
      auto marked = tx.exec_params(
        std::string{"UPDATE reservations SET cancel_requested = true WHERE "
                    "id = $1 AND chat_id = $2 AND status = 'in_progress' "
                    "RETURNING "}
          + reservation_columns,
        *target, chat);
      if (!marked.empty())
        return to_reservation(marked[0], impl_->ordinals);
      return explain_missing(tx, chat, *target);
    });
}

caf::expected<chat_status> store::status(chat_id chat) {
  if (impl_->opts.server_functions)
    return single<chat_status>(
      *this, {operation_type::status, chat, 0, kind::text, {}});
  if (auto err = validate_chat(chat))
    return err;
  return impl_->run<chat_status>("status", chat, 0, [&](pqxx::work& tx) {
    return read_status(tx, chat, impl_->opts, impl_->ordinals);
  });
}

} // namespace chargeonce::persistence
