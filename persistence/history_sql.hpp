// SPDX-License-Identifier: Apache-2.0
// The support view's two queries (store_history.cpp), here so that a test
// can ask Postgres how it plans them on a chat with a long past.
#pragma once

namespace chargeonce::persistence {

// The page's time bounds, from microseconds since the epoch ($2, $3).
#define HISTORY_LOW "(to_timestamp(0) + $2::bigint * interval '1 microsecond')"
#define HISTORY_HIGH "(to_timestamp(0) + $3::bigint * interval '1 microsecond')"

/// Up to $3 ledger rows of chat $1 with an id below $2, newest first, each
/// with the request id its reservation had when one is still known (a
/// lookup by id per row shown: as a join, it let the planner sort the
/// chat's whole ledger now and then). The bounds are row comparisons on
/// (chat_id, id), not an equality on chat_id: so only the (chat_id, id)
/// index can serve them and the order, and the planner never walks the
/// primary key through other chats' rows, however its statistics see this
/// chat.
inline constexpr const char* history_ledger_sql =
  "SELECT l.id, chargeonce_us(l.committed_at), l.entry, "
  "coalesce(l.detail, ''), coalesce(l.reservation_id, 0), "
  "coalesce(l.kind, ''), coalesce(l.payment_id, ''), l.charged::text, "
  "l.credited_balance, l.changed::text, l.pockets::text, l.units, "
  "l.released::text, coalesce("
  "(SELECT e.request_id FROM ended_reservations e"
  " WHERE e.id = l.reservation_id),"
  " (SELECT u.request_id FROM uncertain_reservations u"
  "  WHERE u.id = l.reservation_id), ''), l.window_number, "
  "chargeonce_grant_parts(l.grant_ids, l.grant_credits) "
  "FROM ledger l "
  "WHERE (l.chat_id, l.id) > ($1::bigint, 0::bigint) "
  "AND (l.chat_id, l.id) < ($1::bigint, $2::bigint) "
  "ORDER BY l.chat_id DESC, l.id DESC LIMIT $3";

/// Every table that keeps a reservation, as one timeline: active ones at
/// their creation, ended ones at their end (a release with its reason),
/// jobs that went uncertain at their resolution (or since when they are
/// uncertain). Each reservation appears once: the uncertain row wins over
/// the ended one, the ended one over the bare release. A committed one is
/// not here: its ledger row (cause commit) is its end, so commits, the bulk
/// of a busy chat's reservations, cost the page nothing. The branches of
/// the large tables name the chat by equality (so the planner estimates
/// its few rows well) and bound (chat_id, time) by row comparisons (which
/// only their (chat_id, time) index can serve), and take their own newest
/// $4 in that index's order; a release's reason is a lookup by id per row
/// shown. Each of these was needed: without them a plan reading the chat's
/// request-id index (100,000 rows), or hashing released_reservations whole,
/// was chosen now and then, as the statistics went. A page costs what it
/// shows, however long the chat's past or busy the others. Chat $1, times
/// (microseconds since the epoch) after $2 up to $3, at most $4, newest first.
inline constexpr const char* history_reservations_sql =
  "WITH bounds AS (SELECT " HISTORY_LOW " AS low, " HISTORY_HIGH " AS high),"
  " ev AS ("
  " SELECT r.id, r.kind, r.status, ''::text AS detail, r.request_id,"
  "  r.held::text AS held, r.units, chargeonce_us(r.created_at) AS created_us,"
  "  chargeonce_us(r.created_at) AS at_us,"
  "  chargeonce_us(r.lease_expires_at) AS lease_us, r.cancel_requested,"
  "  NULL::bigint AS uncertain_us, r.window_number,"
  "  chargeonce_grant_parts(r.held_grants, r.held_grant_credits) AS grants"
  "  FROM reservations r, bounds b WHERE r.chat_id = $1"
  "  AND r.created_at > b.low AND r.created_at <= b.high"
  " UNION ALL"
  " (SELECT e.id, e.kind, e.status,"
  "  coalesce((SELECT x.reason FROM released_reservations x"
  "            WHERE x.id = e.id), ''), e.request_id,"
  "  e.held::text, e.units, chargeonce_us(e.created_at),"
  "  chargeonce_us(e.ended_at), NULL, false, NULL, e.window_number, '[]'"
  "  FROM ended_reservations e"
  "  WHERE e.status <> 'committed' AND e.chat_id = $1"
  "  AND (e.chat_id, e.ended_at) > ($1::bigint, " HISTORY_LOW ")"
  "  AND (e.chat_id, e.ended_at) <= ($1::bigint, " HISTORY_HIGH ")"
  "  AND NOT EXISTS"
  "   (SELECT 1 FROM uncertain_reservations u WHERE u.id = e.id)"
  "  ORDER BY e.chat_id DESC, e.ended_at DESC, e.id DESC LIMIT $4)"
  " UNION ALL"
  " SELECT u.id, u.kind,"
  "  CASE u.outcome WHEN 'succeeded' THEN 'committed'"
  "   WHEN 'failed' THEN 'failed' WHEN 'released' THEN 'released'"
  "   ELSE 'outcome_unknown' END,"
  "  coalesce(CASE u.outcome WHEN 'released' THEN 'unresolved'"
  "   ELSE u.outcome END, 'uncertain'),"
  "  u.request_id, u.held::text, u.units, chargeonce_us(u.created_at),"
  "  chargeonce_us(coalesce(u.resolved_at, u.uncertain_at)), NULL,"
  "  u.cancel_requested, chargeonce_us(u.uncertain_at), u.window_number,"
  "  chargeonce_grant_parts(u.held_grants, u.held_grant_credits)"
  "  FROM uncertain_reservations u, bounds b WHERE u.chat_id = $1"
  "  AND coalesce(u.resolved_at, u.uncertain_at) > b.low"
  "  AND coalesce(u.resolved_at, u.uncertain_at) <= b.high"
  "  AND u.uncertain_at <= b.high"
  " UNION ALL"
  " (SELECT x.id, '', 'released', x.reason, '', '{}', 0, NULL,"
  "  chargeonce_us(x.released_at), NULL, false, NULL, NULL::bigint, '[]'"
  "  FROM released_reservations x"
  "  WHERE x.chat_id = $1"
  "  AND (x.chat_id, x.released_at) > ($1::bigint, " HISTORY_LOW ")"
  "  AND (x.chat_id, x.released_at) <= ($1::bigint, " HISTORY_HIGH ")"
  "  AND NOT EXISTS (SELECT 1 FROM ended_reservations e WHERE e.id = x.id)"
  "  AND NOT EXISTS (SELECT 1 FROM uncertain_reservations u WHERE u.id = x.id)"
  "  ORDER BY x.chat_id DESC, x.released_at DESC, x.id DESC LIMIT $4)"
  ") SELECT id, kind, status, detail, request_id, held, units, created_us,"
  " at_us, lease_us, cancel_requested, uncertain_us, window_number, grants"
  " FROM ev"
  " ORDER BY at_us DESC, id DESC LIMIT $4";

#undef HISTORY_LOW
#undef HISTORY_HIGH

} // namespace chargeonce::persistence
