// SPDX-License-Identifier: Apache-2.0
#include "tools/bench/audit.hpp"

#include <pqxx/pqxx>

namespace chargeonce::bench {

run_audit audit_run(const std::string& dsn, chat_id first, int64_t count,
                    int32_t seed_balance, uint64_t acknowledged) {
  pqxx::connection conn{dsn};
  pqxx::nontransaction tx{conn};
  auto r = tx.exec_params1(
    "SELECT (SELECT count(*) FROM ledger"
    "         WHERE chat_id > $1 AND chat_id <= $2 AND entry = 'charge'),"
    "       (SELECT coalesce(sum(e.v::bigint), 0)"
    "          FROM ledger, unnest(charged) AS e(v)"
    "         WHERE chat_id > $1 AND chat_id <= $2 AND entry = 'charge'),"
    "       (SELECT coalesce(sum(chargeonce_amount(charged, 'balance')), 0)"
    "          FROM ledger"
    "         WHERE chat_id > $1 AND chat_id <= $2 AND entry = 'charge'),"
    "       (SELECT coalesce(sum($3 - chargeonce_amount(pockets, 'balance')), "
    "0)"
    "          FROM chats"
    "         WHERE chat_id > $1 AND chat_id <= $2),"
    "       (SELECT count(*) FROM reservations"
    "         WHERE chat_id > $1 AND chat_id <= $2)",
    first, first + count, int64_t{seed_balance});
  run_audit out;
  out.acknowledged = acknowledged;
  out.ledger_charges = r[0].as<uint64_t>();
  out.charged_units = r[1].as<uint64_t>();
  out.charged_balance = r[2].as<int64_t>();
  out.balance_spent = r[3].as<int64_t>();
  out.open_reservations = r[4].as<uint64_t>();
  return out;
}

} // namespace chargeonce::bench
