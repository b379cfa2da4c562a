-- SPDX-License-Identifier: Apache-2.0
-- The events of grants and of a low balance (functions/12_grants.sql,
-- 10_events.sql, 04_reserve.sql, 09_batch.sql): credits_expired and
-- credits_expiring once per grant with their structured columns, the
-- notice at once from a top-up inside expiry-notice, and balance_low once
-- per crossing, the same through chargeonce_reserve and the set-based batch,
-- on expiry and on void.
--
-- now() is the transaction's start here, so time passes by moving a
-- grant's expires_at to now() (pg_temp.expire_now).
BEGIN;
SELECT plan(49);

CREATE TEMP TABLE catalog AS SELECT
  '{"credit": {"pay": [[3, 1]], "free": false, "q": "q", "pq": "pq",
               "refusal": "insufficient_funds", "why": ""},
    "image": {"pay": [[2, 1], [3, 2]], "free": false, "q": "q", "pq": "pq",
              "refusal": "insufficient_images", "why": ""}}'::jsonb
  AS products;

CREATE FUNCTION pg_temp.chat(p_chat bigint, p_daily integer DEFAULT 0)
  RETURNS void LANGUAGE sql AS $$
  INSERT INTO chats (chat_id, pockets, started)
  VALUES (p_chat, ARRAY[0, p_daily], true)
$$;
CREATE FUNCTION pg_temp.top(p_chat bigint, p_credits integer, p_pay text,
                            p_expires_in_ms bigint DEFAULT NULL,
                            p_notice_ms bigint DEFAULT NULL)
  RETURNS bigint LANGUAGE sql AS $$
  SELECT (chargeonce_top_up(p_chat, p_credits, p_pay, NULL, p_expires_in_ms,
                            NULL, NULL, p_notice_ms)).grant_id
$$;
CREATE FUNCTION pg_temp.reserve(p_chat bigint, p_units integer,
                                p_request text, p_kind text DEFAULT 'credit')
  RETURNS text LANGUAGE sql AS $$
  SELECT outcome FROM chargeonce_reserve(p_chat, p_kind, p_request, p_units,
                                         8, 8, (SELECT products FROM catalog))
$$;
CREATE FUNCTION pg_temp.id_of(p_chat bigint, p_request text) RETURNS bigint
  LANGUAGE sql AS $$
  SELECT id FROM reservations WHERE chat_id = p_chat AND request_id = p_request
$$;
CREATE FUNCTION pg_temp.expire_now(p_grant bigint) RETURNS void
  LANGUAGE sql AS $$
  UPDATE grants SET expires_at = now() WHERE grant_id = p_grant;
  UPDATE chats SET next_expiry = now()
   WHERE chat_id = (SELECT chat_id FROM grants WHERE grant_id = p_grant);
$$;
CREATE FUNCTION pg_temp.count(p_chat bigint, p_event text) RETURNS bigint
  LANGUAGE sql AS $$
  SELECT count(*) FROM events WHERE chat_id = p_chat AND event = p_event
$$;
-- A chat's balance_low events as "available<threshold:cause", in order.
CREATE FUNCTION pg_temp.lows(p_chat bigint) RETURNS text LANGUAGE sql AS $$
  SELECT coalesce(string_agg(credits || '<' || threshold || ':' || detail,
                             ' ' ORDER BY seq), '')
    FROM events WHERE chat_id = p_chat AND event = 'balance_low'
$$;
-- A batch of reserves of one unit of `credit` (balance, 1 credit), each
-- of another chat: the set-based path.
CREATE FUNCTION pg_temp.batch_reserve(chats bigint[], requests text[])
  RETURNS SETOF text LANGUAGE sql AS $$
  SELECT outcome FROM chargeonce_apply_batch(
    array_fill('reserve'::text, ARRAY[cardinality(chats)]), chats,
    array_fill(0::bigint, ARRAY[cardinality(chats)]),
    array_fill('credit'::text, ARRAY[cardinality(chats)]), requests,
    array_fill(1, ARRAY[cardinality(chats)]),
    array_fill(3, ARRAY[cardinality(chats)]),
    array_fill(1, ARRAY[cardinality(chats)]),
    array_fill(0, ARRAY[cardinality(chats)]),
    array_fill(0, ARRAY[cardinality(chats)]), 60000, 8, 8,
    (SELECT products FROM catalog))
