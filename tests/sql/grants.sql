-- SPDX-License-Identifier: Apache-2.0
-- Credit grants (persistence/functions/12_grants.sql and the operations that
-- hold, charge and release them): the spending order, holds split over
-- grants, expiry (lazy and swept; a hold belongs to what it was taken
-- from), void, top-up's idempotency, the batch's set-based path against
-- apply_one, and conservation per grant after every part.
--
-- now() is the transaction's start here, so time passes by moving a
-- grant's expires_at to now() (pg_temp.expire_now).
BEGIN;
SELECT plan(142);

-- A kind that only balance pays, one credit a unit; and one that a daily
-- pocket pays first (ordinal 2), else balance at 2 credits.
CREATE TEMP TABLE catalog AS SELECT
  '{"credit": {"pay": [[3, 1]], "free": false, "q": "q", "pq": "pq",
               "refusal": "insufficient_funds", "why": ""},
    "image": {"pay": [[2, 1], [3, 2]], "free": false, "q": "q", "pq": "pq",
              "refusal": "insufficient_images", "why": ""}}'::jsonb
  AS products;

CREATE FUNCTION pg_temp.chat(p_chat bigint) RETURNS void LANGUAGE sql AS $$
  INSERT INTO chats (chat_id, pockets, started) VALUES (p_chat, '{0,0}', true)
$$;
CREATE FUNCTION pg_temp.top(p_chat bigint, p_credits integer, p_pay text,
                            p_priority integer DEFAULT NULL,
                            p_source text DEFAULT NULL,
                            p_expires_in_ms bigint DEFAULT NULL)
  RETURNS bigint LANGUAGE sql AS $$
  SELECT (chargeonce_top_up(p_chat, p_credits, p_pay, NULL, p_expires_in_ms,
                            p_priority, p_source)).grant_id
$$;
CREATE FUNCTION pg_temp.reserve(p_chat bigint, p_units integer,
                                p_request text, p_kind text DEFAULT 'credit')
  RETURNS chargeonce_outcome LANGUAGE sql AS $$
  SELECT * FROM chargeonce_reserve(p_chat, p_kind, p_request, p_units, 8, 8,
                                   (SELECT products FROM catalog))
$$;
CREATE FUNCTION pg_temp.id_of(p_chat bigint, p_request text) RETURNS bigint
  LANGUAGE sql AS $$
  SELECT id FROM reservations WHERE chat_id = p_chat AND request_id = p_request
  UNION ALL SELECT id FROM uncertain_reservations
   WHERE chat_id = p_chat AND request_id = p_request
  UNION ALL SELECT id FROM ended_reservations
   WHERE chat_id = p_chat AND request_id = p_request
$$;
-- The grants a job of the chat holds (read after the reserve's statement:
-- a reserve called inside the query that reads would not be seen).
CREATE FUNCTION pg_temp.hold_of(p_chat bigint, p_request text)
  RETURNS chargeonce_grant_hold LANGUAGE sql AS $$
  SELECT ROW(held_grants, held_grant_credits)::chargeonce_grant_hold
    FROM reservations WHERE chat_id = p_chat AND request_id = p_request
$$;
-- The moment a grant expires: now (the transaction's time).
CREATE FUNCTION pg_temp.expire_now(p_grant bigint) RETURNS void
  LANGUAGE sql AS $$
  UPDATE grants SET expires_at = now() WHERE grant_id = p_grant;
  UPDATE chats SET next_expiry = now()
   WHERE chat_id = (SELECT chat_id FROM grants WHERE grant_id = p_grant);
$$;
CREATE FUNCTION pg_temp.g(p_grant bigint) RETURNS grants LANGUAGE sql AS $$
  SELECT * FROM grants WHERE grant_id = p_grant
$$;
CREATE FUNCTION pg_temp.balance(p_chat bigint) RETURNS integer
  LANGUAGE sql AS $$
  SELECT coalesce(pockets[3], 0) FROM chats WHERE chat_id = p_chat
$$;
-- Conservation, per grant and per chat; NULL when it holds: each grant's
-- credits = charged + expired + voided + left with left >= what its open
-- holds hold of it, each chat's pockets[3] = the sum of its grants' left,
-- and each open hold's grant parts sum to its held[3]. And the fast path's
-- premise: while a chat names a sole grant, it is a live grant of the
-- chat's, and no other live grant of the chat has credits nobody holds.
CREATE FUNCTION pg_temp.violations() RETURNS text LANGUAGE sql AS $$
  SELECT string_agg(v, '; ') FROM (
    SELECT 'grant ' || g.grant_id || ' holds more than it has' AS v
      FROM grants g
      JOIN LATERAL chargeonce_grants_held(g.chat_id) h
        ON h.grant_id = g.grant_id
     WHERE h.held > g.credits - g.charged - g.expired - g.voided
    UNION ALL
    SELECT 'grant ' || grant_id || ' does not add up' FROM grants
     WHERE credits <> charged + expired + voided
                      + chargeonce_grant_left(grants)
        OR chargeonce_grant_left(grants) < 0
    UNION ALL
    SELECT 'chat ' || c.chat_id || ': balance ' || coalesce(c.pockets[3], 0)
           || ', grants ' || coalesce(s.left_sum, 0)
      FROM chats c
      LEFT JOIN (SELECT chat_id, sum(chargeonce_grant_left(grants)) AS left_sum
                   FROM grants GROUP BY chat_id) s ON s.chat_id = c.chat_id
     WHERE coalesce(c.pockets[3], 0) <> coalesce(s.left_sum, 0)
    UNION ALL
    SELECT 'reservation ' || id || ' holds ' || coalesce(held[3], 0)
           || ' of balance on grants adding up to something else'
      FROM (SELECT id, held, held_grant_credits FROM reservations
            UNION ALL
            SELECT id, held, held_grant_credits FROM uncertain_reservations
             WHERE outcome IS NULL) r
     WHERE coalesce(held[3], 0)
           <> coalesce((SELECT sum(x) FROM unnest(held_grant_credits) x), 0)
    UNION ALL
    SELECT 'chat ' || c.chat_id || ': sole grant ' || c.sole_grant
           || ', but grant ' || g.grant_id || ' has credits nobody holds'
      FROM chats c
      JOIN grants g ON g.chat_id = c.chat_id AND g.grant_id <> c.sole_grant
      LEFT JOIN LATERAL (SELECT h.held FROM chargeonce_grants_held(c.chat_id) h
                          WHERE h.grant_id = g.grant_id) h ON true
     WHERE chargeonce_grant_end(g) IS NULL
       AND chargeonce_grant_left(g) - coalesce(h.held, 0) > 0
    UNION ALL
    SELECT 'chat ' || c.chat_id || ': sole grant ' || c.sole_grant
           || ' is not one of its live grants'
      FROM chats c
     WHERE c.sole_grant IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM grants g WHERE g.grant_id = c.sole_grant
                          AND g.chat_id = c.chat_id AND g.expired_at IS NULL
                          AND g.voided_at IS NULL)
  ) x
