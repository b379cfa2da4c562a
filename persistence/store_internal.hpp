// SPDX-License-Identifier: Apache-2.0
// Private to persistence/store*.cpp: row mapping, the SQL shared by several
// operations, and the connection handling behind every transaction.
#pragma once

#include "persistence/batch.hpp"
#include "persistence/connection.hpp"
#include "persistence/failure.hpp"
#include "persistence/health.hpp"
#include "persistence/pocket_ordinals.hpp"
#include "persistence/store.hpp"
#include "protocol/errors.hpp"
#include "protocol/pockets.hpp"
#include "protocol/time.hpp"

#include <pqxx/pqxx>
#include <spdlog/spdlog.h>

#include <array>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace chargeonce::persistence {

namespace detail {

/// SQLSTATE of unique_violation: the only database error that means busy.
inline constexpr const char* unique_violation_sqlstate = "23505";

/// The prepared statement that applies a batch
/// (persistence/functions/09_batch.sql).
inline constexpr const char* apply_statement = "chargeonce_apply_batch";

/// The prepared statement that releases one reservation past its deadline:
/// the sweep runs it once per stuck job, thousands in a row after an outage.
inline constexpr const char* release_statement = "chargeonce_release";

// -- row mapping --------------------------------------------------------------

inline constexpr const char* reservation_columns =
  "id, chat_id, kind, status, queue, held::text, request_id, "
  "(extract(epoch FROM created_at) * 1000000)::bigint, "
  "(extract(epoch FROM lease_expires_at) * 1000000)::bigint, slot, units, "
  "held_units::text, cancel_requested, window_number";

/// A bigint SQL parameter `$n` turned into a timestamptz without floating
/// point: whole seconds plus microseconds.
inline std::string micros_to_timestamptz(const char* param) {
  return std::string{"(to_timestamp("} + param + " / 1000000) + (" + param
         + " % 1000000) * interval '1 microsecond')";
}

/// One field of a libpq result, read as libpqxx reads its own: the rows of
/// a pipelined batch (store_batch.cpp) never become a pqxx::result.
class pg_field {
public:
  pg_field(const PGresult* res, int row, int col)
      : res_(res), row_(row), col_(col) {
    // nop
  }

  bool is_null() const { return PQgetisnull(res_, row_, col_) != 0; }

  const char* c_str() const { return PQgetvalue(res_, row_, col_); }

  template <class T>
  T as() const {
    if (is_null())
      throw pqxx::conversion_error(std::string{"null in column "}
                                   + PQfname(res_, col_));
    T out{};
    pqxx::string_traits<T>::from_string(c_str(), out);
    return out;
  }

private:
  const PGresult* res_;
  int row_;
  int col_;
};

/// One row of a libpq result, its fields by name as in a pqxx::row.
class pg_row {
public:
  pg_row(const PGresult* res, int row) : res_(res), row_(row) {
    // nop
  }