$$;

-- credits_expiring ----------------------------------------------------------

SELECT pg_temp.chat(1);
-- A grant that expires in an hour, with a notice window of a day: its
-- top-up writes the notice, in its own transaction.
SELECT pg_temp.top(1, 7, 'e-soon', 3600000, 86400000) AS soon \gset
SELECT is(pg_temp.count(1, 'credits_expiring'), 1::bigint,
  'a top-up inside expiry-notice writes credits_expiring at once');
SELECT is((SELECT row(grant_id, credits, expires_at)::text FROM events
            WHERE chat_id = 1 AND event = 'credits_expiring'),
          (SELECT row(grant_id, credits, expires_at)::text FROM grants
            WHERE grant_id = :soon),
  '... naming the grant, its credits and its expires_at in columns');
SELECT isnt((SELECT expiring_noticed_at FROM grants WHERE grant_id = :soon),
  NULL, '... and marks the grant noticed');
SELECT chargeonce_notice_expiring(86400000, 100);
SELECT is(pg_temp.count(1, 'credits_expiring'), 1::bigint,
  '... so that the scan writes no second one');
-- A grant that expires in two days: no notice from its top-up.
SELECT pg_temp.top(1, 3, 'e-later', 2 * 86400000, 86400000) AS later \gset
SELECT is(pg_temp.count(1, 'credits_expiring'), 1::bigint,
  'a top-up beyond expiry-notice writes none');
-- Without the notice window the top-up leaves it to the scan.
SELECT pg_temp.top(1, 2, 'e-no-window', 3600000) AS unwindowed \gset
SELECT is(pg_temp.count(1, 'credits_expiring'), 1::bigint,
  'a top-up given no notice window writes none');
SELECT chargeonce_notice_expiring(86400000, 100);
SELECT is((SELECT grant_id FROM events
            WHERE chat_id = 1 AND event = 'credits_expiring'
            ORDER BY seq DESC LIMIT 1), :unwindowed::bigint,
  '... the scan does, for the grant inside the window');
SELECT chargeonce_notice_expiring(3 * 86400000, 100);
SELECT chargeonce_notice_expiring(3 * 86400000, 100);
SELECT is((SELECT array_agg(grant_id ORDER BY grant_id) FROM events
            WHERE chat_id = 1 AND event = 'credits_expiring'),
          ARRAY[:soon, :later, :unwindowed]::bigint[],
  'credits_expiring once per grant, however many scans');
SELECT is((SELECT credits FROM events
            WHERE event = 'credits_expiring' AND grant_id = :later), 3,
  '... the scan''s event carries the grant''s credits left');

-- credits_expired -----------------------------------------------------------

-- A job holds 2 of the grant's 7 when it expires: 5 leave now.
SELECT is(pg_temp.reserve(1, 2, 'x-held'), 'ok', 'a job holds 2 credits');
SELECT pg_temp.expire_now(:soon);
SELECT chargeonce_expire_due(100);
SELECT is((SELECT row(grant_id, credits)::text FROM events
            WHERE chat_id = 1 AND event = 'credits_expired'),
          row(:soon::bigint, 5)::text,
  'credits_expired names the grant and the unheld credits that left');
SELECT chargeonce_expire_due(100);
SELECT chargeonce_expire_grants(1);
SELECT is(pg_temp.count(1, 'credits_expired'), 1::bigint,
  'credits_expired once per grant, however many expiries run');
SELECT is((SELECT expires_at FROM events
            WHERE chat_id = 1 AND event = 'credits_expired'), NULL,
  '... expires_at only for credits_expiring');

-- balance_low on reserve (chargeonce_reserve: what apply_one runs) --------

-- Chat 2: its own threshold 5; 8 credits, one credit a job.
SELECT pg_temp.chat(2);
UPDATE chats SET balance_low_threshold = 5 WHERE chat_id = 2;
SELECT pg_temp.top(2, 8, 'l-2');
SELECT 'r:' || pg_temp.reserve(2, 1, 'r1'), 'r:' || pg_temp.reserve(2, 1, 'r2'),
       'r:' || pg_temp.reserve(2, 1, 'r3');
SELECT is(pg_temp.lows(2), '',
  'no balance_low while the available balance stays at or above it (5)');
