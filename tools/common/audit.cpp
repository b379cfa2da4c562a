// SPDX-License-Identifier: Apache-2.0
#include "tools/common/audit.hpp"

#include "persistence/failure.hpp"
#include "persistence/pocket_ordinals.hpp"
#include "protocol/errors.hpp"

#include <pqxx/pqxx>

namespace chargeonce::persistence {

namespace {

/// The exception in flight as an error: an outage or, for a bug, internal.
caf::error failed(const char* what) {
  auto f = classify(std::current_exception());
  return caf::make_error(f.code, std::string{what} + ": " + f.detail);
}

constexpr const char* micros = "(extract(epoch FROM {}) * 1000000)::bigint";

/// `micros` with the column filled in.
std::string micros_of(const std::string& column) {
  std::string out = micros;
  return out.replace(out.find("{}"), 2, column);
}

/// A Postgres array of integers as text ({1,2,3}), its elements.
template <class T>
std::vector<T> read_ints(const char* text) {
  std::vector<T> out;
  std::string number;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p == '-' || (*p >= '0' && *p <= '9')) {
      number += *p;
    } else if (!number.empty()) {
      out.push_back(static_cast<T>(std::stoll(number)));
      number.clear();
    }
  }
  return out;
}

/// A timestamp column as microseconds, 0 for NULL.
int64_t micros_or_zero(const pqxx::field& f) {
  return f.is_null() ? 0 : f.as<int64_t>();
}

void read_chats(pqxx::transaction_base& tx, chat_id first, int64_t count,
                audit_snapshot& out, pocket_ordinals& ordinals) {
  // Written out here, not through the server's functions: the auditor
  // reads the rows as they are. A grant is live until it expired (written
  // or due) or was voided; what holds hold of it is in the holds' arrays.
  auto rs = tx.exec_params(
    "WITH held AS (SELECT x.grant_id, sum(x.credits) AS held FROM ("
    "  SELECT held_grants, held_grant_credits FROM reservations"
    "  UNION ALL SELECT held_grants, held_grant_credits"
    "  FROM uncertain_reservations WHERE outcome IS NULL) r,"
    "  unnest(r.held_grants, r.held_grant_credits) AS x(grant_id, credits)"
    "  GROUP BY x.grant_id) "
    "SELECT chat_id, pockets::text, window_number, (SELECT coalesce(sum("
    "g.credits - g.charged - g.expired - g.voided), 0) FROM grants g WHERE "
    "g.chat_id = c.chat_id), CASE WHEN c.sole_grant IS NULL THEN 0 ELSE "
    "(SELECT count(*) FROM grants g LEFT JOIN held h USING (grant_id) "
    "  WHERE g.chat_id = c.chat_id AND g.grant_id <> c.sole_grant"
    "    AND g.expired_at IS NULL AND g.voided_at IS NULL"
    "    AND (g.expires_at IS NULL OR g.expires_at > now())"
    "    AND g.credits - g.charged - g.expired - g.voided"
    "        > coalesce(h.held, 0))"
    " + CASE WHEN EXISTS (SELECT 1 FROM grants g WHERE g.grant_id = "
    "  c.sole_grant AND g.chat_id = c.chat_id AND g.expired_at IS NULL"
    "  AND g.voided_at IS NULL) THEN 0 ELSE 1 END END "
    "FROM chats c WHERE chat_id > $1 AND chat_id <= $2 ORDER BY chat_id",
    first, first + count);
  for (const auto& r : rs)
    out.chats.push_back(
      audit_chat{r[0].as<int64_t>(), ordinals.read(r[1].c_str()),
                 r[2].as<int64_t>(), r[3].as<int64_t>(), r[4].as<int64_t>()});
}

