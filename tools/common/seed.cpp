// SPDX-License-Identifier: Apache-2.0
#include "tools/common/seed.hpp"

#include "protocol/errors.hpp"

#include <pqxx/pqxx>
#include <spdlog/spdlog.h>

namespace chargeonce::persistence {

caf::error seed_chats(const std::string& dsn, chat_id first, int64_t count,
                      int32_t balance, int32_t grants) {
  try {
    pqxx::connection conn{dsn};
    {
      pqxx::work tx{conn};
      // Every credit of the balance pocket is some grant's: one that never
      // expires per chat, as create-chat --balance makes it. The grants go
      // first, so that each chat row is written once, with its sole grant
      // (the grants' trigger finds no chat to update yet); the rows are
      // made here together, so the per-row reference check can be skipped.
      tx.exec("SET LOCAL chargeonce.references_checked = 'on'");
      //
      // With several grants, the balance is split evenly (the last takes
      // the remainder): grant k of n < n expires in k × 30 days, the last
      // never, all at the default priority, so that every hold walks the
      // chat's grants in spending order (no sole grant) and none expires
      // during a run.
      tx.exec_params(
        "INSERT INTO grants (chat_id, source, credits, expires_at) "
        "SELECT $1::bigint + g, 'admin', CASE WHEN k < $4::integer "
        "THEN $3::integer / $4::integer ELSE $3::integer - ($4::integer - 1) "
        "* ($3::integer / $4::integer) END, CASE WHEN k < $4::integer THEN "
        "now() + k * interval '30 days' END "
        "FROM generate_series(1::bigint, $2::bigint) AS g, "
        "generate_series(1, $4::integer) AS k "
        "WHERE $3::integer >= $4::integer ORDER BY g, k",
        first, count, balance, grants);
      // Each chat's sole grant and next expiry in one pass over the fresh
      // grants (all live, each with credits: a chat of one grant has it as
      // its sole one), not a lookup per chat: on grants just written, those
      // lookups (chargeonce_sole_grant, chargeonce_next_expiry) ran for
      // minutes.
      tx.exec_params(
        "INSERT INTO chats (chat_id, pockets, sole_grant, next_expiry) "
        "SELECT $1::bigint + g, chargeonce_pockets_set('{}', "
        "chargeonce_pocket('balance'), $3::integer), "
        "CASE WHEN x.n = 1 THEN x.first_grant END, x.soonest "
        "FROM generate_series(1::bigint, $2::bigint) AS g "
        "LEFT JOIN (SELECT chat_id, count(*) AS n, min(grant_id) AS "
        "first_grant, min(expires_at) AS soonest FROM grants "
        "WHERE chat_id > $1::bigint AND chat_id <= $1::bigint + $2::bigint "
        "GROUP BY chat_id) AS x ON x.chat_id = $1::bigint + g",
        first, count, balance);
      // Each chat's ledger opens with what it was seeded with.
      tx.exec_params("INSERT INTO ledger (entry, detail, chat_id, changed, "
                     "pockets) SELECT 'admin', 'seed', chat_id, "
                     "chargeonce_pockets_change('{}', pockets), "
                     "pockets FROM chats WHERE chat_id > $1 AND chat_id <= "
                     "$1::bigint + $2::bigint ORDER BY chat_id",
                     first, count);
      tx.commit();
    }
    pqxx::nontransaction tx{conn};
    tx.exec("ANALYZE chats");
    try {
      tx.exec("CHECKPOINT"); // needs superuser or pg_checkpoint: optional
    } catch (const pqxx::sql_error& e) {
      spdlog::warn("checkpoint skipped: {}", e.what());
    }
  } catch (const std::exception& e) {
    return caf::make_error(ec::storage_unavailable,
                           std::string{"seeding chats: "} + e.what());
  }
  return caf::none;
}

caf::error drop_chats(const std::string& dsn, chat_id first, int64_t count) {
  try {
    pqxx::connection conn{dsn};
    pqxx::work tx{conn};
    for (auto table : {"ledger", "released_reservations", "ended_reservations",
                       "reservations", "grants", "chats"})
      tx.exec_params(std::string{"DELETE FROM "} + table
                       + " WHERE chat_id > $1 AND chat_id <= $2",
                     first, first + count);
    tx.commit();
    // The next run starts from the same state instead of the dead rows of
    // this one: without it, the bench's reused database grew run after run
    // (43 MB of reservations holding no live row after three 20 s runs) and
    // each run measured a slower database than the one before.
    pqxx::nontransaction vacuum{conn};
    vacuum.exec("VACUUM (ANALYZE) ledger, released_reservations, "
                "ended_reservations, reservations, grants, chats");
  } catch (const std::exception& e) {
    return caf::make_error(ec::storage_unavailable,
                           std::string{"dropping chats: "} + e.what());
  }
  return caf::none;
}

} // namespace chargeonce::persistence