$$;

-- Spending order ------------------------------------------------------------

SELECT pg_temp.chat(10);
CREATE TEMP TABLE g10 AS SELECT
  pg_temp.top(10, 1, 'o-late') AS late_purchase,
  pg_temp.top(10, 1, 'o-promo', NULL, 'promo') AS promo,
  pg_temp.top(10, 1, 'o-admin', NULL, 'admin') AS admin,
  pg_temp.top(10, 1, 'o-2d', NULL, NULL, 2 * 86400000) AS two_days,
  pg_temp.top(10, 1, 'o-1d', NULL, NULL, 86400000) AS one_day,
  pg_temp.top(10, 1, 'o-p50', 50) AS priority_50,
  pg_temp.top(10, 1, 'o-early') AS early_purchase;
-- Created in one transaction, the two purchases differ only by id: the
-- later id made earlier shows that creation, not the id, decides.
UPDATE grants SET created_at = now() - interval '1 hour'
 WHERE grant_id = (SELECT early_purchase FROM g10);

SELECT is((chargeonce_hold_grants(10, 7)).grant_ids,
  (SELECT ARRAY[priority_50, one_day, two_days, promo, admin, early_purchase,
                late_purchase] FROM g10),
  'spending order: priority, then the soonest expiry (none last), then '
  'promo, admin, purchase, then creation');
SELECT is((pg_temp.reserve(10, 3, 'o-1')).r_held, '{NULL,NULL,3}'::integer[],
  'a reserve of three credits holds balance');
SELECT is((SELECT held_grants FROM reservations WHERE request_id = 'o-1'),
  (SELECT ARRAY[priority_50, one_day, two_days] FROM g10),
  'and records the first three grants in spending order');
SELECT is((chargeonce_hold_grants(10, 4)).grant_ids,
  (SELECT ARRAY[promo, admin, early_purchase, late_purchase] FROM g10),
  'what is held is not offered again: the next split starts after it');
SELECT is(
  (SELECT array_agg((e ->> 'id')::bigint)
     FROM json_array_elements(chargeonce_grants_json(10)::json) e),
  (SELECT ARRAY[priority_50, one_day, two_days, promo, admin, early_purchase,
                late_purchase] FROM g10),
  'status lists the grants in the same spending order');
SELECT is(pg_temp.violations(), NULL, 'conservation after the order');

-- A hold split across grants ------------------------------------------------

SELECT pg_temp.chat(11);
CREATE TEMP TABLE g11 AS SELECT pg_temp.top(11, 2, 's-first', 10) AS first,
                                pg_temp.top(11, 5, 's-second') AS second;
SELECT is((pg_temp.reserve(11, 4, 's-1')).r_held, '{NULL,NULL,4}'::integer[],
  'four credits from grants of two and five');
SELECT is((SELECT ROW(held_grants, held_grant_credits)::chargeonce_grant_hold
             FROM reservations WHERE request_id = 's-1'),
  (SELECT ROW(ARRAY[first, second], '{2,2}')::chargeonce_grant_hold
     FROM g11),
  'the hold spans both grants: all of the first, the rest of the second');
SELECT is((pg_temp.reserve(11, 3, 's-2')).r_held, '{NULL,NULL,3}'::integer[],
  'three more credits');
SELECT is(pg_temp.hold_of(11, 's-2'),
  (SELECT ROW(ARRAY[second], '{3}')::chargeonce_grant_hold FROM g11),
  'the next hold takes what the second grant has unheld');