void read_ledger(pqxx::transaction_base& tx, chat_id first, int64_t count,
                 audit_snapshot& out, pocket_ordinals& ordinals) {
  auto rs =
    tx.exec_params("SELECT id, entry, coalesce(reservation_id, 0), chat_id, "
                   "charged::text, credited_balance, coalesce(payment_id, ''), "
                     + micros_of("committed_at")
                     + ", changed::text, coalesce(detail, ''), pockets::text, "
                       "window_number, grant_ids::text, grant_credits::text "
                       "FROM ledger "
                       "WHERE chat_id > $1 AND chat_id <= $2 ORDER BY id",
                   first, first + count);
  for (const auto& r : rs) {
    audit_ledger_row x;
    x.id = r[0].as<int64_t>();
    x.entry = r[1].as<std::string>();
    x.charge = x.entry == "charge";
    x.reservation = r[2].as<int64_t>();
    x.chat = r[3].as<int64_t>();
    x.charged = ordinals.read(r[4].c_str());
    x.credited = r[5].as<int32_t>();
    x.payment_id = r[6].as<std::string>();
    x.at_us = r[7].as<int64_t>();
    x.changed = ordinals.read(r[8].c_str());
    x.detail = r[9].as<std::string>();
    x.has_after = !r[10].is_null();
    if (x.has_after)
      x.after = ordinals.read(r[10].c_str());
    x.has_window = !r[11].is_null();
    if (x.has_window)
      x.window = r[11].as<int64_t>();
    x.grant_ids = read_ints<int64_t>(r[12].c_str());
    x.grant_credits = read_ints<int32_t>(r[13].c_str());
    out.ledger.push_back(std::move(x));
  }
}

void read_reservations(pqxx::transaction_base& tx, chat_id first, int64_t count,
                       audit_snapshot& out, pocket_ordinals& ordinals) {
  auto rs = tx.exec_params(
    "SELECT id, chat_id, status = 'in_progress', held::text, "
      + micros_of("created_at")
      + ", window_number, held_grants::text, held_grant_credits::text "
        "FROM reservations WHERE chat_id > $1 AND chat_id <= $2 ORDER BY id",
    first, first + count);
  for (const auto& r : rs) {
    out.reservations.push_back(audit_reservation{
      r[0].as<int64_t>(), r[1].as<int64_t>(), r[2].as<bool>(),
      ordinals.read(r[3].c_str()), r[4].as<int64_t>(), r[5].as<int64_t>()});
    out.holds.push_back(audit_hold{
      r[0].as<int64_t>(), r[1].as<int64_t>(), r[4].as<int64_t>(), true,
      read_ints<int64_t>(r[6].c_str()), read_ints<int32_t>(r[7].c_str())});
  }
}

void read_releases(pqxx::transaction_base& tx, chat_id first, int64_t count,
                   audit_snapshot& out) {
  auto rs = tx.exec_params(
    "SELECT id, chat_id, reason, " + micros_of("released_at")
      + " FROM released_reservations WHERE chat_id > $1 AND chat_id <= $2 "
        "ORDER BY id",
    first, first + count);
  for (const auto& r : rs)
    out.releases.push_back(audit_release{r[0].as<int64_t>(), r[1].as<int64_t>(),
                                         r[2].as<std::string>(),
                                         r[3].as<int64_t>()});
}

void read_uncertain(pqxx::transaction_base& tx, chat_id first, int64_t count,
                    audit_snapshot& out, pocket_ordinals& ordinals) {
  auto rs = tx.exec_params(
    "SELECT id, chat_id, coalesce(outcome, ''), " + micros_of("uncertain_at")
      + ", window_number, " + micros_of("created_at") + ", "
      + micros_of("resolved_at")
      + ", held::text, held_grants::text, held_grant_credits::text "
        "FROM uncertain_reservations WHERE chat_id > $1 AND chat_id <= $2 "
        "ORDER BY id",
    first, first + count);
  for (const auto& r : rs) {
    audit_uncertain x{r[0].as<int64_t>(), r[1].as<int64_t>(),
                      r[2].as<std::string>(), r[3].as<int64_t>(),
                      r[4].as<int64_t>()};
    x.created_us = r[5].as<int64_t>();
    x.resolved_us = micros_or_zero(r[6]);
    x.held = ordinals.read(r[7].c_str());
    out.holds.push_back(audit_hold{
      x.id, x.chat, x.created_us, x.outcome.empty(),
      read_ints<int64_t>(r[8].c_str()), read_ints<int32_t>(r[9].c_str())});
    out.uncertain.push_back(std::move(x));
  }
}