  pg_field operator[](const char* name) const {
    int col = PQfnumber(res_, name);
    if (col < 0)
      throw broken_invariant(std::string{"no column "} + name);
    return {res_, row_, col};
  }

private:
  const PGresult* res_;
  int row_;
};

template <class Field>
kind parse_kind(const Field& f) {
  kind k = kind::text;
  from_string(f.template as<std::string>(), k);
  return k;
}

template <class Field>
caf::optional<caf::timestamp> optional_micros(const Field& f) {
  if (f.is_null())
    return caf::none;
  return from_unix_micros(f.template as<int64_t>());
}

inline reservation to_reservation(const pqxx::row& r,
                                  pocket_ordinals& ordinals) {
  reservation x;
  x.id = r[0].as<int64_t>();
  x.chat = r[1].as<int64_t>();
  x.kind = parse_kind(r[2]);
  from_string(r[3].as<std::string>(), x.status);
  x.queue = r[4].as<std::string>();
  x.held = ordinals.read(r[5].c_str());
  x.request_id = r[6].as<std::string>();
  x.created_at = from_unix_micros(r[7].as<int64_t>());
  if (!r[8].is_null())
    x.lease_expires_at = from_unix_micros(r[8].as<int64_t>());
  x.slot = r[9].as<int32_t>();
  x.units = r[10].as<int32_t>();
  x.held_units = ordinals.read(r[11].c_str());
  x.cancel_requested = r[12].as<bool>();
  x.window = r[13].as<int64_t>();
  return x;
}

/// The refusal a function's answer row carries (its `outcome` and
/// `message`): our code by name; a name this binary does not know comes
/// from a function newer than it.
inline caf::error refusal_of(const pqxx::row& r) {
  auto code = ec::storage_unavailable;
  if (!from_string(r["outcome"].as<std::string>(), code))
    code = ec::storage_unavailable;
  return caf::make_error(code, r["message"].as<std::string>());
}

/// The text of release_statement (store_sweep.cpp).
std::string release_statement_sql();

/// A reservation from the r_* columns of a chargeonce_outcome row.
template <class Row>
reservation reservation_of(const Row& r, pocket_ordinals& ordinals) {
  reservation x;
  x.id = r["r_id"].template as<int64_t>();
  x.chat = r["r_chat"].template as<int64_t>();
  x.kind = parse_kind(r["r_kind"]);
  from_string(r["r_status"].template as<std::string>(), x.status);
  x.queue = r["r_queue"].template as<std::string>();
  x.held = ordinals.read(r["r_held"].c_str());
  x.request_id = r["r_request_id"].template as<std::string>();
  x.created_at = from_unix_micros(r["r_created_us"].template as<int64_t>());
  x.lease_expires_at = optional_micros(r["r_lease_us"]);
  x.slot = r["r_slot"].is_null() ? 0 : r["r_slot"].template as<int32_t>();
  x.ended_at = optional_micros(r["r_ended_us"]);
  x.units = r["r_units"].is_null() ? 1 : r["r_units"].template as<int32_t>();
  if (!r["r_held_units"].is_null())
    x.held_units = ordinals.read(r["r_held_units"].c_str());
  x.cancel_requested = !r["r_cancel_requested"].is_null()
                       && r["r_cancel_requested"].template as<bool>();
  if (!r["window_number"].is_null())
    x.window = r["window_number"].template as<int64_t>();
  return x;
}

/// The chat's active reservations, oldest first, from the JSON array of
/// chargeonce_reservations_json (functions/11_support.sql).
std::vector<reservation> reservations_from_json(const std::string& text,
                                                pocket_ordinals& ordinals);

/// The chat's grants, in spending order, from the JSON array of
/// chargeonce_grants_json (functions/12_grants.sql).
std::vector<grant_info> grants_from_json(const std::string& text, chat_id chat);

/// The limit of active jobs that applies to a chat: its own, else its
/// plan's.
inline int32_t job_limit(const caf::optional<int32_t>& own, bool premium,
                         const store_options& o) {
  if (own)
    return *own;
  return premium ? o.premium_max_active_jobs : o.free_max_active_jobs;
}

/// Fills what status derives from the reservations and the limits.
inline void complete_status(chat_status& x, const store_options& o) {
  // Every pocket of the catalog, those the chat never had at 0.
  for (const auto& p : o.products.pockets)
    x.amounts.set(p.name, x.amounts.get(p.name));
  x.max_active_jobs = job_limit(x.own_max_active_jobs, x.premium, o);
  x.balance_low_threshold = x.own_balance_low_threshold
                              ? *x.own_balance_low_threshold
                              : o.balance_low_threshold;
  x.active = caf::none;
  for (const auto& r : x.reservations)
    if (is_active(r.status)) {
      x.active = r;
      break;
    }
  // Jobs of unknown outcome are listed (last) and hold what they held, on
  // the pockets of their own window.
  x.held = held_by(x.reservations, x.window);
}

/// A chat's status from the s_* columns of a chargeonce_outcome row
/// (chargeonce_status, functions/11_support.sql).
template <class Row>
chat_status status_of(const Row& r, chat_id chat, const store_options& o,
                      pocket_ordinals& ordinals) {
  chat_status x;
  x.chat = chat;
  x.amounts = ordinals.read(r["s_pockets"].c_str());
  x.premium_until = optional_micros(r["s_premium_us"]);
  x.premium = r["s_premium"].template as<bool>();
  x.started = r["s_started"].template as<bool>();
  x.blocked = r["s_blocked"].template as<bool>();
  x.banned = r["s_banned"].template as<bool>();
  x.window_started_at = optional_micros(r["s_window_us"]);
  x.last_activity_at = optional_micros(r["s_activity_us"]);
  if (!r["s_max_jobs"].is_null())
    x.own_max_active_jobs = r["s_max_jobs"].template as<int32_t>();
  x.reservations = reservations_from_json(
    r["s_reservations"].template as<std::string>(), ordinals);
  if (!r["window_number"].is_null())
    x.window = r["window_number"].template as<int64_t>();
  x.grants = grants_from_json(r["s_grants"].template as<std::string>(), chat);
  if (!r["s_low_threshold"].is_null())
    x.own_balance_low_threshold = r["s_low_threshold"].template as<int32_t>();
  complete_status(x, o);
  return x;
}

/// The chat's pockets, flags, limits, active reservations and grants, read
/// in one statement (one snapshot: a commit is seen whole or not at all),
/// the same as a status in a batch.
inline caf::expected<chat_status> read_status(pqxx::work& tx, chat_id chat,
                                              const store_options& o,
                                              pocket_ordinals& ordinals) {
  auto rs = tx.exec_params("SELECT * FROM chargeonce_status($1)", chat);
  const auto& r = rs[0];
  if (r["outcome"].as<std::string>() != "ok")
    return refusal_of(r);
  return status_of(r, chat, o, ordinals);
}

/// The ledger row of a refill or an admin change of `chat` (entry and
/// detail as migrations/003_release_0_2.sql describes), its pockets as they are
/// now in this transaction and its change from `before` (an array's text;
/// nullptr: nothing changed, only the plan did).
inline void record_change(pqxx::work& tx, chat_id chat, const char* entry,
                          const char* detail, const char* before) {
  // A refill row names the window it opened.
  tx.exec_params("INSERT INTO ledger (entry, detail, chat_id, changed, "
                 "pockets, window_number) SELECT $2, $3, chat_id, "
                 "chargeonce_pockets_change(coalesce($4::integer[], pockets), "
                 "pockets), pockets, CASE WHEN $2 = 'refill' THEN "
                 "window_number END FROM chats WHERE chat_id = $1",
                 chat, entry, detail, before);
}

/// SQL of what a refill changed, from the pockets `before` to `after` (SQL
/// expressions), as the ledger's `changed` has it: a refill sets only the
/// catalog's daily pockets, so one plain expression per daily pocket
/// (NULL: unchanged) does it. chargeonce_pockets_change, which takes any
/// pockets, is a function call per row, most of a reactivation page.
inline std::string refill_change_sql(const catalog& products,
                                     const pocket_ordinals& ordinals,
                                     const std::string& before,
                                     const std::string& after) {
  std::vector<std::string> items;
  for (const auto& p : products.pockets) {
    if (p.purchased)
      continue;
    auto i = static_cast<size_t>(ordinals.ordinal(p.name));
    if (items.size() < i)
      items.resize(i, "NULL");
    auto at = "[" + std::to_string(i) + "]";
    auto& item = items[i - 1];
    item = "nullif(coalesce(";
    item.append(after).append(at).append(", 0) - coalesce(");
    item.append(before).append(at).append(", 0), 0)");
  }
  std::string out = "ARRAY[";
  for (size_t i = 0; i < items.size(); ++i)
    out.append(i == 0 ? "" : ", ").append(items[i]);
  return out.append("]::integer[]");
}

/// An UPDATE's SET item that puts every daily pocket of `products` at the
/// quota of the chat's plan now; $n is the free plan's quotas, $n+1 the
/// premium plan's (arrays). Other pockets (balance) keep their amounts.
inline std::string refill_to_quota_sql(const catalog& products,
                                       const pocket_ordinals& ordinals, int n) {
  auto free_quotas = "($" + std::to_string(n) + "::integer[])";
  auto premium_quotas = "($" + std::to_string(n + 1) + "::integer[])";
  std::string value = "pockets";
  for (const auto& p : products.pockets) {
    if (p.purchased)
      continue;
    auto i = std::to_string(ordinals.ordinal(p.name));
    std::string next = "chargeonce_pockets_set(";
    next.append(value).append(", ").append(i);
    next.append(", CASE WHEN coalesce(premium_until > now(), false) THEN ");
    next.append(premium_quotas).append("[").append(i).append("] ELSE ");
    next.append(free_quotas).append("[").append(i).append("] END)");
    value = std::move(next);
  }
  return "pockets = " + value;
}

/// A chat's first ledger row: everything it has came with this change.
inline void record_opening(pqxx::work& tx, chat_id chat, const char* entry,
                           const char* detail) {
  record_change(tx, chat, entry, detail, "{}");
}

/// An admin change that changed no amount.
inline void record_admin(pqxx::work& tx, chat_id chat, const char* detail) {
  record_change(tx, chat, "admin", detail, nullptr);
}

inline std::string describe(chat_id chat, reservation_id id) {
  return "reservation " + std::to_string(id) + " of chat "
         + std::to_string(chat);
}

/// Whether the worker `worker` ("" for none) may go on with `op` on
/// reservation `id` of `chat`: none, or already_started when the job was
/// started by another worker. A start of a queued job records the worker.
/// The batch's function (chargeonce_claim, functions/05_start.sql).
inline caf::error claim(pqxx::work& tx, const char* op, chat_id chat,
                        reservation_id id, const std::string& worker) {
  if (worker.empty())
    return caf::none;
  auto rs = tx.exec_params(
    "SELECT outcome, message FROM chargeonce_claim($1, $2, $3, $4)", op, chat,
    id, worker);
  if (rs[0][0].is_null())
    return caf::none;
  auto code = ec::already_started;
  from_string(rs[0][0].as<std::string>(), code);
  return caf::make_error(code, rs[0][1].as<std::string>());
}

} // namespace detail

