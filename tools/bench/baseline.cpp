// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/baseline.hpp"

#include "persistence/pocket_ordinals.hpp"
#include "persistence/store.hpp"
#include "protocol/errors.hpp"
#include "protocol/time.hpp"
#include "protocol/validation.hpp"

#include <pqxx/pqxx>
#include <spdlog/spdlog.h>

namespace chargeonce::bench {

namespace {

// -- statements ---------------------------------------------------------------

/// Session settings, sent once per connection. synchronous_commit is set
/// explicitly: an acknowledged charge must survive a crash whatever the
/// server's default. Every row these statements insert names a chat that the
/// same statement locked and read, so the reference triggers of 001_schema
/// may skip their check. Generic plans, as the reference's pgbench runs use:
/// no planning per call; and, as chargeonce_apply_batch does, no plan that
/// walks a table: the plan is cached while reservations is nearly empty,
/// and a sequential scan would then slow down with every dead row of the
/// run. Every statement here is a lookup by key.
constexpr const char* session_sql =
  "SET statement_timeout = 5000; SET synchronous_commit = on; "
  "SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off; "
  "SET enable_hashjoin = off; SET enable_mergejoin = off; "
  "SET chargeonce.references_checked = on";

#define CHARGEONCE_RESERVATION_COLUMNS                                         \
  "id, chat_id, kind, status, queue, held, request_id, "                       \
  "(extract(epoch FROM created_at) * 1000000)::bigint AS created_us, "         \
  "(extract(epoch FROM lease_expires_at) * 1000000)::bigint AS lease_us"

/// Lock, decide, hold in one statement: protocol/pockets.cpp's
/// choose_pockets for the built-in catalog, written out as SQL under the
/// chat row's lock (the straightforward design knows its two kinds and the
/// ordinals of their pockets, which catalog_pockets fixes
/// (migrations/003_release_0_2.sql): daily_messages 1, daily_images 2, balance
/// 3); one job per chat, in slot 0: the UNIQUE (chat_id, slot) index, as the ON
/// CONFLICT arbiter, decides busy. The first three columns say why nothing
/// was inserted.
constexpr const char* reserve_sql =
  "WITH c AS ("
  "  SELECT chat_id, coalesce(pockets[1], 0) AS m,"
  "         coalesce(pockets[2], 0) AS i, coalesce(pockets[3], 0) AS b,"
  "         coalesce(premium_until > now(), false) AS premium, blocked,"
  "         banned"
  "    FROM chats WHERE chat_id = $1::bigint FOR UPDATE),"
  "d AS ("
  "  SELECT c.*,"
  "         CASE WHEN $2::text = 'text' THEN"
  "                CASE WHEN premium THEN '{}'::integer[]"
  "                     WHEN m > 0 THEN '{1}'::integer[] END"
  "              WHEN i > 0 THEN '{NULL,1}'::integer[]"
  "              WHEN b > 0 THEN '{NULL,NULL,1}'::integer[] END AS hold"
  "    FROM c),"
  "ins AS ("
  "  INSERT INTO reservations (chat_id, kind, queue, held, request_id)"
  "  SELECT chat_id, $2::text, $2::text || '_generation'"
  "           || CASE WHEN premium THEN '_priority' ELSE '' END,"
  "         hold, $3::text"
  "    FROM d WHERE NOT banned AND NOT blocked AND hold IS NOT NULL"
  "  ON CONFLICT (chat_id, slot) DO NOTHING"
  "  RETURNING " CHARGEONCE_RESERVATION_COLUMNS ")"
  "SELECT d.banned, d.blocked, d.hold IS NOT NULL, ins.* FROM d LEFT JOIN ins "
  "ON true";

constexpr const char* start_sql =
  "UPDATE reservations SET status = 'in_progress', started_at = now() "
  "WHERE id = $1::bigint AND chat_id = $2::bigint AND status = 'queued' "
  "RETURNING " CHARGEONCE_RESERVATION_COLUMNS;

/// The chat row is locked before the reservation row (the DELETE's filter
/// needs c's answer), in the order reserve locks them: a reserve of the
/// same chat waits here instead of deadlocking. Charged is the held amount
/// clamped at what the locked row has, as the UPDATE takes it.
/// Both are computed in the statement (as chargeonce_apply_batch does), not
/// by helper functions that would run a query of their own. A hold of the
/// built-in kinds is on one pocket, its last element, or on none.
constexpr const char* commit_sql =
  "WITH c AS ("
  "  SELECT chat_id, pockets FROM chats WHERE chat_id = $2::bigint FOR UPDATE),"
  "r AS ("
  "  DELETE FROM reservations"
  "   WHERE id = $1::bigint AND chat_id = (SELECT chat_id FROM c)"
  "     AND status = 'in_progress'"
  "  RETURNING id, chat_id, kind, held, cardinality(held) AS p),"
  "m AS ("
  "  SELECT r.*,"
  "         CASE WHEN r.p = 0 THEN '{}'::integer[]"
  "              ELSE array_fill(NULL::integer, ARRAY[r.p - 1])"
  "                   || LEAST(r.held[r.p], coalesce(c.pockets[r.p], 0))"
  "         END AS charged,"
  "         CASE WHEN r.p = 0 THEN c.pockets"
  "              ELSE chargeonce_pockets_set(c.pockets, r.p, GREATEST(0,"
  "                     coalesce(c.pockets[r.p], 0) - r.held[r.p]))"
  "         END AS after"
  "    FROM r, c),"
  "u AS ("
  "  UPDATE chats SET pockets = m.after FROM m WHERE chats.chat_id = m.chat_id)"
  "INSERT INTO ledger (reservation_id, chat_id, kind, charged, pockets)"
  "SELECT id, chat_id, kind, charged, after FROM m "
  "RETURNING kind, charged,"
  "          (extract(epoch FROM committed_at) * 1000000)::bigint";

constexpr const char* fail_sql =
  "DELETE FROM reservations WHERE id = $1::bigint AND chat_id = $2::bigint "
  "RETURNING " CHARGEONCE_RESERVATION_COLUMNS;

constexpr const char* cancel_sql =
  "DELETE FROM reservations WHERE chat_id = $1::bigint AND status = 'queued' "
  "RETURNING " CHARGEONCE_RESERVATION_COLUMNS;

#undef CHARGEONCE_RESERVATION_COLUMNS

struct statement {
  const char* name;
  const char* sql;
};

constexpr statement statements[] = {{"baseline_reserve", reserve_sql},
                                    {"baseline_start", start_sql},
                                    {"baseline_commit", commit_sql},
                                    {"baseline_fail", fail_sql},
                                    {"baseline_cancel", cancel_sql}};

// -- rows ---------------------------------------------------------------------

/// The reservation whose 9 columns start at `at`.
reservation to_reservation(const pqxx::row& r, pqxx::row::size_type at,
                           persistence::pocket_ordinals& ordinals) {
  reservation x;
  x.id = r[at].as<int64_t>();
  x.chat = r[at + 1].as<int64_t>();
  from_string(r[at + 2].as<std::string>(), x.kind);
  from_string(r[at + 3].as<std::string>(), x.status);
  x.queue = r[at + 4].as<std::string>();
  x.held = ordinals.read(r[at + 5].c_str());
  x.request_id = r[at + 6].as<std::string>();
  x.created_at = from_unix_micros(r[at + 7].as<int64_t>());
  if (!r[at + 8].is_null())
    x.lease_expires_at = from_unix_micros(r[at + 8].as<int64_t>());
  return x;
}

/// Why reserve inserted nothing, as the store says it.
caf::error refusal(chat_id chat, const kind& k, const pqxx::row& r) {
  auto name = "chat " + std::to_string(chat);
  if (r[0].as<bool>())
    return caf::make_error(ec::chat_banned, name + " is banned");
  if (r[1].as<bool>())
    return caf::make_error(ec::chat_blocked, name + " is blocked");
  if (!r[2].as<bool>())
    return caf::make_error(k == kind::text ? ec::insufficient_messages
                                           : ec::insufficient_images,
                           name + " cannot pay for " + to_string(k));
  return caf::make_error(ec::busy, name + " has an active reservation");
}

} // namespace

// -- connection ---------------------------------------------------------------

struct baseline_store::impl {
  std::string dsn;
  std::unique_ptr<pqxx::connection> conn;
  /// The pockets' names of the arrays read, loaded on each connection.
  persistence::pocket_ordinals ordinals;
  /// The rare answers (a replayed request, a retried start or commit, a
  /// reservation that is gone) come from the server's store on a
  /// connection of its own, opened only when first needed: they are never
  /// measured, and so give exactly the server's answers with no second copy
  /// of its explanations. No bench cycle takes this path.
  std::unique_ptr<persistence::store> rare;