SELECT is((pg_temp.reserve(11, 1, 's-3')).outcome, 'insufficient_funds',
  'nothing unheld is left: the kind''s refusal, not an error');
SELECT is((chargeonce_start(11, pg_temp.id_of(11, 's-1'))).outcome, 'ok',
  'started');
SELECT is((chargeonce_commit(11, pg_temp.id_of(11, 's-1'), 3)).c_charged,
  '{NULL,NULL,3}'::integer[], 'a partial commit of three of four units');
SELECT is((SELECT ROW(grant_ids, grant_credits)::chargeonce_grant_hold
             FROM ledger WHERE reservation_id = pg_temp.id_of(11, 's-1')),
  (SELECT ROW(ARRAY[first, second], '{2,1}')::chargeonce_grant_hold
     FROM g11),
  'charges the hold''s grants in the hold''s order, and its row names them');
SELECT is((SELECT array_agg(charged ORDER BY grant_id) FROM grants
            WHERE chat_id = 11), '{2,1}'::integer[],
  'the first grant is spent, the second charged one; the rest returned');
SELECT is(pg_temp.balance(11), 4, 'balance 7 - 3');
SELECT is(pg_temp.violations(), NULL, 'conservation after the split');

-- Expiry ---------------------------------------------------------------------

SELECT pg_temp.chat(12);
CREATE TEMP TABLE g12 AS SELECT
  pg_temp.top(12, 5, 'e-soon', NULL, 'promo', 3600000) AS soon,
  pg_temp.top(12, 3, 'e-other', NULL, NULL, 7200000) AS other,
  pg_temp.top(12, 1, 'e-never') AS never;
SELECT is((SELECT next_expiry FROM chats WHERE chat_id = 12),
  now() + interval '1 hour', 'the chat knows its next expiry');
SELECT is((pg_temp.reserve(12, 2, 'e-1')).r_held, '{NULL,NULL,2}'::integer[],
  'two credits held from the grant that expires first');
SELECT pg_temp.expire_now(soon) FROM g12;
SELECT pg_temp.expire_now(other) FROM g12;
SELECT is((chargeonce_hold_grants(12, 1)).grant_ids,
  (SELECT ARRAY[never] FROM g12),
  'the split skips an expired grant even before its expiry is written');
SELECT is((pg_temp.reserve(12, 2, 'e-2')).outcome, 'insufficient_funds',
  'no new hold from an expired grant: one credit is left that never expires');
SELECT is((SELECT count(*) FROM ledger WHERE chat_id = 12 AND entry = 'expire'),
  2::bigint, 'the reserve expired first: one expire row per grant');
SELECT is((SELECT count(*) FROM events
            WHERE chat_id = 12 AND event = 'credits_expired'),
  2::bigint, '... and one credits_expired event per grant');
SELECT is((SELECT expired FROM grants, g12 WHERE grant_id = soon), 3,
  'only the unheld part expires: 5 less the 2 held');
SELECT is((SELECT grant_credits FROM ledger, g12
            WHERE entry = 'expire' AND grant_ids = ARRAY[soon]),
  '{3}'::integer[], '... and its row says 3');
SELECT is(pg_temp.balance(12), 3, 'balance: the 2 held and the 1 left');
SELECT is((pg_temp.reserve(12, 1, 'e-3')).outcome, 'ok',
  'a reserve of the one live credit');
SELECT is((pg_temp.hold_of(12, 'e-3')).grant_ids,
  (SELECT ARRAY[never] FROM g12), '... holds it from the live grant');
SELECT is((chargeonce_reserve(12, 'credit', 'e-4', 1, 8, 8,
            (SELECT products FROM catalog))).outcome, 'insufficient_funds',
  'and a second write expires nothing again');
SELECT is((SELECT count(*) FROM ledger WHERE chat_id = 12 AND entry = 'expire'),
  2::bigint, '... no second expire row');
SELECT is((SELECT next_expiry FROM chats WHERE chat_id = 12), NULL,
  'nothing else expires');
SELECT is((SELECT (e ->> 'left')::integer || ' ' || (e ->> 'expired')
             FROM json_array_elements(chargeonce_grants_json(12)::json) e,
                  g12 WHERE (e ->> 'id')::bigint = soon),
  '2 true', 'status lists the expired grant with what is held of it, expired');

-- The hold on the expired grant commits from it: the price was fixed when
-- it was reserved.
SELECT is((chargeonce_start(12, pg_temp.id_of(12, 'e-1'))).outcome, 'ok',
  'the job on the expired grant starts');
SELECT is((chargeonce_commit(12, pg_temp.id_of(12, 'e-1'), 0)).c_charged,
  '{NULL,NULL,2}'::integer[],
  'a hold on a grant that expired while the job ran commits whole');
SELECT is((SELECT charged || '/' || expired FROM grants, g12
            WHERE grant_id = soon), '2/3', '... from that grant');
SELECT is(pg_temp.balance(12), 1, 'balance: the grant that never expires');
SELECT is(pg_temp.violations(), NULL, 'conservation after expiry');

-- Holds that end without a charge after their grant expired ------------------

