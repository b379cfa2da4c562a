-- SPDX-License-Identifier: Apache-2.0
-- The conversion of migrations/004_grants.sql: a 0.2 database (001 to 003,
-- built here in a schema of its own, with rows as 0.2 wrote them) gains
-- one grant per chat with a balance, and its open holds on balance become
-- holds on that grant.
BEGIN;
CREATE SCHEMA before_grants;
-- The migrations name their objects without a schema: they land in
-- before_grants; pgTAP's functions stay found in public.
SET LOCAL search_path = before_grants, public;
SET LOCAL client_min_messages = warning;
\ir ../../persistence/migrations/001_schema.sql
\ir ../../persistence/migrations/002_functions.sql
\ir ../../persistence/migrations/003_release_0_2.sql

-- 0.2's rows: chat 1 with balance 7, a queued job holding 2 of it and an
-- uncertain one holding 3; chat 2 with no balance and a daily hold.
INSERT INTO chats (chat_id, pockets) VALUES (1, '{0,1,7}'), (2, '{0,1}');
INSERT INTO reservations (chat_id, kind, queue, held, held_units, slot)
  VALUES (1, 'image', 'q', '{NULL,NULL,2}', '{NULL,NULL,1}', 0),
         (2, 'image', 'q', '{NULL,1}', '{NULL,1}', 0);
INSERT INTO uncertain_reservations (id, chat_id, kind, queue, held,
                                    held_units, units, request_id, slot,
                                    created_at, cancel_requested,
                                    provider_ref)
  VALUES (900, 1, 'image', 'q', '{NULL,NULL,3}', '{NULL,NULL,1}', 1, '', 1,
          now(), false, 'ref');

\ir ../../persistence/migrations/004_grants.sql

SELECT plan(8);
SELECT is((SELECT count(*) FROM grants), 1::bigint,
  'one grant per chat with a balance, none for a chat without');
SELECT is((SELECT ROW(chat_id, source, credits, expires_at, priority,
                      payment_id)
             FROM grants),
  ROW(1::bigint, 'admin'::text, 7, NULL::timestamptz, 100, NULL::text),
  'the balance as an admin grant that never expires, priority 100, no '
  'payment');
SELECT is((SELECT ROW(chat_id, entry, changed, pockets, grant_ids,
                      grant_credits, detail LIKE 'the balance of 7 credits '
                                                 'became grant %')
             FROM ledger),
  ROW(1::bigint, 'admin'::text, '{}'::integer[], '{0,1,7}'::integer[],
      ARRAY[(SELECT grant_id FROM grants)], ARRAY[7], true),
  'one admin ledger row says why, changing no pocket; none for a chat '
  'without a balance');
SELECT is((SELECT ROW(held_grants, held_grant_credits)::chargeonce_grant_hold
             FROM reservations WHERE chat_id = 1),
  (SELECT ROW(ARRAY[grant_id], '{2}')::chargeonce_grant_hold FROM grants),
  'the open hold on balance holds the grant');
SELECT is((SELECT ROW(held_grants, held_grant_credits)::chargeonce_grant_hold
             FROM uncertain_reservations WHERE id = 900),
  (SELECT ROW(ARRAY[grant_id], '{3}')::chargeonce_grant_hold FROM grants),
  'so does the unresolved uncertain one');
SELECT is((SELECT cardinality(held_grants) FROM reservations
            WHERE chat_id = 2), 0,
  'a hold on a daily pocket holds no grant');
SELECT is((SELECT pockets FROM chats WHERE chat_id = 1), '{0,1,7}'::integer[],
  'the balance stays: pockets[3] is the sum of the grants'' left');
SELECT is((SELECT next_expiry FROM chats WHERE chat_id = 1), NULL,
  'nothing expires');

SELECT * FROM finish();
ROLLBACK;