using namespace detail;

// -- connection handling ------------------------------------------------------

/// A batch handed to Postgres and not yet answered (store_batch.cpp).
struct sent_batch {
  std::vector<operation> ops;
  /// The indexes of ops that passed validation, sorted by chat: the order
  /// of the statement's arrays and of its answers' idx.
  std::vector<size_t> order;
  /// One per op; the refusals of validation already in.
  std::vector<batch_result> out;
  /// The link (store::impl::link) it went out on; 0: not sent yet.
  uint64_t link = 0;
  /// Whether a flush request asks Postgres for the rows before the commit.
  bool early_rows = true;
  /// What the pipeline gave back so far: the statement's rows, what failed
  /// (the statement, its commit, or the connection), and whether its
  /// commit's sync point came (or it failed for good).
  std::unique_ptr<PGresult, void (*)(PGresult*)> rows{nullptr, PQclear};
  std::exception_ptr error;
  bool ended = false;

  /// The statement answered (its rows, or why it failed), or the batch
  /// failed before it could.
  bool answered() const { return rows || error; }
};

struct store::impl {
  store_options opts;
  /// What every batch passes to chargeonce_apply_batch, built once.
  std::string products_text;
  /// What a refill sets the daily pockets to, per plan (array text).
  std::string free_quotas_text;
  std::string premium_quotas_text;
  /// SQL of a refill's change (the ledger's `changed`) from the pockets
  /// `b.pockets` before to `a.pockets` after (refill_change_sql), and of
  /// its SET item (refill_to_quota_sql, $2 and $3).
  std::string refill_change;
  std::string refill_to_quota;
  /// Per kind, its first two ways to pay as ordinal, price, ordinal, price
  /// (0s where it has fewer): the batch's b_pay1 ... b_price2.
  std::map<std::string, std::array<int32_t, 4>, std::less<>> first_pay;
  /// The pockets' ordinals, read on every new connection, which first
  /// registers the catalog's pockets: the strings above are built then.
  pocket_ordinals ordinals;
  std::unique_ptr<persistence::connection> conn;
  /// Which libpq connection conn is now: one more for each connection
  /// object and each reconnect libpqxx makes on its own.
  uint64_t link() const {
    return (connections_made << 24) + conn->generation();
  }
  /// The link the batch statement was prepared on.
  uint64_t prepared_link = 0;
  /// Batches sent and not yet received, oldest first (store::send).
  std::deque<std::unique_ptr<sent_batch>> wire;
  /// Connections opened so far (the first and every reconnect).
  uint64_t connections_made = 0;
  /// The last operation found no writable Postgres (lost_primary); false
  /// again after the next that reached it.
  bool unavailable = false;