SELECT pg_temp.chat(13);
CREATE TEMP TABLE g13 AS SELECT
  pg_temp.top(13, 8, 'r-soon', NULL, NULL, 3600000) AS soon,
  pg_temp.top(13, 10, 'r-never') AS never;
SELECT pg_temp.reserve(13, 2, 'r-fail'), pg_temp.reserve(13, 2, 'r-cancel'),
       pg_temp.reserve(13, 2, 'r-released'), pg_temp.reserve(13, 2, 'r-resolved');
SELECT is((SELECT count(*) FROM reservations r, g13
            WHERE r.chat_id = 13 AND r.held_grants = ARRAY[soon]),
  4::bigint, 'four holds of two on the grant that expires first');
SELECT chargeonce_start(13, pg_temp.id_of(13, 'r-fail')),
       chargeonce_start(13, pg_temp.id_of(13, 'r-released')),
       chargeonce_start(13, pg_temp.id_of(13, 'r-resolved'));
SELECT chargeonce_uncertain(13, pg_temp.id_of(13, 'r-released'), 'ref-1'),
       chargeonce_uncertain(13, pg_temp.id_of(13, 'r-resolved'), 'ref-2');
SELECT pg_temp.expire_now(soon) FROM g13;

SELECT is((chargeonce_fail(13, pg_temp.id_of(13, 'r-fail'))).outcome, 'ok',
  'a failed job after the expiry');
SELECT is(pg_temp.balance(13), 16,
  '... its hold does not return to the balance (10 + the 6 still held)');
SELECT is((SELECT count(*) FROM ledger
            WHERE chat_id = 13 AND entry = 'expire'
              AND detail LIKE '%released by reservation%'), 1::bigint,
  '... it expires, in a row naming the reservation');
SELECT is((chargeonce_cancel(13, pg_temp.id_of(13, 'r-cancel'), '',
            (SELECT products FROM catalog))).outcome, 'ok',
  'a cancelled queued job after the expiry');
SELECT is(pg_temp.balance(13), 14, '... expires its hold too');
SELECT is(chargeonce_release_unresolved(13, pg_temp.id_of(13, 'r-released'),
                                        -1000), 'unresolved',
  'an uncertain job released unresolved after the expiry');
SELECT is(pg_temp.balance(13), 12, '... expires its hold too');
SELECT is((chargeonce_resolve(13, pg_temp.id_of(13, 'r-resolved'), 'failed',
                              0)).outcome, 'ok',
  'an uncertain job resolved failed after the expiry');
SELECT is(pg_temp.balance(13), 10, '... expires its hold too');
SELECT is((SELECT expired || '/' || charged FROM grants, g13
            WHERE grant_id = soon), '8/0',
  'the expired grant: everything expired, nothing charged, nothing returned');
SELECT is((SELECT count(*) FROM ledger WHERE chat_id = 13 AND entry = 'expire'),
  5::bigint, 'one row for the expiry and one per released hold');
SELECT is(pg_temp.violations(), NULL, 'conservation after released holds');

-- An uncertain job resolved succeeded after its grant expired commits from
-- it, as commit does: what it captures is charged, the rest expires.
SELECT pg_temp.chat(23);
SELECT pg_temp.top(23, 4, 'u-soon', NULL, NULL, 3600000),
       pg_temp.top(23, 2, 'u-never');
SELECT pg_temp.reserve(23, 3, 'u-1');
SELECT chargeonce_start(23, pg_temp.id_of(23, 'u-1'));
SELECT chargeonce_uncertain(23, pg_temp.id_of(23, 'u-1'), 'ref-3');
SELECT pg_temp.expire_now(grant_id) FROM grants WHERE payment_id = 'u-soon';
SELECT is((chargeonce_resolve(23, pg_temp.id_of(23, 'u-1'), 'succeeded',
                              2)).charged,
  '{NULL,NULL,2}'::integer[],
  'resolved succeeded for 2 of 3 units after its grant expired');
SELECT is((SELECT charged || '/' || expired FROM grants
            WHERE payment_id = 'u-soon'), '2/2',
  '... charged from that grant; the released unit expires with its rest');
SELECT is((SELECT ROW(grant_ids, grant_credits)::chargeonce_grant_hold
             FROM ledger WHERE reservation_id = pg_temp.id_of(23, 'u-1')),
  (SELECT ROW(ARRAY[grant_id], '{2}')::chargeonce_grant_hold FROM grants
    WHERE payment_id = 'u-soon'), '... and the charge row names it');
SELECT is(pg_temp.balance(23), 2, 'balance: the grant that never expires');
SELECT is(pg_temp.violations(), NULL, 'conservation after a resolve');

-- Void -------------------------------------------------------------------------

SELECT pg_temp.chat(14);
CREATE TEMP TABLE g14 AS SELECT pg_temp.top(14, 5, 'v-refunded') AS refunded,
                                pg_temp.top(14, 4, 'v-kept', 200) AS kept;
SELECT is((pg_temp.reserve(14, 2, 'v-1')).r_held, '{NULL,NULL,2}'::integer[],
  'a hold of two on the grant that will be voided');
SELECT chargeonce_start(14, pg_temp.id_of(14, 'v-1'));
SELECT is((SELECT (chargeonce_void_grant(14, NULL, 'v-refunded')).left_credits),
  2, 'void by payment id: what is held stays');