void read_events(pqxx::transaction_base& tx, chat_id first, int64_t count,
                 audit_snapshot& out) {
  auto rs = tx.exec_params(
    "SELECT event, chat_id, coalesce(reservation_id, 0), coalesce(detail, '') "
    "FROM events WHERE chat_id > $1 AND chat_id <= $2 ORDER BY seq",
    first, first + count);
  for (const auto& r : rs)
    out.events.push_back(audit_event{r[0].as<std::string>(), r[1].as<int64_t>(),
                                     r[2].as<int64_t>(),
                                     r[3].as<std::string>()});
}

void read_ended(pqxx::transaction_base& tx, chat_id first, int64_t count,
                audit_snapshot& out, pocket_ordinals& ordinals) {
  auto rs =
    tx.exec_params("SELECT id, window_number, chat_id, "
                     + micros_of("created_at") + ", " + micros_of("ended_at")
                     + ", held::text FROM ended_reservations "
                       "WHERE chat_id > $1 AND chat_id <= $2 "
                       "ORDER BY id",
                   first, first + count);
  for (const auto& r : rs)
    out.ended.push_back(audit_ended{
      r[0].as<int64_t>(), r[1].as<int64_t>(), r[2].as<int64_t>(),
      r[3].as<int64_t>(), r[4].as<int64_t>(), ordinals.read(r[5].c_str())});
}

void read_grants(pqxx::transaction_base& tx, chat_id first, int64_t count,
                 audit_snapshot& out) {
  auto rs = tx.exec_params(
    "SELECT grant_id, chat_id, source, credits, charged, expired, voided, "
    "priority, expires_at IS NOT NULL, "
      + micros_of("expires_at") + ", " + micros_of("created_at")
      + ", coalesce(payment_id, ''), " + micros_of("expired_at") + ", "
      + micros_of("voided_at") + ", " + micros_of("expiring_noticed_at")
      + " FROM grants WHERE chat_id > $1 AND chat_id <= $2 ORDER BY grant_id",
    first, first + count);
  for (const auto& r : rs) {
    audit_grant g;
    g.id = r[0].as<int64_t>();
    g.chat = r[1].as<int64_t>();
    g.source = r[2].as<std::string>();
    g.credits = r[3].as<int32_t>();
    g.charged = r[4].as<int32_t>();
    g.expired = r[5].as<int32_t>();
    g.voided = r[6].as<int32_t>();
    g.priority = r[7].as<int32_t>();
    g.expires = r[8].as<bool>();
    g.expires_us = micros_or_zero(r[9]);
    g.created_us = r[10].as<int64_t>();
    g.payment_id = r[11].as<std::string>();
    g.expired_us = micros_or_zero(r[12]);
    g.voided_us = micros_or_zero(r[13]);
    g.noticed_us = micros_or_zero(r[14]);
    out.grants.push_back(std::move(g));
  }
}

} // namespace

pockets audit_ledger_row::change() const {
  pockets out;
  if (entry == "charge" && !has_window) {
    out -= charged;
  } else if (entry == "top_up") {
    out.add(pocket::balance, credited);
  } else {
    out = changed;
  }
  return out;
}

