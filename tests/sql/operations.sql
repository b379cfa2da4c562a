-- SPDX-License-Identifier: Apache-2.0
-- The operations' contracts (persistence/functions/04_reserve.sql to
-- 07_cancel_fail.sql): the choice of pocket (what expires first is spent
-- first), the refusals by name, commit of exactly what was held clamped at
-- zero, and replays that answer the first answer without doing it again.
BEGIN;
SELECT plan(32);

-- A kind paid by daily_images (ordinal 2), else balance (3), one each.
CREATE TEMP TABLE catalog AS SELECT
  '{"image": {"pay": [[2, 1], [3, 1]], "free": false,
              "q": "image_generation", "pq": "image_generation_priority",
              "refusal": "insufficient_images", "why": ""}}'::jsonb AS products;
CREATE FUNCTION pg_temp.reserve(request_id text, job_limit integer)
  RETURNS chargeonce_outcome LANGUAGE sql AS $$
  SELECT * FROM chargeonce_reserve(1, 'image', request_id, 1, job_limit,
                                   job_limit, (SELECT products FROM catalog))
$$;
CREATE FUNCTION pg_temp.id_of(request_id text) RETURNS bigint
  LANGUAGE sql AS $$
  SELECT id FROM reservations WHERE chat_id = 1 AND request_id = $1
  UNION ALL SELECT id FROM ended_reservations
   WHERE chat_id = 1 AND request_id = $1
$$;

-- Balance comes from grants (migrations/004_grants.sql): a top-up each.
INSERT INTO chats (chat_id, pockets, started) VALUES (1, '{0,1}', true);
SELECT chargeonce_top_up(1, 2, 'pay-1');

SELECT is((pg_temp.reserve('job-1', 1)).r_held, '{NULL,1}'::integer[],
  'the first reserve holds the daily pocket, which expires first');
SELECT is((pg_temp.reserve('job-1', 1)).r_id, pg_temp.id_of('job-1'),
  'a retried reserve (same request id) answers the same reservation');
SELECT is((SELECT count(*) FROM reservations), 1::bigint,
  '... and holds nothing more');
SELECT is((pg_temp.reserve('job-2', 1)).outcome, 'busy',
  'a second job beyond the job limit is busy');
SELECT is((pg_temp.reserve('job-2', 3)).r_held, '{NULL,NULL,1}'::integer[],
  'with the daily pocket held, the next reserve holds balance');
SELECT is((pg_temp.reserve('job-3', 3)).r_held, '{NULL,NULL,1}'::integer[],
  'and the next');
SELECT is((pg_temp.reserve('job-4', 4)).outcome, 'insufficient_images',
  'what is held is not available: the kind''s refusal');
SELECT is((chargeonce_reserve(1, 'video', 'job-5', 1, 4, 4,
            (SELECT products FROM catalog))).outcome, 'invalid_argument',
  'an unknown kind is invalid_argument');
SELECT is((chargeonce_reserve(2, 'image', 'job-5', 1, 4, 4,
            (SELECT products FROM catalog))).outcome, 'not_found',
  'an unknown chat is not_found');

SELECT is((chargeonce_commit(1, pg_temp.id_of('job-1'), 0)).outcome,
  'invalid_state', 'a job that was never started cannot be committed');
SELECT is((chargeonce_start(1, pg_temp.id_of('job-1'))).r_status,
  'in_progress', 'start moves the job on');
SELECT is((chargeonce_start(1, pg_temp.id_of('job-1'))).outcome, 'ok',
  'a retried start answers ok');

-- The pocket was emptied meanwhile (a support correction): the commit
-- charges what is there, never below zero, and still releases the hold.
UPDATE chats SET pockets = '{0,0,2}' WHERE chat_id = 1;
SELECT is((chargeonce_commit(1, pg_temp.id_of('job-1'), 0)).c_charged,
  '{NULL,0}'::integer[], 'commit charges what was held, clamped at zero');
SELECT is((SELECT pockets FROM chats WHERE chat_id = 1), '{0,0,2}'::integer[],
  '... and no pocket goes below zero');
SELECT is((chargeonce_commit(1, pg_temp.id_of('job-1'), 0)).c_charged,
  '{NULL,0}'::integer[], 'a retried commit answers the first receipt');
SELECT is((SELECT count(*) FROM ledger WHERE entry = 'charge'), 1::bigint,
  '... and charges once');