  // The batches (store_batch.cpp): one is sent, read up to its rows or to
  // the sync point after its commit, and settled into its answers.
  std::unique_ptr<sent_batch> prepare(const std::vector<operation>& ops);
  /// Whether a batch went out on the connection and is not read to its end.
  bool in_flight() const;
  void send_now(sent_batch& b);
  void read(sent_batch& b, bool until_rows);
  /// Reads every batch sent to its end, keeping the answers.
  void drain();
  /// Out of pipeline mode once nothing is in flight.
  void leave_pipeline();
  std::vector<batch_result> settle(sent_batch& b);
  batch_result answer_of(const pg_row& row, const operation& op);
  /// One batch, sent and answered on its own.
  std::vector<batch_result> alone(const std::vector<operation>& ops);

  /// Registers the catalog's pockets, reads every ordinal and builds what
  /// depends on them: on every new connection, as the database may be
  /// another one (a failover) or may have gained pockets.
  void learn_ordinals(pqxx::connection_base& c) {
    ordinals.register_catalog(c, opts.products);
    products_text = catalog_text(opts.products, ordinals);
    free_quotas_text = ordinals.text(opts.products.daily_quotas(false));
    premium_quotas_text = ordinals.text(opts.products.daily_quotas(true));
    refill_change =
      refill_change_sql(opts.products, ordinals, "b.pockets", "a.pockets");
    refill_to_quota = refill_to_quota_sql(opts.products, ordinals, 2);
    first_pay.clear();
    for (const auto& k : opts.products.kinds) {
      auto& pay = first_pay[k.name];
      pay.fill(0);
      for (size_t i = 0; i < 2 && i < k.pay_from.size(); ++i) {
        pay[2 * i] = ordinals.ordinal(k.pay_from[i].pocket);
        pay[2 * i + 1] = k.pay_from[i].price;
      }
    }
  }