caf::expected<audit_snapshot>
read_audit_snapshot(const std::string& dsn, chat_id first, int64_t count) {
  try {
    pqxx::connection conn{dsn};
    pqxx::transaction<pqxx::isolation_level::repeatable_read> tx{conn};
    audit_snapshot out;
    pocket_ordinals ordinals;
    ordinals.load(tx);
    read_chats(tx, first, count, out, ordinals);
    read_ledger(tx, first, count, out, ordinals);
    read_reservations(tx, first, count, out, ordinals);
    read_releases(tx, first, count, out);
    read_uncertain(tx, first, count, out, ordinals);
    read_events(tx, first, count, out);
    read_ended(tx, first, count, out, ordinals);
    read_grants(tx, first, count, out);
    out.read_us = tx.exec("SELECT " + micros_of("now()"))[0][0].as<int64_t>();
    tx.commit();
    return out;
  } catch (...) {
    return failed("reading the audit snapshot");
  }
}

caf::expected<int64_t> count_reservations(const std::string& dsn, chat_id first,
                                          int64_t count) {
  try {
    pqxx::connection conn{dsn};
    pqxx::nontransaction tx{conn};
    auto rs = tx.exec_params(
      "SELECT (SELECT count(*) FROM reservations WHERE chat_id > $1 AND "
      "chat_id <= $2) + (SELECT count(*) FROM uncertain_reservations WHERE "
      "chat_id > $1 AND chat_id <= $2 AND outcome IS NULL)",
      first, first + count);
    return rs[0][0].as<int64_t>();
  } catch (...) {
    return failed("counting reservations");
  }
}

caf::expected<int64_t> terminate_backends(const std::string& dsn,
                                          const std::string& application_name) {
  try {
    pqxx::connection conn{dsn};
    pqxx::nontransaction tx{conn};
    auto rs = tx.exec_params(
      "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) "
      "FROM pg_stat_activity WHERE application_name = $1 "
      "AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
      application_name);
    return rs[0][0].as<int64_t>();
  } catch (...) {
    return failed("terminating backends");
  }
}

caf::error forge_charge(const std::string& dsn, chat_id chat,
                        reservation_id forged) {
  try {
    pqxx::connection conn{dsn};
    pqxx::work tx{conn};
    tx.exec_params(
      "INSERT INTO ledger (reservation_id, chat_id, kind, charged, changed, "
      "window_number) VALUES ($1, $2, 'image', "
      "chargeonce_pockets('{\"balance\": 1}'), "
      "chargeonce_pockets('{\"balance\": -1}'), "
      "coalesce((SELECT window_number FROM ended_reservations WHERE id = $1),"
      " (SELECT window_number FROM uncertain_reservations WHERE id = $1),"
      " (SELECT window_number FROM chats WHERE chat_id = $2), 0))",
      forged, chat);
    tx.commit();
    return caf::none;
  } catch (...) {
    return failed("forging a ledger row");
  }
}

caf::error forge_lost_event(const std::string& dsn, chat_id first,
                            int64_t count) {
  try {
    pqxx::connection conn{dsn};
    pqxx::work tx{conn};
    auto gone =
      tx.exec_params("DELETE FROM events WHERE seq = (SELECT seq FROM events"
                     " WHERE event NOT IN ('limits_refilled', "
                     "'credits_expired', 'credits_expiring') AND chat_id > $1"
                     "   AND chat_id <= $2 ORDER BY seq LIMIT 1)",
                     first, first + count);
    if (gone.affected_rows() == 0) // a short run without one: an orphan
      tx.exec_params("INSERT INTO events (event, chat_id, reservation_id, "
                     "detail) VALUES ('reservation_released', $1, "
                     "9000000000000, 'sweep_timeout')",
                     first + 1);
    tx.commit();
    return caf::none;
  } catch (...) {
    return failed("forging a lost event");
  }
}