SELECT is(pg_temp.reserve(2, 1, 'r4'), 'ok', 'a fourth job holds');
SELECT is(pg_temp.lows(2), '4<5:reserve',
  'balance_low when a hold takes it below: available after, threshold');
SELECT is((SELECT reservation_id FROM events
            WHERE chat_id = 2 AND event = 'balance_low'),
          pg_temp.id_of(2, 'r4'),
  '... naming the reserve that crossed it');
SELECT 'r:' || pg_temp.reserve(2, 1, 'r5'), 'r:' || pg_temp.reserve(2, 2, 'r6');
SELECT is(pg_temp.lows(2), '4<5:reserve',
  'once per crossing: no second one while it stays below');
-- Failing three jobs brings it back to 5; the next hold crosses again.
SELECT chargeonce_fail(2, pg_temp.id_of(2, r))
  FROM unnest(ARRAY['r4', 'r5', 'r6']) r;
SELECT is(pg_temp.lows(2), '4<5:reserve',
  'a hold released raises it without an event');
SELECT 'r:' || pg_temp.reserve(2, 1, 'r7');
SELECT is(pg_temp.lows(2), '4<5:reserve 4<5:reserve',
  'back at the threshold, the next fall fires again');
-- A top-up re-arms it too.
SELECT pg_temp.top(2, 10, 'l-2b');
SELECT 'r:' || pg_temp.reserve(2, 10, 'r8');
SELECT is(pg_temp.lows(2), '4<5:reserve 4<5:reserve 4<5:reserve',
  'after a top-up, a fall below fires again');

-- Chat 3: the daily pocket pays first: holds on it never fire.
SELECT pg_temp.chat(3, 5);
UPDATE chats SET balance_low_threshold = 100 WHERE chat_id = 3;
SELECT pg_temp.top(3, 100, 'l-3');
SELECT is(pg_temp.reserve(3, 1, 'd1', 'image'), 'ok',
  'an image job holds the daily pocket');
SELECT is(pg_temp.lows(3), '', 'a hold on another pocket is no fall');

-- The server's threshold (the connection's setting) where a chat has none;
-- 0 a chat's own "off".
SELECT pg_temp.chat(4);
SELECT pg_temp.top(4, 3, 'l-4');
SELECT 'r:' || pg_temp.reserve(4, 1, 's1');
SELECT is(pg_temp.lows(4), '', 'without a threshold anywhere: never');
SET LOCAL chargeonce.balance_low_threshold = 2;
SELECT 'r:' || pg_temp.reserve(4, 1, 's2');
SELECT is(pg_temp.lows(4), '1<2:reserve',
  'the server''s threshold applies to a chat without its own');
SELECT pg_temp.chat(5);
UPDATE chats SET balance_low_threshold = 0 WHERE chat_id = 5;
SELECT pg_temp.top(5, 3, 'l-5');
SELECT 'r:' || pg_temp.reserve(5, 3, 'o1');
SELECT is(pg_temp.lows(5), '', 'a chat''s own 0 is off, whatever the server''s');
SET LOCAL chargeonce.balance_low_threshold = 0;

-- balance_low in the set-based batch, against chargeonce_reserve ---------

-- Chats 10 and 11 through the batch (one reserve each, distinct chats: the
-- set-based statement), 12 through chargeonce_reserve: the same steps.
SELECT pg_temp.chat(c), pg_temp.top(c, 3, 'b-' || c)
  FROM generate_series(10, 12) c;
UPDATE chats SET balance_low_threshold = 2 WHERE chat_id IN (10, 11, 12);
SELECT is(array_agg(o), '{ok,ok}', 'the batch reserves for 10 and 11')
  FROM pg_temp.batch_reserve('{10,11}', '{a1,a1}') o;
SELECT 'r:' || pg_temp.reserve(12, 1, 'a1');
SELECT is(pg_temp.lows(10) || '|' || pg_temp.lows(11), '|',
  'batch: 3 to 2 is no fall below 2');
SELECT is(array_agg(o), '{ok,ok}', 'the batch reserves again')
  FROM pg_temp.batch_reserve('{10,11}', '{a2,a2}') o;
SELECT 'r:' || pg_temp.reserve(12, 1, 'a2');
SELECT is(pg_temp.lows(10) || '|' || pg_temp.lows(11), '1<2:reserve|1<2:reserve',
  'batch: 2 to 1 fires balance_low, once per chat');