  /// Refuses a fresh connection to a server that cannot take writes: with
  /// a multi-host DSN lacking target_session_attrs=read-write, or a single
  /// host that is now a standby after a failover, it would fail every
  /// write. Logged, closed, and the next operation connects again.
  static void require_primary(pqxx::connection_base& c, pqxx::result& rs) {
    if (rs.empty() || !rs[0][0].as<bool>())
      return;
    auto where = std::string{"host="} + (c.hostname() ? c.hostname() : "")
                 + " port=" + (c.port() ? c.port() : "");
    spdlog::warn("persistence connected to a read-only Postgres (a standby): "
                 "closing it, the next operation connects again {}",
                 where);
    throw not_primary("connected to a read-only Postgres, not the primary: "
                      + where);
  }

  /// The connection for a libpqxx transaction: out of pipeline mode (the
  /// batches leave it when the last one is received), connected again if
  /// it was lost.
  persistence::connection& connection() {
    if (conn && conn->is_open() && conn->raw()
        && PQpipelineStatus(conn->raw()) != PQ_PIPELINE_OFF
        && PQexitPipelineMode(conn->raw()) != 1) {
      spdlog::error("persistence connection still in pipeline mode ({}): "
                    "closing it",
                    one_line(PQerrorMessage(conn->raw())));
      conn.reset();
    }
    if (!conn || !conn->is_open()) {
      conn.reset();
      auto fresh = std::make_unique<persistence::connection>(opts.dsn);
      pqxx::nontransaction setup{*fresh};
      // One round trip: the timeout, and whether this server takes writes.
      // The server's balance-low threshold, where every function that
      // lowers a balance reads it (chargeonce_low_threshold) without a
      // parameter of its own.
      auto rs = setup.exec("SET statement_timeout = "
                           + std::to_string(opts.statement_timeout.count())
                           + "; SET chargeonce.balance_low_threshold = "
                           + std::to_string(opts.balance_low_threshold) + "; "
                           + read_only_sql);
      setup.commit();
      require_primary(*fresh, rs);
      // Prepared lazily on first use, again on every new connection. (The
      // batch statement is libpq's: store_batch.cpp prepares it.)
      fresh->prepare(release_statement, release_statement_sql());
      learn_ordinals(*fresh);
      conn = std::move(fresh);
      ++connections_made;
    }
    return *conn;
  }

  /// The answer for an operation that threw: storage_unavailable for an
  /// outage, internal for a bug (the detail stays in the log, the caller
  /// gets the incident id).
  caf::error failed(const char* op, chat_id chat, reservation_id id,
                    const failure& f) {
    // A failed connection is rebuilt on the next call rather than trusted;
    // after a bug its state is unknown too.
    conn.reset();
    unavailable = lost_primary(f);
    if (f.code == ec::storage_unavailable) {
      spdlog::error("storage_unavailable op={} chat={} reservation={} "
                    "sqlstate={} error={}",
                    op, chat, id, f.sqlstate.empty() ? "-" : f.sqlstate,
                    f.detail);
      return caf::make_error(ec::storage_unavailable,
                             std::string{op} + ": " + f.detail);
    }
    auto incident = next_incident_id();
    spdlog::critical("internal op={} chat={} reservation={} id={} error={}", op,
                     chat, id, incident, f.detail);
    return caf::make_error(ec::internal, std::string{op}
                                           + ": internal error, see server "
                                             "log id="
                                           + std::to_string(incident));
  }

  /// Runs `fn` in one transaction and commits only if it produced a value.
  /// Business errors come back from `fn`; anything thrown rolls back and is
  /// an outage or a bug, as classify() decides.
  /// Runs `fn` in a transaction of type `Tx`: a pqxx::work by default, or a
  /// pqxx::nontransaction for one statement that is atomic by itself and
  /// then costs one round trip instead of three (BEGIN, it, COMMIT).
  template <class T, class Tx = pqxx::work, class F>
  caf::expected<T> run(const char* op, chat_id chat, reservation_id id,
                       F&& fn) {
    try {
      Tx tx{connection()};
      caf::expected<T> result = fn(tx);
      if (result)
        tx.commit();
      unavailable = false;
      return result;
    } catch (...) {
      return failed(op, chat, id, classify(std::current_exception()));
    }
  }
};

} // namespace chargeonce::persistence