SELECT is((SELECT voided FROM grants, g14 WHERE grant_id = refunded), 3,
  '... the unheld 3 are voided');
SELECT is(pg_temp.balance(14), 6, '... and leave the balance');
SELECT is((SELECT count(*) FROM ledger WHERE chat_id = 14 AND entry = 'void'),
  1::bigint, '... with one void row');
SELECT is((SELECT (chargeonce_void_grant(14, refunded)).voided_us FROM g14),
  (SELECT chargeonce_us(voided_at) FROM grants, g14 WHERE grant_id = refunded),
  'a second void answers the grant as it is');
SELECT is((SELECT count(*) FROM ledger WHERE chat_id = 14 AND entry = 'void'),
  1::bigint, '... and changes nothing');
SELECT is((pg_temp.reserve(14, 1, 'v-2')).outcome, 'ok',
  'a reserve after the void');
SELECT is((pg_temp.hold_of(14, 'v-2')).grant_ids,
  (SELECT ARRAY[kept] FROM g14), '... holds nothing of the voided grant');
SELECT is((chargeonce_commit(14, pg_temp.id_of(14, 'v-1'), 1)).c_charged,
  '{NULL,NULL,1}'::integer[],
  'the hold on the voided grant finishes: one unit of two committed');
SELECT is((SELECT charged || '/' || voided || '/' || expired FROM grants, g14
            WHERE grant_id = refunded), '1/4/0',
  '... and the unit it released is voided, not returned nor expired');
SELECT is(pg_temp.balance(14), 4, 'balance: the kept grant');
SELECT is((chargeonce_void_grant(14, 999999)).outcome, 'not_found',
  'void of a grant the chat does not have is not_found');
SELECT is((SELECT (chargeonce_void_grant(13, kept)).outcome FROM g14),
  'not_found', 'void of another chat''s grant is not_found');
SELECT is((chargeonce_void_grant(14, NULL, 'no-such-payment')).outcome,
  'not_found', 'void of an unknown payment id is not_found');
SELECT is(pg_temp.violations(), NULL, 'conservation after void');

-- Top-up ----------------------------------------------------------------------

SELECT pg_temp.chat(15);
SELECT is((chargeonce_top_up(15, 5, 'p-rel', NULL, 3600000, 50,
                             'promo')).outcome, 'ok',
  'a top-up with an expiry in an hour, priority 50, promo');
SELECT is((chargeonce_top_up(15, 5, 'p-rel', NULL, 3600000, 50,
                             'promo')).grant_id,
  (SELECT grant_id FROM grants WHERE payment_id = 'p-rel'),
  'a retry with the same fields answers the first grant');
SELECT is((SELECT count(*) FROM grants WHERE chat_id = 15)
          || '/' || pg_temp.balance(15)
          || '/' || (SELECT count(*) FROM ledger WHERE chat_id = 15),
  '1/5/1', '... and changes nothing');
SELECT is((chargeonce_top_up(15, 5, 'p-rel', now() + interval '1 hour', NULL,
                             50, 'promo')).outcome, 'invalid_argument',
  'a retry giving the instant the first expires_in resolved to differs: '
  'fields are compared as given');
SELECT is((chargeonce_top_up(15, 5, 'p-rel', NULL, 7200000, 50,
                             'promo')).outcome, 'invalid_argument',
  'a retry with another expires_in is invalid_argument');
SELECT is((chargeonce_top_up(15, 5, 'p-rel', NULL, 3600000, 60,
                             'promo')).outcome, 'invalid_argument',
  'a retry with another priority is invalid_argument');
SELECT is((chargeonce_top_up(15, 5, 'p-rel', NULL, 3600000, 50)).outcome,
  'invalid_argument', 'a retry with another source is invalid_argument');
SELECT is((chargeonce_top_up(15, 6, 'p-rel', NULL, 3600000, 50,
                             'promo')).message,
  'payment_id p-rel was already used for 5 credits of chat 15',
  'a retry with other credits: 0.2''s refusal');
SELECT is((chargeonce_top_up(15, 5, 'p-abs', now() + interval '1 day')).outcome,
  'ok', 'a top-up with an absolute expiry');
SELECT is((chargeonce_top_up(15, 5, 'p-abs', now() + interval '1 day')).grant_id,
  (SELECT grant_id FROM grants WHERE payment_id = 'p-abs'),
  '... retried with the same instant answers it');
SELECT is((chargeonce_top_up(15, 5, 'p-past', now())).outcome,
  'invalid_argument', 'an expires_at that is not in the future is refused');
SELECT is((chargeonce_top_up(15, 5, 'p-both', now() + interval '1 day',
                             1000)).outcome,
  'invalid_argument', 'expires_at and expires_in together are refused');
SELECT is((chargeonce_top_up(15, 5, 'p-prio', NULL, NULL, 1001)).outcome,
  'invalid_argument', 'a priority above 1000 is refused');
SELECT is((chargeonce_top_up(15, 5, 'p-src', NULL, NULL, NULL,
                             'gift')).outcome,
  'invalid_argument', 'an unknown source is refused');
SELECT is((chargeonce_top_up(15, 0, 'p-zero')).outcome, 'invalid_argument',
  'credits of 0 are refused');