SELECT is(pg_temp.lows(12), pg_temp.lows(10),
  '... as chargeonce_reserve does');
SELECT is((SELECT reservation_id FROM events
            WHERE chat_id = 10 AND event = 'balance_low'),
          pg_temp.id_of(10, 'a2'),
  '... naming the reservation the batch made');
SELECT is(array_agg(o), '{ok,ok}', 'the batch reserves the last credit')
  FROM pg_temp.batch_reserve('{10,11}', '{a3,a3}') o;
SELECT 'r:' || pg_temp.reserve(12, 1, 'a3');
SELECT is(pg_temp.lows(10) || '|' || pg_temp.lows(12), '1<2:reserve|1<2:reserve',
  'batch and chargeonce_reserve: no second one while below');
-- Re-armed by a top-up (0 to 2), through the batch again.
SELECT pg_temp.top(c, 2, 'b2-' || c) FROM generate_series(10, 12) c;
SELECT is(array_agg(o), '{ok,ok}', 'the batch holds 1 of 2')
  FROM pg_temp.batch_reserve('{10,11}', '{a4,a4}') o;
SELECT 'r:' || pg_temp.reserve(12, 1, 'a4');
SELECT is(pg_temp.lows(10), '1<2:reserve 1<2:reserve',
  'batch: after a top-up the next fall fires again');
SELECT is(pg_temp.lows(12), pg_temp.lows(10),
  '... as chargeonce_reserve does');

-- The server's threshold reaches the batch; with none anywhere, nothing.
SELECT pg_temp.chat(c), pg_temp.top(c, 2, 'n-' || c)
  FROM generate_series(13, 14) c;
SELECT is(array_agg(o), '{ok,ok}', 'a batch without thresholds reserves')
  FROM pg_temp.batch_reserve('{13,14}', '{n1,n1}') o;
SELECT is(pg_temp.lows(13) || pg_temp.lows(14), '',
  'no threshold anywhere: no balance_low from the batch');
SET LOCAL chargeonce.balance_low_threshold = 1;
SELECT is(array_agg(o), '{ok,ok}', 'the server''s threshold set, it reserves')
  FROM pg_temp.batch_reserve('{13,14}', '{n2,n2}') o;
SELECT is(pg_temp.lows(13) || '|' || pg_temp.lows(14),
  '0<1:reserve|0<1:reserve',
  'the server''s threshold reaches the set-based batch');
SET LOCAL chargeonce.balance_low_threshold = 0;

-- balance_low on expiry and on void ------------------------------------------

-- Chat 20: 6 credits in two grants of 3, threshold 4; one held.
SELECT pg_temp.chat(20);
UPDATE chats SET balance_low_threshold = 4 WHERE chat_id = 20;
SELECT pg_temp.top(20, 3, 'x-a', 86400000) AS xa \gset
SELECT pg_temp.top(20, 3, 'x-b') AS xb \gset
SELECT 'r:' || pg_temp.reserve(20, 1, 'h1');
SELECT pg_temp.expire_now(:xa);
SELECT chargeonce_expire_due(100);
SELECT is(pg_temp.lows(20), '3<4:expire',
  'an expiry that takes the available balance below fires balance_low');
SELECT pg_temp.top(20, 5, 'x-c') AS xc \gset
SELECT is((SELECT (chargeonce_void_grant(20, :xc)).outcome), 'ok',
  'a void takes 5 away');
SELECT is(pg_temp.lows(20), '3<4:expire 3<4:void',
  '... and fires again: the top-up had brought it back up');
SELECT is((SELECT (chargeonce_void_grant(20, :xb)).outcome), 'ok',
  'a second void, already below');
SELECT is(pg_temp.lows(20), '3<4:expire 3<4:void',
  '... fires nothing');

-- status and the threshold's range --------------------------------------------

SELECT is((chargeonce_status(2)).s_low_threshold, 5,
  'status answers the chat''s own threshold');
SELECT is((chargeonce_status(4)).s_low_threshold, NULL,
  '... NULL for none (the server''s)');
SELECT throws_ok('UPDATE chats SET balance_low_threshold = -1 WHERE chat_id = 2',
  '23514', NULL, 'a negative threshold is refused');

SELECT * FROM finish();
ROLLBACK;