caf::error forge_pocket_move(const std::string& dsn, chat_id first,
                             int64_t count, const std::string& to) {
  try {
    pqxx::connection conn{dsn};
    pqxx::work tx{conn};
    auto moved = tx.exec_params(
      "UPDATE chats SET pockets = chargeonce_pockets_set("
      "    chargeonce_pockets_set(pockets, chargeonce_pocket('balance'),"
      "      chargeonce_amount(pockets, 'balance') - 1),"
      "    chargeonce_pocket($3::text),"
      "    chargeonce_amount(pockets, $3::text) + 1)"
      " WHERE chat_id = (SELECT chat_id FROM chats"
      "                   WHERE chat_id > $1 AND chat_id <= $2"
      "                     AND chargeonce_amount(pockets, 'balance') > 0"
      "                   ORDER BY chat_id LIMIT 1)",
      first, first + count, to);
    tx.commit();
    if (moved.affected_rows() == 0)
      return caf::make_error(ec::not_found, "no chat of the range has credits");
    return caf::none;
  } catch (...) {
    return failed("forging a move between pockets");
  }
}

caf::error forge_over_capture(const std::string& dsn, chat_id first,
                              int64_t count) {
  try {
    pqxx::connection conn{dsn};
    pqxx::work tx{conn};
    auto x = tx.exec_params(
      "SELECT l.id, l.chat_id FROM ledger l"
      " WHERE chat_id > $1 AND chat_id <= $2 AND released <> '{}'"
      // Pockets that can give it now (a refill may have lowered them):
      // the take must not clamp, or a total would change.
      "   AND NOT EXISTS (SELECT 1 FROM chats c,"
      "         unnest(l.released) WITH ORDINALITY AS e(v, i)"
      "        WHERE c.chat_id = l.chat_id AND"
      "          coalesce(c.pockets[e.i], 0) < e.v)"
      " ORDER BY reservation_id LIMIT 1",
      first, first + count);
    if (x.empty())
      return caf::make_error(ec::not_found,
                             "no commit of the range released anything");
    auto row = x[0][0].as<int64_t>();
    auto chat = x[0][1].as<int64_t>();
    tx.exec_params("UPDATE chats SET pockets = chargeonce_pockets_take("
                   "pockets, (SELECT released FROM ledger WHERE id = $1))"
                   " WHERE chat_id = $2",
                   row, chat);
    // The row books what it released as charged and taken, and the pockets
    // recorded from it on lose it too: the ledger's chain stays whole, as
    // every total does. One statement updates each row once (a row updated
    // twice in one statement keeps only one of the changes).
    tx.exec_params(
      "UPDATE ledger l SET"
      "  charged = CASE WHEN l.id = $1"
      "    THEN chargeonce_pockets_add(l.charged, x.released)"
      "    ELSE l.charged END,"
      "  changed = CASE WHEN l.id = $1"
      "    THEN chargeonce_pockets_change(x.released, l.changed)"
      "    ELSE l.changed END,"
      "  released = CASE WHEN l.id = $1 THEN '{}' ELSE l.released END,"
      "  pockets = CASE WHEN l.pockets IS NULL THEN NULL"
      "    ELSE chargeonce_pockets_take(l.pockets, x.released) END"
      " FROM (SELECT released FROM ledger WHERE id = $1) x"
      " WHERE l.chat_id = $2 AND l.id >= $1",
      row, chat);
    tx.commit();
    return caf::none;
  } catch (...) {
    return failed("forging a charge beyond its units");
  }
}