SELECT is((SELECT count(*) FROM grants WHERE chat_id = 15), 2::bigint,
  '... and no refusal made a grant');

-- Without the new fields, a top-up is 0.2's.
SELECT pg_temp.chat(16);
CREATE TEMP TABLE t16 AS SELECT * FROM chargeonce_top_up(16, 7, 'p-plain');
SELECT is((SELECT ROW(outcome, chat_id, credits, payment_id) FROM t16),
  ROW('ok'::text, 16::bigint, 7, 'p-plain'::text),
  'a top-up without the new fields answers chat, credits and payment id');
SELECT is((SELECT committed_us FROM t16),
  (SELECT chargeonce_us(committed_at) FROM ledger WHERE payment_id = 'p-plain'),
  '... at its ledger row''s time');
SELECT is((SELECT ROW(source, priority, expires_at, expires_in_ms)
             FROM grants WHERE payment_id = 'p-plain'),
  ROW('purchase'::text, 100, NULL::timestamptz, NULL::bigint),
  '... a purchase of priority 100 that never expires');
SELECT is((SELECT ROW(entry, credited_balance, pockets, grant_credits)
             FROM ledger WHERE payment_id = 'p-plain'),
  ROW('top_up'::text, 7, '{0,0,7}'::integer[], '{7}'::integer[]),
  '... with 0.2''s ledger row, naming its grant');
SELECT is((chargeonce_top_up(17, 7, 'p-nochat')).message, 'unknown chat 17',
  'a top-up of an unknown chat: 0.2''s not_found');
UPDATE chats SET pockets = '{0,0,2147483640}' WHERE chat_id = 16;
UPDATE grants SET credits = 2147483640 WHERE payment_id = 'p-plain';
SELECT is((chargeonce_top_up(16, 8, 'p-over')).message,
  'balance of chat 16 would overflow', '0.2''s refusal of an overflow');
-- A top-up of 0.2 has a ledger row and no grant: a retried webhook still
-- changes nothing.
INSERT INTO ledger (entry, chat_id, payment_id, credited_balance, pockets)
  VALUES ('top_up', 16, 'p-before-grants', 3, '{0,0,3}');
SELECT is((SELECT ROW(outcome, grant_id, credits)
             FROM chargeonce_top_up(16, 3, 'p-before-grants')),
  ROW('ok'::text, NULL::bigint, 3),
  'a retried top-up of before the grants answers its ledger row');
SELECT is((SELECT count(*) FROM grants WHERE chat_id = 16), 1::bigint,
  '... and makes no grant');
SELECT is(pg_temp.violations(), NULL, 'conservation after top-ups');

-- The sweep's release, and create_chat's balance ---------------------------------

-- Chat 19 is made as create_chat --balance=6 makes it: pockets first, then
-- the admin grant of what no grant has.
INSERT INTO chats (chat_id, pockets, started) VALUES (19, '{0,0,6}', true);
CREATE TEMP TABLE g19 AS SELECT chargeonce_grant_balance(19) AS admin;
SELECT is((SELECT source || ' ' || credits || ' ' || (expires_at IS NULL)
             FROM grants, g19 WHERE grant_id = admin),
  'admin 6 true', 'a chat''s balance without grants becomes one admin grant');
SELECT is(chargeonce_grant_balance(19), NULL,
  '... once: then every credit has its grant');
SELECT pg_temp.top(19, 4, 'w-soon', 10, NULL, 3600000);
SELECT is((pg_temp.reserve(19, 3, 'w-1')).outcome, 'ok', 'a hold of three');
SELECT is((pg_temp.reserve(19, 2, 'w-2')).outcome, 'ok', 'a hold of two');
SELECT chargeonce_start(19, pg_temp.id_of(19, 'w-1'));
SELECT chargeonce_heartbeat(19, pg_temp.id_of(19, 'w-1'), -1000);
SELECT pg_temp.expire_now(grant_id) FROM grants WHERE payment_id = 'w-soon';
SELECT is(chargeonce_release_swept(19, pg_temp.id_of(19, 'w-1'), 3600000),
  'lease_expired', 'the sweep releases a job past its lease');
SELECT is((SELECT expired FROM grants WHERE payment_id = 'w-soon'), 3,
  '... what it held of the expired grant expires (the other job holds 1)');
SELECT is(chargeonce_release_swept(19, pg_temp.id_of(19, 'w-2'), 3600000),
  NULL, 'a job within its deadlines stays');
SELECT is(pg_temp.balance(19), 7,
  'balance: the admin grant and the 1 still held of the expired one');
SELECT is(pg_temp.violations(), NULL, 'conservation after the sweep');

-- A chat whose grants have no ledger row yet keeps its grants as it keeps
-- its ledger: neither deleted nor renumbered under them.
INSERT INTO chats (chat_id, pockets) VALUES (24, '{0,0,3}');
SELECT chargeonce_grant_balance(24);
SELECT throws_ok('DELETE FROM chats WHERE chat_id = 24', '23503', NULL,
  'a chat with grants is not deleted');
SELECT throws_ok('UPDATE chats SET chat_id = 25 WHERE chat_id = 24', '23503',
  NULL, 'a chat with grants is not renumbered');
