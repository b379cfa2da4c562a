-- SPDX-License-Identifier: Apache-2.0
-- The pocket helpers (persistence/functions/02_pockets.sql): arrays by
-- pocket ordinal, a NULL element a pocket not listed, a NULL array no
-- pockets; every subtraction stops at zero.
BEGIN;
SELECT plan(24);

SELECT is(chargeonce_pockets_set(NULL, 3, 5), '{NULL,NULL,5}'::integer[],
  'set on a NULL array lists only the pocket set, at its ordinal');
SELECT is(chargeonce_pockets_set('{1,2}', 1, 7), '{7,2}'::integer[],
  'set replaces a listed pocket and keeps the others');
SELECT is(chargeonce_pockets_set('{1}', 4, 2), '{1,NULL,NULL,2}'::integer[],
  'set past the end leaves the pockets between unlisted');

SELECT is(chargeonce_pockets_add(NULL, '{1}'), '{1}'::integer[],
  'add to a NULL array');
SELECT is(chargeonce_pockets_add('{1,NULL,2}', '{NULL,1,3}'),
  '{1,1,5}'::integer[], 'add per pocket, an unlisted pocket counting 0');
SELECT is(chargeonce_pockets_add('{1}', NULL), '{1}'::integer[],
  'add a NULL array: nothing');

SELECT is(chargeonce_pockets_take('{1,0,5}', '{2,NULL,3}'), '{0,0,2}'::integer[],
  'take stops at zero (the clamp) and leaves unheld pockets as they are');
SELECT is(chargeonce_pockets_take('{4}', NULL), '{4}'::integer[],
  'take of a NULL hold takes nothing');

SELECT is(chargeonce_pockets_charged('{2,NULL,3}', '{1,0,5}'),
  '{1,NULL,3}'::integer[],
  'charged: each held amount, at most what its pocket has');

SELECT is(chargeonce_pockets_less('{3,2}', '{1,2}'), '{2}'::integer[],
  'less: a pocket left at zero is unlisted');

SELECT is(chargeonce_pockets_change('{1,2,3}', '{1,5,0}'),
  '{NULL,3,-3}'::integer[], 'change: signed, the unchanged unlisted');

SELECT is(chargeonce_in_window('{1,NULL,2}', 7, 7), '{1,NULL,2}'::integer[],
  'a hold of the current window falls whole on the pockets');
SELECT is(chargeonce_in_window('{1,NULL,2}', 6, 7), '{NULL,NULL,2}'::integer[],
  'a hold of a past window falls on balance only');
SELECT is(chargeonce_in_window('{1}', 6, 7), '{}'::integer[],
  'a past window''s daily-only hold falls on nothing');

SELECT is(chargeonce_charged_in('{1,NULL,2}', 6, 7, '{0,0,1}'),
  '{1,NULL,1}'::integer[],
  'a past window''s commit charges its daily part whole and clamps balance');
SELECT is(chargeonce_charged_in('{1,NULL,2}', 7, 7, '{0,0,1}'),
  '{0,NULL,1}'::integer[],
  'the current window''s commit clamps every pocket at what it has');

SELECT is(chargeonce_pockets('{"balance": 5, "daily_images": 1}'),
  '{NULL,1,5}'::integer[], 'names become ordinals');
SELECT throws_ok($$SELECT chargeonce_pockets('{"no_such_pocket": 1}')$$,
  '22023', NULL, 'an unknown pocket name is an error, not a pocket dropped');
SELECT is(chargeonce_pockets_json('{NULL,1,5}'),
  '{"balance": 5, "daily_images": 1}'::jsonb, 'ordinals become names');
SELECT is(chargeonce_pockets_json(NULL), '{}'::jsonb,
  'a NULL array is no pockets');

SELECT is((SELECT chargeonce_pockets_sum(x) FROM (VALUES ('{1,NULL,2}'::integer[]),
  (NULL), ('{NULL,3}')) AS v(x)), '{1,3,2}'::integer[],
  'the sum aggregate skips NULL arrays');

SELECT is(chargeonce_captured('{1,NULL,2}', '{1,NULL,2}', 3, 0),
  '{1,NULL,2}'::integer[], 'a commit of 0 units captures the whole hold');
SELECT is(chargeonce_captured('{1,NULL,2}', '{1,NULL,2}', 3, 1),
  '{1}'::integer[], 'one unit of three: the daily pocket first');
SELECT is(chargeonce_captured('{1,NULL,2}', '{1,NULL,2}', 3, 2),
  '{1,NULL,1}'::integer[], 'two units of three: daily, then balance');

SELECT * FROM finish();
ROLLBACK;
