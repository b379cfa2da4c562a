// SPDX-License-Identifier: Apache-2.0
// The hot operations through the server-side functions: one statement per
// batch, in autocommit, so a batch costs one round trip and one commit.
#include "persistence/store_internal.hpp"
#include "protocol/validation.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <numeric>
#include <poll.h>
#include <type_traits>

namespace chargeonce::persistence {

namespace {

caf::error validate(const operation& x, const catalog& products) {
  if (!is_operation_type(x.type) || !traits_of(x.type).in_statement)
    return caf::make_error(ec::invalid_argument,
                           std::string{"not an operation of a statement: "}
                             + to_string(x.type));
  if (is_worker_op(x.type))
    if (auto err = validate_worker(x.worker))
      return err;
  switch (x.type) {
  case operation_type::reserve:
    if (auto err = validate_reserve(x.chat, x.kind, x.request_id))
      return err;
    if (auto err = validate_units(x.units))
      return err;
    return validate_kind(products, x.kind);
  case operation_type::commit:
    if (auto err = validate_units(x.units))
      return err;
    return validate_reservation(x.chat, x.reservation);
  case operation_type::start:
  case operation_type::heartbeat:
  case operation_type::fail:
    return validate_reservation(x.chat, x.reservation);
  case operation_type::cancel:
    return validate_cancel(x.chat, x.reservation, x.request_id);
  case operation_type::status:
    return validate_chat(x.chat);
  default: // touch and the administration: refused above
    break;
  }
  return caf::make_error(ec::invalid_argument, "unknown batch operation");
}

/// A Postgres array literal of `xs`, each element quoted (text arrays) or
/// not (numbers): the batch travels as parallel arrays, no JSON to parse.
template <class T, class F>
std::string array_literal(const std::vector<operation>& ops,
                          const std::vector<size_t>& order, F field) {
  std::string out = "{";
  for (auto i : order) {
    if (out.size() > 1)
      out += ',';
    T x = field(ops[i]);
    if constexpr (std::is_same_v<T, std::string>) {
      out += '"';
      for (char c : x) {
        if (c == '"' || c == '\\')
          out += '\\';
        out += c;
      }
      out += '"';
    } else {
      out += std::to_string(x);
    }
  }
  out += '}';
  return out;
}

receipt receipt_of(const pg_row& r, reservation_id id,
                   pocket_ordinals& ordinals) {
  receipt x;
  x.reservation = id;
  x.chat = r["c_chat"].as<int64_t>();
  x.kind = parse_kind(r["c_kind"]);
  x.charged = ordinals.read(r["c_charged"].c_str());
  x.committed_at = from_unix_micros(r["c_committed_us"].as<int64_t>());
  x.units = r["c_units"].as<int32_t>();
  x.released = ordinals.read(r["c_released"].c_str());
  if (!r["window_number"].is_null())
    x.window = r["window_number"].as<int64_t>();
  return x;
}

batch_result result_of(const pg_row& r, const operation& op,
                       const store_options& o, pocket_ordinals& ordinals) {
  auto outcome = r["outcome"].as<std::string>();
  if (outcome != "ok") {
    auto code = ec::storage_unavailable;
    if (!from_string(outcome, code))
      code = ec::storage_unavailable; // a function newer than this binary
    return caf::make_error(code, r["message"].as<std::string>());
  }
  switch (op.type) {
  case operation_type::commit:
    return receipt_of(r, op.reservation, ordinals);
  case operation_type::status:
    return status_of(r, op.chat, o, ordinals);
  default:
    return reservation_of(r, ordinals);
  }
}

/// Errors that say nothing about one operation: the whole batch is safe to
/// retry one by one (nothing was committed).
bool isolatable(const failure& f) {
  if (f.code != ec::storage_unavailable || !f.refused)
    return false;
  // No writable Postgres (a lost connection, 08, 57P01…03, a standby or a
  // read-only server, 25006) and any other operator intervention (57P):
  // splitting would only reconnect once per operation during exactly the
  // seconds of an outage. The batch is answered storage_unavailable once.
  return !lost_primary(f) && f.sqlstate.rfind("57P", 0) != 0;
}

} // namespace

// -- the pipeline -------------------------------------------------------------
//
// Each batch is one statement followed by a flush request and a sync point:
// Postgres sends the batch's rows as soon as the statement ran, then
// commits at the sync point. The connection actor sends the next batch the
// moment the rows are in, so that it waits at Postgres while this one's
// commit is flushed to disk, instead of leaving Postgres idle for the round
// trip and the parsing of the rows. A batch's answers count only after its
// sync point: until then its commit may still fail. Without the flush
// request (a caller with nothing to send behind it) the rows come with the
// commit's sync point, in one read.

namespace {

constexpr const char* apply_sql =
  "SELECT * FROM chargeonce_apply_batch($1::text[], $2::bigint[], "
  "$3::bigint[], $4::text[], $5::text[], $6::integer[], $7::integer[], "
  "$8::integer[], $9::integer[], $10::integer[], $11::bigint, $12::integer, "
  "$13::integer, $14::jsonb)";

using result_ptr = std::unique_ptr<PGresult, void (*)(PGresult*)>;

/// What libpq reports of a failed statement, commit or connection, thrown
/// as libpqxx throws it, so that classify() reads it the same way.
[[noreturn]] void throw_error(PGconn* pg, const PGresult* r) {
  std::string message = r ? PQresultErrorMessage(r) : "";
  if (message.empty())
    message = PQerrorMessage(pg);
  const char* state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  std::string sqlstate = state ? state : "";
  if (PQstatus(pg) == CONNECTION_BAD || sqlstate.empty()
      || sqlstate.rfind("08", 0) == 0)
    throw pqxx::broken_connection(message);
  if (sqlstate == "40003")
    throw pqxx::statement_completion_unknown(message);
  throw pqxx::sql_error(message, apply_sql, sqlstate.c_str());
}

void wait_readable(PGconn* pg) {
  pollfd fd{PQsocket(pg), POLLIN, 0};
  if (fd.fd < 0)
    throw pqxx::broken_connection("the connection has no socket");
  while (poll(&fd, 1, -1) < 0)
    if (errno != EINTR)
      throw pqxx::broken_connection(std::string{"poll: "}
                                    + std::strerror(errno));
}

/// Records that `b` failed for good: what was thrown last.
void fail_for_good(sent_batch& b) {
  b.error = std::current_exception();
  b.rows.reset();
  b.ended = true;
}

} // namespace

std::unique_ptr<sent_batch>
store::impl::prepare(const std::vector<operation>& ops) {
  auto b = std::make_unique<sent_batch>();
  b->ops = ops;
  b->out.assign(ops.size(), caf::error{});
  for (size_t i = 0; i < ops.size(); ++i) {
    if (auto err = validate(ops[i], opts.products))
      b->out[i] = std::move(err);
    else
      b->order.push_back(i);
  }
  // Sorted by chat: concurrent batches (other servers too) take chat row
  // locks in one order and cannot deadlock each other. Stable: one chat's
  // operations keep their order.
  std::stable_sort(b->order.begin(), b->order.end(), [&](size_t x, size_t y) {
    return ops[x].chat < ops[y].chat;
  });
  b->ended = b->order.empty();
  return b;
}

bool store::impl::in_flight() const {
  return std::any_of(wire.begin(), wire.end(),
                     [](const auto& x) { return x->link != 0 && !x->ended; });
}

void store::impl::send_now(sent_batch& b) {
  const auto& ops = b.ops;
  const auto& order = b.order;
  try {
    // Connecting again only while nothing is in flight: a new connection
    // would lose the answers of what is.
    if (!in_flight())
      connection();
    if (!conn || !conn->is_open() || !conn->raw())
      throw pqxx::broken_connection("the connection was lost with batches "
                                    "in flight");
    PGconn* pg = conn->raw();
    if (prepared_link != link()) {
      result_ptr r{PQprepare(pg, apply_statement, apply_sql, 14, nullptr),
                   PQclear};
      if (PQresultStatus(r.get()) != PGRES_COMMAND_OK)
        throw_error(pg, r.get());
      prepared_link = link();
    }
    if (PQpipelineStatus(pg) == PQ_PIPELINE_OFF && PQenterPipelineMode(pg) != 1)
      throw_error(pg, nullptr);
    using text = std::string;
    // A reserve's kind's first two ways to pay (ordinal, price; 0s where
    // there are fewer): what the set-based reserve decides from.
    auto pay_of = [this](size_t i) {
      return [this, i](const operation& x) -> int32_t {
        if (x.type != operation_type::reserve)
          return 0;
        auto found = first_pay.find(to_string(x.kind));
        return found == first_pay.end() ? 0 : found->second[i];
      };
    };
    std::string params[] = {
      array_literal<text>(
        ops, order, [](const auto& x) { return text{to_string(x.type)}; }),
      array_literal<int64_t>(ops, order, [](const auto& x) { return x.chat; }),
      array_literal<int64_t>(ops, order,
                             [](const auto& x) { return x.reservation; }),
      array_literal<text>(ops, order,
                          [](const auto& x) {
                            return x.type == operation_type::reserve
                                     ? text{to_string(x.kind)}
                                     : text{};
                          }),
      // A worker's operation carries the worker's identity where a reserve
      // or a cancel carries its request id.
      array_literal<text>(ops, order,
                          [](const auto& x) {
                            return is_worker_op(x.type) ? x.worker
                                                        : x.request_id;
                          }),
      array_literal<int32_t>(ops, order, [](const auto& x) { return x.units; }),
      array_literal<int32_t>(ops, order, pay_of(0)),
      array_literal<int32_t>(ops, order, pay_of(1)),
      array_literal<int32_t>(ops, order, pay_of(2)),
      array_literal<int32_t>(ops, order, pay_of(3)),
      std::to_string(opts.lease_duration.count()),
      std::to_string(opts.free_max_active_jobs),
      std::to_string(opts.premium_max_active_jobs),
      products_text,
    };
    const char* values[std::size(params)];
    for (size_t i = 0; i < std::size(params); ++i)
      values[i] = params[i].c_str();
    if (PQsendQueryPrepared(pg, apply_statement,
                            static_cast<int>(std::size(params)), values,
                            nullptr, nullptr, 0)
          != 1
        || (b.early_rows && PQsendFlushRequest(pg) != 1)
        || PQpipelineSync(pg) != 1)
      throw_error(pg, nullptr);
    b.link = link();
  } catch (...) {
    fail_for_good(b);
  }
}

void store::impl::read(sent_batch& b, bool until_rows) {
  if (b.ended || (until_rows && b.answered()))
    return;
  try {
    if (!conn || !conn->raw() || link() != b.link)
      throw pqxx::broken_connection("the connection was lost before the "
                                    "batch's answer came");
    PGconn* pg = conn->raw();
    for (;;) {
      if (PQstatus(pg) == CONNECTION_BAD)
        throw_error(pg, nullptr);
      while (PQisBusy(pg) == 0) {
        result_ptr r{PQgetResult(pg), PQclear};
        if (!b.answered()) {
          // The statement's own result, then a null ending it.
          if (!r)
            throw pqxx::broken_connection("no answer to the batch");
          if (PQresultStatus(r.get()) == PGRES_TUPLES_OK)
            b.rows = std::move(r);
          else
            try {
              throw_error(pg, r.get());
            } catch (...) {
              b.error = std::current_exception();
            }
          if (result_ptr extra{PQgetResult(pg), PQclear}; extra)
            throw broken_invariant("the batch statement answered twice");
          if (until_rows)
            return;
        } else if (!r) {
          continue; // after the commit's error (below)
        } else if (PQresultStatus(r.get()) == PGRES_PIPELINE_SYNC) {
          b.ended = true;
          return;
        } else {
          // The commit at the sync point failed: the rows do not count.
          b.rows.reset();
          try {
            throw_error(pg, r.get());
          } catch (...) {
            b.error = std::current_exception();
          }
        }
      }
      wait_readable(pg);
      if (PQconsumeInput(pg) != 1)
        throw_error(pg, nullptr);
    }
  } catch (...) {
    fail_for_good(b);
  }
}

void store::impl::drain() {
  for (auto& x : wire)
    read(*x, false);
}

void store::impl::leave_pipeline() {
  if (in_flight() || !conn || !conn->raw()
      || PQpipelineStatus(conn->raw()) == PQ_PIPELINE_OFF)
    return;
  if (PQexitPipelineMode(conn->raw()) != 1) {
    spdlog::error("persistence connection cannot leave pipeline mode ({}): "
                  "closing it",
                  one_line(PQerrorMessage(conn->raw())));
    conn.reset();
  }
}

/// The answer a committed row gives: what it says, or, when it cannot be
/// read (a pocket ordinal this process does not know and cannot look up
/// now), an error for this operation alone that says the batch committed.
/// Never a refusal: the operation happened and must not run again.
batch_result store::impl::answer_of(const pg_row& row, const operation& op) {
  try {
    return result_of(row, op, opts, ordinals);
  } catch (...) {
    auto f = classify(std::current_exception());
    if (f.code == ec::storage_unavailable) {
      spdlog::error("storage_unavailable op=answer chat={} reservation={} "
                    "sqlstate={} error={}",
                    op.chat, op.reservation,
                    f.sqlstate.empty() ? "-" : f.sqlstate, f.detail);
      return caf::make_error(ec::storage_unavailable,
                             std::string{to_string(op.type)}
                               + " took effect (its batch committed), but "
                                 "its answer could not be read: "
                               + f.detail
                               + "; the same request again answers it");
    }
    auto incident = next_incident_id();
    spdlog::critical("internal op=answer chat={} reservation={} id={} "
                     "error={}",
                     op.chat, op.reservation, incident, f.detail);
    return caf::make_error(ec::internal,
                           std::string{to_string(op.type)}
                             + ": internal error, see server log id="
                             + std::to_string(incident));
  }
}

std::vector<batch_result> store::impl::settle(sent_batch& b) {
  auto& out = b.out;
  const auto& order = b.order;
  if (order.empty())
    return std::move(out);
  // Past the sync point the batch committed: whatever fails from here on
  // must not read as "nothing happened" (no split, no operation again).
  bool committed = !b.error;
  if (committed) {
    try {
      const PGresult* rs = b.rows.get();
      auto rows = static_cast<size_t>(PQntuples(rs));
      if (rows != order.size())
        throw broken_invariant("chargeonce_apply_batch answered "
                               + std::to_string(rows) + " rows for "
                               + std::to_string(order.size()) + " operations");
      std::vector<bool> answered(order.size(), false);
      for (size_t i = 0; i < rows; ++i) {
        pg_row row{rs, static_cast<int>(i)};
        auto k = row["idx"].as<size_t>();
        if (k >= order.size() || answered[k])
          throw broken_invariant("chargeonce_apply_batch answered operation "
                                 + std::to_string(k)
                                 + " twice or out of range");
        answered[k] = true;
        out[order[k]] = answer_of(row, b.ops[order[k]]);
      }
      unavailable = false;
      return std::move(out);
    } catch (...) {
      b.error = std::current_exception();
    }
  }
  auto f = classify(b.error);
  // The batches behind it first: their answers are kept before the
  // connection is split or dropped.
  drain();
  // A deadlock or one operation's unexpected error aborted the statement
  // and wrote nothing: one by one, only the culprit fails.
  if (order.size() > 1 && !committed && isolatable(f)) {
    spdlog::warn("batch split operations={} sqlstate={} error={}", order.size(),
                 f.sqlstate, f.detail);
    for (auto i : order)
      out[i] = std::move(alone({b.ops[i]}).front());
    return std::move(out);
  }
  // A lost connection or an in-doubt commit leaves the outcome unknown
  // (a retry is safe: reserve by request_id, commit by reservation); a
  // bug fails every operation, including those already answered above.
  auto err =
    failed("apply", b.ops[order[0]].chat, b.ops[order[0]].reservation, f);
  for (auto i : order)
    out[i] = err;
  return std::move(out);
}

std::vector<batch_result>
store::impl::alone(const std::vector<operation>& ops) {
  // What is in flight is read first: this batch goes out on its own.
  drain();
  auto b = prepare(ops);
  if (!b->ended)
    send_now(*b);
  read(*b, false);
  auto out = settle(*b);
  leave_pipeline();
  return out;
}

void store::send(const std::vector<operation>& ops, bool early_rows) {
  auto& wire = impl_->wire;
  auto b = impl_->prepare(ops);
  b->early_rows = early_rows;
  // After one that could not go out yet, in order.
  bool waiting = std::any_of(wire.begin(), wire.end(), [](const auto& x) {
    return x->link == 0 && !x->ended;
  });
  if (!b->ended && !waiting)
    impl_->send_now(*b);
  wire.push_back(std::move(b));
}

void store::await_rows() {
  if (!impl_->wire.empty())
    impl_->read(*impl_->wire.front(), true);
}

std::vector<batch_result> store::receive() {
  auto& wire = impl_->wire;
  if (wire.empty())
    throw std::logic_error("store::receive: no batch was sent");
  auto b = std::move(wire.front());
  wire.pop_front();
  if (!b->ended && b->link == 0)
    impl_->send_now(*b);
  impl_->read(*b, false);
  auto out = impl_->settle(*b);
  impl_->leave_pipeline();
  return out;
}

size_t store::batches_in_flight() const {
  return impl_->wire.size();
}

std::vector<batch_result> store::apply(const std::vector<operation>& ops) {
  return impl_->alone(ops);
}

} // namespace chargeonce::persistence