SELECT throws_ok('INSERT INTO grants (chat_id, credits) VALUES (26, 1)',
  '23503', NULL, 'a grant of a chat that does not exist is refused');

-- The supervisor's scan and the expiring notice --------------------------------

SELECT pg_temp.chat(18);
CREATE TEMP TABLE g18 AS SELECT
  pg_temp.top(18, 4, 'x-a', NULL, NULL, 3600000) AS a,
  pg_temp.top(18, 4, 'x-b', NULL, NULL, 90000000) AS b;
SELECT is(chargeonce_notice_expiring(86400000, 100) >= 1, true,
  'the notice marks grants that expire within the notice');
SELECT is((SELECT count(*) FROM events
            WHERE chat_id = 18 AND event = 'credits_expiring'), 1::bigint,
  '... one credits_expiring event, for the grant inside the notice');
SELECT chargeonce_notice_expiring(86400000, 100);
SELECT is((SELECT count(*) FROM events
            WHERE chat_id = 18 AND event = 'credits_expiring'), 1::bigint,
  '... once per grant');
UPDATE grants SET expires_at = now() WHERE grant_id = (SELECT a FROM g18);
SELECT is(chargeonce_expire_due(100) >= 1, true,
  'the scan expires due grants without waiting for a write');
SELECT is(pg_temp.balance(18), 4, '... their credits left the balance');
SELECT is(chargeonce_expire_due(100), 0, 'a second scan finds nothing');
SELECT is(pg_temp.violations(), NULL, 'conservation after the scan');

-- The batch: set-based and one by one give the same holds and charges ---------

-- Chats 20, 21 and 22 alike: a promo grant of one credit, a purchase of
-- five. 20 and 21 go through the batch's set-based statements (different
-- chats, one unit, the first way to pay), 22 through apply_one.
SELECT pg_temp.chat(c), pg_temp.top(c, 1, 'b-promo-' || c, NULL, 'promo'),
       pg_temp.top(c, 5, 'b-buy-' || c)
  FROM generate_series(20, 22) c;
CREATE FUNCTION pg_temp.batch(ops text[], chats bigint[], ids bigint[],
                              units integer[])
  RETURNS SETOF chargeonce_outcome LANGUAGE sql AS $$
  SELECT * FROM chargeonce_apply_batch(ops, chats, ids,
    array_fill('credit'::text, ARRAY[cardinality(ops)]),
    array_fill(''::text, ARRAY[cardinality(ops)]), units,
    array_fill(3, ARRAY[cardinality(ops)]),
    array_fill(1, ARRAY[cardinality(ops)]),
    array_fill(0, ARRAY[cardinality(ops)]),
    array_fill(0, ARRAY[cardinality(ops)]), 60000, 1, 1,
    (SELECT products FROM catalog))
$$;
-- A chat's holds and grants as positions of its grants (1: promo, 2:
-- purchase), comparable between chats.
CREATE FUNCTION pg_temp.shape(p_chat bigint) RETURNS text LANGUAGE sql AS $$
  SELECT coalesce((SELECT string_agg(
             (SELECT count(*) FROM grants g
               WHERE g.chat_id = p_chat AND g.grant_id <= h.grant_id)
             || ':' || h.credits, ',')
           FROM reservations r,
                unnest(r.held_grants, r.held_grant_credits) h(grant_id, credits)
          WHERE r.chat_id = p_chat), '-')
         || ' | ' || (SELECT string_agg(charged || '/' || expired, ','
                                        ORDER BY grant_id)
                        FROM grants WHERE chat_id = p_chat)
         || ' | ' || coalesce((SELECT string_agg(array_to_string(grant_credits,
                                                 '+'), ',' ORDER BY id)
                                 FROM ledger WHERE chat_id = p_chat
                                  AND entry = 'charge'), '-')
$$;
SELECT is((SELECT count(*) FROM pg_temp.batch('{reserve,reserve}', '{20,21}',
                                              '{0,0}', '{1,1}')
            WHERE outcome = 'ok'), 2::bigint, 'a batch reserves for 20 and 21');
SELECT is((chargeonce_apply_one('reserve', 22, 0, 'credit', '', 1, 60000, 1,
                                1, (SELECT products FROM catalog))).outcome,
  'ok', 'apply_one reserves for 22');
SELECT is(pg_temp.shape(20), pg_temp.shape(22),
  'the set-based reserve holds the grants apply_one holds');
SELECT is(pg_temp.shape(20), '1:1 | 0/0,0/0 | -',
  '... the promo grant first');
SELECT pg_temp.batch('{start,start}', '{20,21}',
                     ARRAY[pg_temp.id_of(20, ''), pg_temp.id_of(21, '')],
                     '{0,0}');
SELECT chargeonce_start(22, pg_temp.id_of(22, ''));
SELECT is((SELECT count(*) FROM pg_temp.batch('{commit,commit}', '{20,21}',
             ARRAY[pg_temp.id_of(20, ''), pg_temp.id_of(21, '')], '{0,0}')
            WHERE outcome = 'ok'), 2::bigint, 'a batch commits 20 and 21');