caf::error forge_window_paid_twice(const std::string& dsn, chat_id first,
                                   int64_t count) {
  try {
    pqxx::connection conn{dsn};
    pqxx::work tx{conn};
    // A charge written after a refill row that opened a later window than
    // the one it names, with a daily part its own window paid and the new
    // window's daily pockets left alone (what a correct commit writes);
    // one whose daily part the pockets recorded from it on, and the chat's,
    // can give: the take must not clamp, or a total would change.
    auto x = tx.exec_params(
      "SELECT l.id, l.chat_id FROM ledger l"
      " WHERE l.chat_id > $1 AND l.chat_id <= $2 AND l.entry = 'charge'"
      "   AND l.window_number < (SELECT r.window_number FROM ledger r"
      "        WHERE r.chat_id = l.chat_id AND r.id < l.id"
      "          AND r.entry = 'refill' ORDER BY r.id DESC LIMIT 1)"
      "   AND EXISTS (SELECT 1 FROM unnest(l.charged) WITH ORDINALITY"
      "        AS e(v, i) WHERE e.i <> chargeonce_pocket('balance')"
      "          AND e.v > 0)"
      "   AND NOT EXISTS (SELECT 1 FROM unnest(l.changed) WITH ORDINALITY"
      "        AS e(v, i) WHERE e.i <> chargeonce_pocket('balance')"
      "          AND e.v <> 0)"
      "   AND NOT EXISTS (SELECT 1 FROM ledger n,"
      "         unnest(l.charged) WITH ORDINALITY AS e(v, i)"
      "        WHERE n.chat_id = l.chat_id AND n.id >= l.id"
      "          AND e.i <> chargeonce_pocket('balance')"
      "          AND coalesce(n.pockets[e.i], 0) < e.v)"
      "   AND NOT EXISTS (SELECT 1 FROM chats c,"
      "         unnest(l.charged) WITH ORDINALITY AS e(v, i)"
      "        WHERE c.chat_id = l.chat_id"
      "          AND e.i <> chargeonce_pocket('balance')"
      "          AND coalesce(c.pockets[e.i], 0) < e.v)"
      " ORDER BY l.id LIMIT 1",
      first, first + count);
    if (x.empty())
      return caf::make_error(ec::not_found,
                             "no charge of the range was paid by a past "
                             "window");
    auto row = x[0][0].as<int64_t>();
    auto chat = x[0][1].as<int64_t>();
    // Its daily part: what it charged, balance left out.
    const std::string daily = "(SELECT chargeonce_pockets_set(charged,"
                              " chargeonce_pocket('balance'), NULL)"
                              " AS daily FROM ledger WHERE id = $1)";
    tx.exec_params("UPDATE chats c SET pockets = chargeonce_pockets_take("
                   "c.pockets, d.daily) FROM "
                     + daily + " d WHERE c.chat_id = $2",
                   row, chat);
    // One statement updates each row once: the row's change and the pockets
    // recorded from it on, so that the ledger's chain stays whole.
    tx.exec_params("UPDATE ledger l SET"
                   "  changed = CASE WHEN l.id = $1"
                   "    THEN chargeonce_pockets_change(d.daily, l.changed)"
                   "    ELSE l.changed END,"
                   "  pockets = chargeonce_pockets_take(l.pockets, d.daily)"
                   " FROM "
                     + daily
                     + " d WHERE l.chat_id = $2 AND l.id >= $1"
                       " AND l.pockets IS NOT NULL",
                   row, chat);
    tx.commit();
    return caf::none;
  } catch (...) {
    return failed("forging a charge that two windows paid");
  }
}

caf::error forge_grant_left(const std::string& dsn, chat_id first,
                            int64_t count) {
  try {
    pqxx::connection conn{dsn};
    pqxx::work tx{conn};
    auto forged = tx.exec_params(
      "UPDATE grants SET charged = charged + 1 WHERE grant_id = (SELECT "
      "grant_id FROM grants WHERE chat_id > $1 AND chat_id <= $2 AND "
      "credits - charged - expired - voided > 0 ORDER BY grant_id LIMIT 1) "
      "RETURNING grant_id",
      first, first + count);
    tx.commit();
    if (forged.empty())
      return caf::make_error(ec::not_found, "no grant of the range has "
                                            "credits left");
    return caf::none;
  } catch (...) {
    return failed("forging a grant's charge");
  }
}