  pqxx::connection& connection() {
    if (!conn || !conn->is_open()) {
      conn.reset();
      auto fresh = std::make_unique<pqxx::connection>(dsn);
      pqxx::nontransaction setup{*fresh};
      setup.exec(session_sql);
      for (const auto& s : statements)
        fresh->prepare(s.name, s.sql);
      ordinals.load(setup);
      conn = std::move(fresh);
    }
    return *conn;
  }

  persistence::store& rare_answers() {
    if (!rare) {
      rare =
        std::make_unique<persistence::store>(persistence::store_options{dsn});
    }
    return *rare;
  }

  /// Runs one prepared statement in autocommit: the statement is the
  /// transaction, so BEGIN and COMMIT cost no round trips of their own.
  template <class... Ts>
  pqxx::result exec(const char* name, Ts&&... args) {
    pqxx::nontransaction tx{connection()};
    return tx.exec_prepared(name, std::forward<Ts>(args)...);
  }

  /// Business answers come from `f`; anything thrown is an outage, and the
  /// connection is rebuilt on the next call rather than trusted.
  template <class T, class F>
  caf::expected<T> run(const char* op, F f) {
    try {
      return f();
    } catch (const std::exception& e) {
      conn.reset();
      spdlog::error("baseline storage_unavailable op={} error={}", op,
                    e.what());
      return caf::make_error(ec::storage_unavailable,
                             std::string{op} + ": " + e.what());
    }
  }
};

baseline_store::baseline_store(std::string dsn)
    : impl_(std::make_unique<impl>()) {
  impl_->dsn = std::move(dsn);
}

baseline_store::~baseline_store() = default;

caf::error baseline_store::connect() {
  auto done = impl_->run<bool>("connect", [&] {
    auto& conn = impl_->connection();
    for (const auto& s : statements)
      conn.prepare_now(s.name);
    return true;
  });
  return done ? caf::error{} : done.error();
}

int baseline_store::connect_backend() {
  if (connect())
    return 0;
  return impl_->conn->backendpid();
}

// -- operations ---------------------------------------------------------------

caf::expected<reservation>
baseline_store::reserve(chat_id chat, const kind& k,
                        const std::string& request_id) {
  if (auto err = validate_reserve(chat, k, request_id))
    return err;
  return impl_->run<reservation>(
    "reserve", [&]() -> caf::expected<reservation> {
      auto rs = impl_->exec("baseline_reserve", chat, to_string(k), request_id);
      if (rs.empty())
        return caf::make_error(ec::not_found,
                               "unknown chat " + std::to_string(chat));
      if (!rs[0][3].is_null())
        return to_reservation(rs[0], 3, impl_->ordinals);
      // A retry of the same request gets its reservation back: decided
      // again by the store, under the chat row's lock.
      if (!request_id.empty())
        return impl_->rare_answers().reserve(chat, k, request_id);
      return refusal(chat, k, rs[0]);
    });
}

caf::expected<reservation> baseline_store::start(chat_id chat,
                                                 reservation_id id) {
  if (auto err = validate_reservation(chat, id))
    return err;
  return impl_->run<reservation>("start", [&]() -> caf::expected<reservation> {
    auto rs = impl_->exec("baseline_start", id, chat);
    if (!rs.empty())
      return to_reservation(rs[0], 0, impl_->ordinals);
    return impl_->rare_answers().start(chat, id);
  });
}

caf::expected<receipt> baseline_store::commit(chat_id chat, reservation_id id) {
  if (auto err = validate_reservation(chat, id))
    return err;
  return impl_->run<receipt>("commit", [&]() -> caf::expected<receipt> {
    auto rs = impl_->exec("baseline_commit", id, chat);
    if (rs.empty()) // committed already, never started, gone: the store says
      return impl_->rare_answers().commit(chat, id);
    const auto& r = rs[0];
    receipt out;
    out.reservation = id;
    out.chat = chat;
    from_string(r[0].as<std::string>(), out.kind);
    out.charged = impl_->ordinals.read(r[1].c_str());
    out.committed_at = from_unix_micros(r[2].as<int64_t>());
    return out;
  });
}

caf::expected<reservation> baseline_store::fail(chat_id chat,
                                                reservation_id id) {
  if (auto err = validate_reservation(chat, id))
    return err;
  return impl_->run<reservation>("fail", [&]() -> caf::expected<reservation> {
    auto rs = impl_->exec("baseline_fail", id, chat);
    if (!rs.empty())
      return to_reservation(rs[0], 0, impl_->ordinals);
    return impl_->rare_answers().fail(chat, id);
  });
}

caf::expected<reservation> baseline_store::cancel(chat_id chat) {
  if (auto err = validate_chat(chat))
    return err;
  return impl_->run<reservation>("cancel", [&]() -> caf::expected<reservation> {
    auto rs = impl_->exec("baseline_cancel", chat);
    if (!rs.empty())
      return to_reservation(rs[0], 0, impl_->ordinals);
    return impl_->rare_answers().cancel(chat);
  });
}

} // namespace chargeonce::bench