SELECT is((chargeonce_apply_one('commit', 22, pg_temp.id_of(22, ''), 'credit',
                                '', 0, 60000, 1, 1,
                                (SELECT products FROM catalog))).outcome,
  'ok', 'apply_one commits 22');
SELECT is(pg_temp.shape(20), pg_temp.shape(22),
  'the set-based commit charges the grants apply_one charges');
SELECT is(pg_temp.shape(21), '- | 1/0,0/0 | 1',
  '... the promo grant, named in the charge row');
-- Chat 21's purchase expires; in a batch its reserve goes one by one,
-- which expires it first.
SELECT pg_temp.expire_now(grant_id) FROM grants
 WHERE chat_id = 21 AND payment_id = 'b-buy-21';
SELECT is((SELECT outcome FROM pg_temp.batch('{reserve,reserve}', '{20,21}',
                                             '{0,0}', '{1,1}')
            WHERE idx = 1), 'insufficient_funds',
  'a batch''s reserve of a chat with a due expiry expires it first');
SELECT is((SELECT count(*) FROM ledger WHERE chat_id = 21 AND entry = 'expire'),
  1::bigint, '... with its expire row');
SELECT is(pg_temp.violations(), NULL, 'conservation after the batch');
-- Chat 31's promo expires while a started job holds one credit of it and
-- another credit of it is free: in a batch, the job's commit goes one by
-- one, which expires the free credit first, then charges the held one.
SELECT pg_temp.chat(c) FROM generate_series(31, 32) c;
SELECT pg_temp.top(31, 2, 'late-promo-31', NULL, 'promo', 3600000),
       pg_temp.top(31, 5, 'late-buy-31'), pg_temp.top(32, 5, 'late-buy-32');
SELECT is((pg_temp.reserve(31, 1, 'b-late')).outcome, 'ok',
  'chat 31 holds a credit of its promo');
SELECT is((chargeonce_start(31, pg_temp.id_of(31, 'b-late'))).outcome, 'ok',
  '... and starts the job');
SELECT pg_temp.expire_now(grant_id) FROM grants
 WHERE chat_id = 31 AND source = 'promo';
SELECT is((SELECT outcome FROM pg_temp.batch('{commit,reserve}', '{31,32}',
             ARRAY[pg_temp.id_of(31, 'b-late'), 0], '{0,1}')
            WHERE idx = 0), 'ok',
  'a batch commits a job of a chat with a due expiry');
SELECT ok((SELECT max(id) FROM ledger WHERE chat_id = 31 AND entry = 'expire')
          < (SELECT id FROM ledger WHERE chat_id = 31
              AND reservation_id = pg_temp.id_of(31, 'b-late')),
  '... after expiring what nobody held, as apply_one does');
SELECT is(pg_temp.violations(), NULL, 'conservation after the batch commit');

-- The sole grant -------------------------------------------------------------

SELECT pg_temp.chat(30);
SELECT is((SELECT sole_grant FROM chats WHERE chat_id = 30), NULL::bigint,
  'a chat without grants has no sole grant');
CREATE TEMP TABLE g30 AS SELECT pg_temp.top(30, 5, 'z-first') AS first;
SELECT is((SELECT sole_grant FROM chats WHERE chat_id = 30),
  (SELECT first FROM g30), 'its first top-up is its sole grant');
SELECT is(chargeonce_hold_grants(30, 3, (SELECT first FROM g30)),
  chargeonce_hold_grants(30, 3),
  'the sole grant''s hold is the split over all grants');
ALTER TABLE g30 ADD COLUMN second bigint;
UPDATE g30 SET second = pg_temp.top(30, 5, 'z-second', NULL, 'promo');
SELECT is((SELECT sole_grant FROM chats WHERE chat_id = 30), NULL::bigint,
  'a second grant with credits: none is sole');
SELECT is((chargeonce_void_grant(30, (SELECT second FROM g30))).outcome, 'ok',
  'the promo is voided');
SELECT is((SELECT sole_grant FROM chats WHERE chat_id = 30),
  (SELECT first FROM g30), 'the grant left alive is sole again');
SELECT pg_temp.expire_now(first) FROM g30;
ALTER TABLE g30 ADD COLUMN third bigint;
UPDATE g30 SET third = pg_temp.top(30, 2, 'z-third');
SELECT is((SELECT sole_grant FROM chats WHERE chat_id = 30),
  (SELECT third FROM g30),
  'a top-up expires the due grant first: the new one is sole');
SELECT is((pg_temp.reserve(30, 2, 'z-1')).outcome, 'ok',
  'a reserve of the sole grant''s two credits');
SELECT is(pg_temp.hold_of(30, 'z-1'),
  (SELECT ROW(ARRAY[third], ARRAY[2])::chargeonce_grant_hold FROM g30),
  '... holds them of it');
SELECT is(pg_temp.violations(), NULL, 'conservation after the sole grant');
-- The fast path trusts the column: a forged one is what violations() and
-- the chaos auditor report.
UPDATE chats SET sole_grant = (SELECT second FROM g30) WHERE chat_id = 30;
SELECT isnt(pg_temp.violations(), NULL,
  'a sole grant that is not the one live grant is a violation');
UPDATE chats SET sole_grant = chargeonce_sole_grant(30) WHERE chat_id = 30;

SELECT * FROM finish();
ROLLBACK;
