// SPDX-License-Identifier: Apache-2.0
// The hot operations through the server-side functions: one statement per
// batch, in autocommit, so a batch costs one round trip and one commit.
#include "persistence/store_internal.hpp"
#include "protocol/validation.hpp"

#include <algorithm>
#include <numeric>
#include <type_traits>

namespace chargeonce::persistence {

const char* to_string(batch_op x) {
  switch (x) {
  case batch_op::reserve:
    return "reserve";
  case batch_op::start:
    return "start";
  case batch_op::heartbeat:
    return "heartbeat";
  case batch_op::commit:
    return "commit";
  case batch_op::fail:
    return "fail";
  case batch_op::cancel:
    return "cancel";
  case batch_op::status:
    return "status";
  }
  return "?";
}

namespace {

caf::error validate(const batch_operation& x, const catalog& products) {
  switch (x.op) {
  case batch_op::reserve:
    if (auto err = validate_reserve(x.chat, x.k, x.request_id))
      return err;
    if (auto err = validate_units(x.units))
      return err;
    return validate_kind(products, x.k);
  case batch_op::commit:
    if (auto err = validate_units(x.units))
      return err;
    return validate_reservation(x.chat, x.id);
  case batch_op::start:
  case batch_op::heartbeat:
  case batch_op::fail:
    return validate_reservation(x.chat, x.id);
  case batch_op::cancel:
    return validate_cancel(x.chat, x.id, x.request_id);
  case batch_op::status:
    return validate_chat(x.chat);
  }
  return caf::make_error(ec::invalid_argument, "unknown batch operation");
}

/// A Postgres array literal of `xs`, each element quoted (text arrays) or
/// not (numbers): the batch travels as parallel arrays, no JSON to parse.
template <class T, class F>
std::string array_literal(const std::vector<batch_operation>& ops,
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

caf::optional<caf::timestamp> optional_micros(const pqxx::field& f) {
  if (f.is_null())
    return caf::none;
  return from_unix_micros(f.as<int64_t>());
}

receipt receipt_of(const pqxx::row& r, reservation_id id) {
  receipt x;
  x.reservation = id;
  x.chat = r["c_chat"].as<int64_t>();
  x.kind = parse_kind(r["c_kind"]);
  x.charged = pockets_of(r["c_charged"]);
  x.committed_at = from_unix_micros(r["c_committed_us"].as<int64_t>());
  x.units = r["c_units"].as<int32_t>();
  x.released = pockets_of(r["c_released"]);
  return x;
}

chat_status status_of(const pqxx::row& r, chat_id chat,
                      const store_options& o) {
  chat_status x;
  x.chat = chat;
  x.amounts = pockets_of(r["s_pockets"]);
  x.premium_until = optional_micros(r["s_premium_us"]);
  x.premium = r["s_premium"].as<bool>();
  x.started = r["s_started"].as<bool>();
  x.blocked = r["s_blocked"].as<bool>();
  x.banned = r["s_banned"].as<bool>();
  x.window_started_at = optional_micros(r["s_window_us"]);
  x.last_activity_at = optional_micros(r["s_activity_us"]);
  if (!r["s_max_jobs"].is_null())
    x.own_max_active_jobs = r["s_max_jobs"].as<int32_t>();
  x.reservations =
    reservations_from_json(r["s_reservations"].as<std::string>());
  complete_status(x, o);
  return x;
}

batch_result result_of(const pqxx::row& r, const batch_operation& op,
                       const store_options& o) {
  auto outcome = r["outcome"].as<std::string>();
  if (outcome != "ok") {
    auto code = ec::storage_unavailable;
    if (!from_string(outcome, code))
      code = ec::storage_unavailable; // a function newer than this binary
    return caf::make_error(code, r["message"].as<std::string>());
  }
  switch (op.op) {
  case batch_op::commit:
    return receipt_of(r, op.id);
  case batch_op::status:
    return status_of(r, op.chat, o);
  default:
    return reservation_of(r);
  }
}

/// Errors that say nothing about one operation: the whole batch is safe to
/// retry one by one (nothing was committed).
bool isolatable(const failure& f) {
  if (f.code != ec::storage_unavailable || !f.refused)
    return false;
  // 08: connection exception; 57P: operator intervention (shutdown,
  // terminated backend). Neither gets better by splitting the batch.
  return f.sqlstate.rfind("08", 0) != 0 && f.sqlstate.rfind("57P", 0) != 0;
}

} // namespace

std::vector<batch_result>
store::apply(const std::vector<batch_operation>& ops) {
  std::vector<batch_result> out(ops.size(), caf::error{});
  // Sorted by chat: concurrent batches (other servers too) take chat row
  // locks in one order and cannot deadlock each other. Stable: one chat's
  // operations keep their order.
  std::vector<size_t> order;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (auto err = validate(ops[i], impl_->opts.products))
      out[i] = std::move(err);
    else
      order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return ops[a].chat < ops[b].chat;
  });
  if (order.empty())
    return out;
  auto lease_ms = static_cast<int64_t>(impl_->opts.lease_duration.count());
  auto fail_all = [&](const caf::error& err) {
    for (auto i : order)
      out[i] = err;
  };
  try {
    pqxx::nontransaction tx{impl_->connection()};
    using text = std::string;
    auto rs = tx.exec_prepared(
      apply_statement,
      array_literal<text>(ops, order,
                          [](const auto& x) { return text{to_string(x.op)}; }),
      array_literal<int64_t>(ops, order, [](const auto& x) { return x.chat; }),
      array_literal<int64_t>(ops, order, [](const auto& x) { return x.id; }),
      array_literal<text>(ops, order,
                          [](const auto& x) {
                            return x.op == batch_op::reserve
                                     ? text{to_string(x.k)}
                                     : text{};
                          }),
      array_literal<text>(ops, order,
                          [](const auto& x) { return x.request_id; }),
      array_literal<int32_t>(ops, order, [](const auto& x) { return x.units; }),
      lease_ms, impl_->opts.free_max_active_jobs,
      impl_->opts.premium_max_active_jobs, impl_->products_text);
    if (rs.size() != order.size())
      throw broken_invariant("chargeonce_apply_batch answered "
                             + std::to_string(rs.size()) + " rows for "
                             + std::to_string(order.size()) + " operations");
    std::vector<bool> answered(order.size(), false);
    for (const auto& row : rs) {
      auto k = row["idx"].as<size_t>();
      if (k >= order.size() || answered[k])
        throw broken_invariant("chargeonce_apply_batch answered operation "
                               + std::to_string(k) + " twice or out of range");
      answered[k] = true;
      out[order[k]] = result_of(row, ops[order[k]], impl_->opts);
    }
    impl_->unavailable = false;
  } catch (...) {
    auto f = classify(std::current_exception());
    // A deadlock or one operation's unexpected error aborted the statement
    // and wrote nothing: one by one, only the culprit fails.
    if (order.size() > 1 && isolatable(f)) {
      spdlog::warn("batch split operations={} sqlstate={} error={}",
                   order.size(), f.sqlstate, f.detail);
      for (auto i : order)
        out[i] = std::move(apply({ops[i]}).front());
      return out;
    }
    // A lost connection or an in-doubt commit leaves the outcome unknown
    // (a retry is safe: reserve by request_id, commit by reservation); a
    // bug fails every operation, including those already answered above.
    fail_all(impl_->failed("apply", ops[order[0]].chat, ops[order[0]].id, f));
  }
  return out;
}

} // namespace chargeonce::persistence
