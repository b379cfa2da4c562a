// SPDX-License-Identifier: Apache-2.0
// Sweeping: reservations past their deadline, released and remembered.
#include "persistence/store_internal.hpp"
#include "protocol/validation.hpp"

#include <algorithm>

namespace chargeonce::persistence {

// -- sweeping -----------------------------------------------------------------

namespace {

/// The keyset query of one sweep phase. Each uses its own index: the
/// `>=` bound is an index condition, the row comparison breaks ties.
std::string sweep_query(sweep_phase phase) {
  auto after = micros_to_timestamptz("$1::bigint");
  if (phase == sweep_phase::unresolved)
    return "SELECT id, chat_id, chargeonce_us(uncertain_at) FROM "
           "uncertain_reservations WHERE outcome IS NULL AND uncertain_at < "
           "now() - $4 * interval '1 millisecond' AND uncertain_at >= "
           + after + " AND (uncertain_at, id) > (" + after
           + ", $2) ORDER BY uncertain_at, id LIMIT $3";
  const char* column =
    phase == sweep_phase::lease ? "lease_expires_at" : "created_at";
  const char* due = phase == sweep_phase::lease
                      ? "lease_expires_at < now()"
                      : "created_at < now() - $4 * interval '1 millisecond'";
  return std::string{"SELECT id, chat_id, (extract(epoch FROM "} + column
         + ") * 1000000)::bigint FROM reservations WHERE " + due + " AND "
         + column + " >= " + after + " AND (" + column + ", id) > (" + after
         + ", $2) ORDER BY " + column + ", id LIMIT $3";
}

} // namespace

caf::expected<std::vector<sweep_candidate>>
store::sweep_chunk(const sweep_cursor& after, uint32_t limit) {
  auto timeout_ms =
    static_cast<int64_t>(after.phase == sweep_phase::unresolved
                           ? impl_->opts.reconcile_timeout.count()
                           : impl_->opts.sweep_timeout.count());
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

std::string detail::release_statement_sql() {
  // The reason, or NULL when the job is not past its deadline: a job with
  // a request id is also remembered as released, and its hold's grants
  // are settled (functions/12_grants.sql).
  return "SELECT chargeonce_release_swept($2, $1, $3)";
}

caf::expected<reservation_released> store::release(chat_id chat,
                                                   reservation_id id) {
  if (auto err = validate_reservation(chat, id))
    return err;
  auto timeout_ms = static_cast<int64_t>(impl_->opts.sweep_timeout.count());
  // One statement, atomic by itself: the sweep runs it once per stuck job.
  return impl_->run<reservation_released, pqxx::nontransaction>(
    "release", chat, id,
    [&](pqxx::nontransaction& tx) -> caf::expected<reservation_released> {
      // Deadline re-checked under the row lock: a heartbeat or a commit that
      // came first wins, and the row is left alone.
      auto rs = tx.exec_prepared(release_statement, id, chat, timeout_ms);
      if (!rs.empty() && !rs[0][0].is_null())
        return reservation_released{chat, id, rs[0][0].as<std::string>()};
      // Not active: perhaps a job of unknown outcome past reconcile-timeout
      // (a second statement only when the first found nothing).
      auto unresolved = tx.exec_params(
        "SELECT chargeonce_release_unresolved($1, $2, $3)", chat, id,
        static_cast<int64_t>(impl_->opts.reconcile_timeout.count()));
      if (!unresolved[0][0].is_null())
        return reservation_released{chat, id,
                                    unresolved[0][0].as<std::string>()};
      return caf::make_error(ec::not_found,
                             describe(chat, id) + " is not past its deadline");
    });
}

caf::expected<active_count> store::count_active() {
  return impl_->run<active_count>(
    "count_active", 0, 0, [](pqxx::work& tx) -> caf::expected<active_count> {
      auto rs = tx.exec(
        "SELECT count(*) FILTER (WHERE NOT premium), "
        "count(*) FILTER (WHERE premium) FROM (SELECT coalesce("
        "c.premium_until > now(), false) AS premium FROM reservations r "
        "JOIN chats c ON c.chat_id = r.chat_id) x");
      return active_count{rs[0][0].as<int64_t>(), rs[0][1].as<int64_t>()};
    });
}

namespace {

/// Runs a DELETE of at most one chunk ($1: the retention in milliseconds,
/// $2: the chunk's rows) until a chunk deletes nothing, or, when
/// `short_chunk_is_last`, fewer rows than a chunk; each chunk in a
/// transaction of its own, so that pruning never holds many locks long.
template <class Run>
caf::expected<uint64_t> delete_in_chunks(Run&& run, const std::string& query,
                                         int64_t retention_ms,
                                         bool short_chunk_is_last) {
  constexpr int64_t chunk_rows_max = 1000;
  constexpr int chunks_max = 1000; // a bound, not a goal: 1M rows per call
  uint64_t total = 0;
  for (int i = 0; i < chunks_max; ++i) {
    auto deleted = run([&](pqxx::work& tx) -> caf::expected<uint64_t> {
      auto rs = tx.exec_params(query, retention_ms, chunk_rows_max);
      return static_cast<uint64_t>(rs.affected_rows());
    });
    if (!deleted)
      return deleted;
    total += *deleted;
    if (*deleted == 0
        || (short_chunk_is_last
            && *deleted < static_cast<uint64_t>(chunk_rows_max)))
      break;
  }
  return total;
}

/// Deletes rows of `table` whose `column` is older than `retention_ms`,
/// oldest first: a short chunk took every row that old.
template <class Run>
caf::expected<uint64_t> prune_table(Run&& run, const char* table,
                                    const char* column, int64_t retention_ms) {
  return delete_in_chunks(
    run,
    std::string{"DELETE FROM "} + table + " WHERE id IN (SELECT id FROM "
      + table + " WHERE " + column
      + " < now() - $1 * interval '1 millisecond' ORDER BY " + column
      + " LIMIT $2)",
    retention_ms, true);
}

/// Deletes events older than `retention_ms`: of the oldest chunk by seq,
/// those that old (no index on the time: events are written off the hot
/// path but many at once, by reactivation). A chunk can keep some young
/// rows, so only one that deletes none ends it.
template <class Run>
caf::expected<uint64_t> prune_events(Run&& run, int64_t retention_ms) {
  return delete_in_chunks(
    run,
    "DELETE FROM events WHERE seq IN (SELECT seq FROM (SELECT seq, at FROM "
    "events ORDER BY seq LIMIT $2) oldest WHERE at < now() - $1 * "
    "interval '1 millisecond')",
    retention_ms, false);
}

} // namespace

caf::expected<uint64_t> store::expire_grants() {
  // A chunk per transaction keeps each one short; a bound on the rounds
  // leaves a backlog beyond it to the next scan.
  constexpr int32_t chunk = 500;
  constexpr int rounds_max = 100;
  // Runs `statement` (its $1 the chunk) until a chunk comes back short;
  // what all chunks counted.
  auto in_chunks = [&](const char* name, const std::string& statement,
                       auto... params) -> caf::expected<uint64_t> {
    uint64_t total = 0;
    for (int round = 0; round < rounds_max; ++round) {
      auto n = impl_->run<uint64_t>(
        name, 0, 0, [&](pqxx::work& tx) -> caf::expected<uint64_t> {
          return tx.exec_params1(statement, chunk, params...)[0]
            .template as<uint64_t>();
        });
      if (!n)
        return n;
      total += *n;
      if (*n < static_cast<uint64_t>(chunk))
        break;
    }
    return total;
  };
  auto expired = in_chunks("expire_grants", "SELECT chargeonce_expire_due($1)");
  if (!expired)
    return expired;
  auto noticed =
    in_chunks("notice_expiring", "SELECT chargeonce_notice_expiring($2, $1)",
              static_cast<int64_t>(impl_->opts.expiry_notice.count()));
  if (!noticed)
    return noticed;
  return expired;
}

caf::expected<uint64_t> store::prune() {
  auto run = [this](auto&& fn) {
    return impl_->run<uint64_t>("prune", 0, 0, fn);
  };
  auto released =
    prune_table(run, "released_reservations", "released_at",
                static_cast<int64_t>(impl_->opts.release_retention.count()));
  if (!released)
    return released;
  auto ended =
    prune_table(run, "ended_reservations", "ended_at",
                static_cast<int64_t>(impl_->opts.request_retention.count()));
  if (!ended)
    return ended;
  auto resolved =
    prune_table(run, "uncertain_reservations", "resolved_at",
                static_cast<int64_t>(impl_->opts.release_retention.count()));
  if (!resolved)
    return resolved;
  auto events = prune_events(
    run, static_cast<int64_t>(impl_->opts.event_retention.count()));
  if (!events)
    return events;
  return *released + *ended + *resolved + *events;
}

// -- events -------------------------------------------------------------------

caf::expected<event_page> store::events_after(event_id after, uint32_t limit) {
  return impl_->run<event_page>(
    "events", 0, 0, [&](pqxx::work& tx) -> caf::expected<event_page> {
      event_page page;
      // Numbers what was committed since the last reader did; returns the
      // newest id. Bounded, so that a backlog (a million refills nobody
      // was subscribed to) is numbered over several reads.
      page.last_id =
        tx.exec("SELECT chargeonce_number_events(10000)")[0][0].as<int64_t>();
      if (limit == 0)
        return page;
      auto rs = tx.exec_params(
        "SELECT id, event, chat_id, coalesce(reservation_id, 0), "
        "coalesce(detail, ''), coalesce(grant_id, 0), coalesce(credits, 0), "
        "chargeonce_us(expires_at), coalesce(threshold, 0) "
        "FROM events WHERE id > $1 ORDER BY id LIMIT $2",
        after, limit);
      page.events.reserve(rs.size());
      for (const auto& r : rs)
        page.events.push_back(event_record{
          r[0].as<int64_t>(), r[1].as<std::string>(), r[2].as<int64_t>(),
          r[3].as<int64_t>(), r[4].as<std::string>(), r[5].as<int64_t>(),
          r[6].as<int32_t>(), optional_micros(r[7]), r[8].as<int32_t>()});
      return page;
    });
}

} // namespace chargeonce::persistence