caf::error forge_sole_grant(const std::string& dsn, chat_id first,
                            int64_t count) {
  try {
    pqxx::connection conn{dsn};
    pqxx::work tx{conn};
    // Another chat's grant: the first chat's holds on balance would be
    // taken from it.
    auto forged = tx.exec_params(
      "UPDATE chats c SET sole_grant = (SELECT grant_id FROM grants g "
      "WHERE g.chat_id <> c.chat_id ORDER BY grant_id LIMIT 1) "
      "WHERE chat_id = (SELECT min(chat_id) FROM chats WHERE chat_id > $1 "
      "AND chat_id <= $2 AND sole_grant IS NOT NULL) "
      "AND EXISTS (SELECT 1 FROM grants g WHERE g.chat_id <> c.chat_id) "
      "RETURNING chat_id",
      first, first + count);
    tx.commit();
    if (forged.empty())
      return caf::make_error(ec::not_found, "no chat of the range has a sole "
                                            "grant, or no other chat a grant");
    return caf::none;
  } catch (...) {
    return failed("forging a chat's sole grant");
  }
}

caf::error forge_ledger_after(const std::string& dsn, chat_id first,
                              int64_t count) {
  try {
    pqxx::connection conn{dsn};
    pqxx::work tx{conn};
    auto forged = tx.exec_params(
      "UPDATE ledger SET pockets = chargeonce_pockets_set(pockets,"
      "    chargeonce_pocket('balance'),"
      "    chargeonce_amount(pockets, 'balance') + 1)"
      " WHERE id = (SELECT l.id FROM ledger l"
      "              WHERE l.chat_id > $1 AND l.chat_id <= $2"
      "                AND l.pockets IS NOT NULL AND l.entry <> 'admin'"
      "                AND EXISTS (SELECT 1 FROM ledger n"
      "                             WHERE n.chat_id = l.chat_id"
      "                               AND n.id > l.id)"
      "              ORDER BY l.id LIMIT 1)",
      first, first + count);
    tx.commit();
    if (forged.affected_rows() == 0)
      return caf::make_error(ec::not_found,
                             "no chat of the range has two ledger rows");
    return caf::none;
  } catch (...) {
    return failed("forging a ledger row's pockets");
  }
}

caf::error forge_grant_conserved(const std::string& dsn, chat_id first,
                                 int64_t count) {
  try {
    pqxx::connection conn{dsn};
    pqxx::work tx{conn};
    auto forged = tx.exec_params(
      "UPDATE grants SET credits = credits + 1, charged = charged + 1 "
      "WHERE grant_id = (SELECT grant_id FROM grants WHERE chat_id > $1 "
      "AND chat_id <= $2 AND payment_id IS NOT NULL ORDER BY grant_id "
      "LIMIT 1) RETURNING grant_id",
      first, first + count);
    tx.commit();
    if (forged.empty())
      return caf::make_error(ec::not_found, "no top-up's grant in the range");
    return caf::none;
  } catch (...) {
    return failed("forging a grant's credits");
  }
}

caf::error forge_hold_expired(const std::string& dsn, chat_id first,
                              int64_t count) {
  try {
    pqxx::connection conn{dsn};
    pqxx::work tx{conn};
    // An expired grant: moving the expiry of one that never expired would
    // also make it overdue.
    auto forged = tx.exec_params(
      "UPDATE grants g SET expires_at = x.created_at - interval '1 ms'"
      "  FROM (SELECT h.grant_id, e.created_at FROM ledger l"
      "          JOIN ended_reservations e ON e.id = l.reservation_id"
      "          CROSS JOIN LATERAL unnest(l.grant_ids) AS h(grant_id)"
      "          JOIN grants gr ON gr.grant_id = h.grant_id"
      "         WHERE l.chat_id > $1 AND l.chat_id <= $2"
      "           AND l.entry = 'charge' AND gr.expired_at IS NOT NULL"
      "         ORDER BY l.id LIMIT 1) x"
      " WHERE g.grant_id = x.grant_id RETURNING g.grant_id",
      first, first + count);
    tx.commit();
    if (forged.empty())
      return caf::make_error(ec::not_found,
                             "no charge of the range held an expired grant");
    return caf::none;
  } catch (...) {
    return failed("forging a hold on an expired grant");
  }
}