SELECT is((pg_temp.reserve('job-1', 3)).r_status, 'committed',
  'a reserve retried after the commit answers the committed job');

SELECT is((chargeonce_start(1, pg_temp.id_of('job-2'))).outcome, 'ok',
  'a balance job starts');
SELECT is((chargeonce_commit(1, pg_temp.id_of('job-2'), 0)).c_charged,
  '{NULL,NULL,1}'::integer[], 'and commits exactly its hold');
SELECT is((chargeonce_fail(1, pg_temp.id_of('job-3'))).outcome, 'ok',
  'fail lets the hold disappear');
SELECT is((SELECT pockets FROM chats WHERE chat_id = 1), '{0,0,1}'::integer[],
  'two balance holds, one committed and one failed: one credit paid');

-- A job that straddles a refill is paid by the window it was reserved in:
-- the new window's daily unit stays, the ledger names the old window.
UPDATE chats SET pockets = '{0,1,1}' WHERE chat_id = 1;
SELECT is((pg_temp.reserve('job-6', 3)).r_held, '{NULL,1}'::integer[],
  'a daily hold in window 0');
SELECT is((chargeonce_start(1, pg_temp.id_of('job-6'))).outcome, 'ok',
  'started');
UPDATE chats SET window_number = window_number + 1, pockets = '{0,1,1}'
 WHERE chat_id = 1;
SELECT is((chargeonce_commit(1, pg_temp.id_of('job-6'), 0)).window_number,
  0::bigint, 'committed after the refill: paid by window 0');
SELECT is((SELECT pockets FROM chats WHERE chat_id = 1), '{0,1,1}'::integer[],
  '... and the new window''s daily unit is not taken');

-- The decision for other kinds: a price above one unit, units split over
-- the pockets in order, and a kind premium chats get free.
CREATE TEMP TABLE more_kinds AS SELECT
  '{"voice": {"pay": [[2, 1], [3, 3]], "free": false,
              "q": "voice_q", "pq": "voice_q_fast",
              "refusal": "insufficient_funds", "why": " (daily_images: 1, balance: 3 each)"},
    "memo": {"pay": [[2, 1]], "free": true,
             "q": "memo_q", "pq": "memo_q_fast",
             "refusal": "insufficient_funds", "why": " (daily_images: 1 each)"}}'::jsonb
  AS products;
CREATE FUNCTION pg_temp.reserve_of(chat bigint, k text, request_id text,
                                   units integer)
  RETURNS chargeonce_outcome LANGUAGE sql AS $$
  SELECT * FROM chargeonce_reserve(chat, k, request_id, units, 4, 4,
                                   (SELECT products FROM more_kinds))
$$;
INSERT INTO chats (chat_id, pockets, started) VALUES (3, '{0,1}', true);
SELECT chargeonce_top_up(3, 9, 'pay-3');
INSERT INTO chats (chat_id, pockets, started, premium_until)
  VALUES (4, '{0,0}', true, now() + interval '1 hour');
SELECT chargeonce_top_up(4, 2, 'pay-4');
SELECT is((pg_temp.reserve_of(3, 'voice', 'v-1', 1)).r_held,
  '{NULL,1}'::integer[], 'voice: the daily pocket at its price of 1 first');
SELECT is((pg_temp.reserve_of(3, 'voice', 'v-2', 1)).r_held,
  '{NULL,NULL,3}'::integer[], 'then balance at its own price, 3, not 1');
SELECT is((pg_temp.reserve_of(3, 'voice', 'v-3', 2)).r_held,
  '{NULL,NULL,6}'::integer[], 'two units on balance: 6 of the 6 left');
SELECT is((pg_temp.reserve_of(3, 'voice', 'v-4', 1)).outcome,
  'insufficient_funds', 'nothing left at the price: the kind''s refusal');
SELECT is((pg_temp.reserve_of(4, 'voice', 'v-5', 1)).outcome,
  'insufficient_funds', 'premium pays a kind that is not free: 2 < 3');
SELECT is((pg_temp.reserve_of(4, 'memo', 'm-1', 1)).r_held,
  '{}'::integer[], 'a premium chat holds nothing for a premium-free kind');
SELECT is((pg_temp.reserve_of(4, 'memo', 'm-1', 1)).r_queue, 'memo_q_fast',
  '... and goes to its priority queue');

SELECT * FROM finish();
ROLLBACK;