caf::error forge_grant_order(const std::string& dsn, chat_id first,
                             int64_t count) {
  try {
    pqxx::connection conn{dsn};
    pqxx::work tx{conn};
    auto x = tx.exec_params(
      "SELECT id, grant_ids[2], grant_credits[2],"
      "       grant_ids[cardinality(grant_ids)] FROM ledger"
      " WHERE chat_id > $1 AND chat_id <= $2 AND entry = 'charge'"
      "   AND cardinality(grant_ids) >= 3 ORDER BY id LIMIT 1",
      first, first + count);
    if (x.empty())
      return caf::make_error(ec::not_found,
                             "no charge of the range held three grants");
    auto row = x[0][0].as<int64_t>();
    auto passed = x[0][1].as<int64_t>();
    auto credits = x[0][2].as<int32_t>();
    auto last = x[0][3].as<int64_t>();
    tx.exec_params("UPDATE grants SET charged = charged + CASE grant_id"
                   " WHEN $1 THEN -$3::integer ELSE $3::integer END"
                   " WHERE grant_id IN ($1, $2)",
                   passed, last, credits);
    tx.exec_params(
      "UPDATE ledger SET grant_ids = grant_ids[1:1] || grant_ids[3:],"
      "  grant_credits = grant_credits[1:1] || grant_credits[3:"
      "    cardinality(grant_credits) - 1]"
      "    || (grant_credits[cardinality(grant_credits)] + $2::integer)"
      " WHERE id = $1",
      row, credits);
    tx.commit();
    return caf::none;
  } catch (...) {
    return failed("forging a hold that passed over a grant");
  }
}

caf::error forge_void_twice(const std::string& dsn, chat_id first,
                            int64_t count) {
  try {
    pqxx::connection conn{dsn};
    pqxx::work tx{conn};
    // The chat's pockets as they are: the ledger's chain stays whole.
    auto forged = tx.exec_params(
      "INSERT INTO ledger (entry, chat_id, detail, pockets, changed,"
      "                    grant_ids, grant_credits)"
      " SELECT 'void', g.chat_id, 'grant ' || g.grant_id || ' voided',"
      "        c.pockets, '{}', ARRAY[g.grant_id], ARRAY[0]"
      "   FROM grants g JOIN chats c ON c.chat_id = g.chat_id"
      "  WHERE g.chat_id > $1 AND g.chat_id <= $2"
      "    AND g.voided_at IS NOT NULL"
      "  ORDER BY g.grant_id LIMIT 1 RETURNING id",
      first, first + count);
    tx.commit();
    if (forged.empty())
      return caf::make_error(ec::not_found, "no grant of the range was voided");
    return caf::none;
  } catch (...) {
    return failed("forging a second void");
  }
}

caf::error forge_reopen_uncertain(const std::string& dsn, chat_id first,
                                  int64_t count) {
  try {
    pqxx::connection conn{dsn};
    pqxx::work tx{conn};
    auto reopened = tx.exec_params(
      "UPDATE uncertain_reservations SET outcome = NULL, resolved_at = NULL "
      "WHERE id = (SELECT id FROM uncertain_reservations WHERE chat_id > $1 "
      "AND chat_id <= $2 AND outcome IN ('failed', 'released') ORDER BY id "
      "LIMIT 1)",
      first, first + count);
    tx.commit();
    if (reopened.affected_rows() == 0)
      return caf::make_error(ec::not_found,
                             "no job of unknown outcome in the range");
    return caf::none;
  } catch (...) {
    return failed("reopening an uncertain job");
  }
}

} // namespace chargeonce::persistence
