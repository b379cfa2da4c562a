-- SPDX-License-Identifier: Apache-2.0
-- Credit grants: every top-up becomes a grant with its own expiry and
-- priority, and the balance pocket is the sum of what the chat's grants have
-- left. Tables, types, indexes and the conversion of a 0.2 database's rows;
-- the functions are in persistence/functions/12_grants.sql and the files it
-- changes, which migrate() applies after this file.
--
-- pockets[3] (balance) stays, as the denormalized sum of the grants' `left`
-- (credits - charged - expired - voided): every pocket rule of reserve,
-- commit and the batch keeps reading one integer, and only the balance part
-- of a hold is split over grants. Each hold records which grants it holds
-- and how much of each (a hold belongs to what it was taken from: a grant
-- that expires or is voided while a job holds part of it keeps that part
-- until the job ends).

-- Grants --------------------------------------------------------------------

CREATE TABLE grants (
  grant_id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  chat_id             bigint NOT NULL,
  source              text NOT NULL DEFAULT 'purchase'
                        CHECK (source IN ('purchase', 'promo', 'admin')),
  credits             integer NOT NULL CHECK (credits > 0),
  charged             integer NOT NULL DEFAULT 0 CHECK (charged >= 0),
  expired             integer NOT NULL DEFAULT 0 CHECK (expired >= 0),
  voided              integer NOT NULL DEFAULT 0 CHECK (voided >= 0),
  -- Lower spends first.
  priority            integer NOT NULL DEFAULT 100
                        CHECK (priority BETWEEN 0 AND 1000),
  expires_at          timestamptz NULL,  -- NULL: never
  -- The relative expiry as the top-up gave it: a retried top-up is compared
  -- with what it gave, not with the instant it resolved to.
  expires_in_ms       bigint NULL,
  payment_id          text NULL,         -- NULL: not a top-up (admin, 004)
  created_at          timestamptz NOT NULL DEFAULT now(),
  -- Set once, when its unheld credits expired (held ones expire as their
  -- holds end).
  expired_at          timestamptz NULL,
  voided_at           timestamptz NULL,
  -- When its credits_expiring event was written: once per grant.
  expiring_noticed_at timestamptz NULL,
  CONSTRAINT grants_amounts CHECK (charged + expired + voided <= credits)
) WITH (fillfactor = 70);  -- every commit updates its grants: room for HOT

-- A retried top-up finds its grant; one grant per payment.
CREATE UNIQUE INDEX grants_payment_id ON grants (payment_id)
  WHERE payment_id IS NOT NULL;

-- A chat's grants (every hold split and status).
CREATE INDEX grants_chat_id ON grants (chat_id, grant_id);

-- The supervisor's expiry scan and expiring notices: only grants that may
-- still expire.
CREATE INDEX grants_due ON grants (expires_at)
  WHERE expired_at IS NULL AND voided_at IS NULL AND expires_at IS NOT NULL;

-- A hold on grants: the grants, in spending order, and the credits of each
-- (aligned arrays).
CREATE TYPE chargeonce_grant_hold AS (grant_ids bigint[], credits integer[]);

-- The spending order as one value that sorts: priority, then the soonest
-- expiry (none last), then the source (promo, admin, purchase), then
-- creation (chargeonce_spending_order builds it).
CREATE TYPE chargeonce_spending_key AS (
  priority      integer,
  never_expires boolean,
  expires_at    timestamptz,
  source_rank   integer,
  created_at    timestamptz,
  grant_id      bigint
);

-- What top-up and void-grant answer: 'ok' and the grant after the change
-- (a retried top-up: the first grant; a top-up of 0.2, before grants: no
-- grant_id, the ledger's row), or a refusal's name and message.
CREATE TYPE chargeonce_grant_answer AS (
  outcome       text,
  message       text,
  grant_id      bigint,
  chat_id       bigint,
  source        text,
  credits       integer,
  left_credits  integer,  -- credits - charged - expired - voided
  held          integer,  -- what open holds hold of it
  priority      integer,
  expires_us    bigint,
  expires_in_ms bigint,
  payment_id    text,
  created_us    bigint,
  expired_us    bigint,
  voided_us     bigint,
  committed_us  bigint,   -- the top-up's ledger row: the receipt's time
  ended         text      -- NULL: live; 'expire' or 'void', whichever came
                          -- first (chargeonce_grant_end)
);

-- status lists the chat's grants (JSON, as chargeonce_grants_json writes
-- them, in spending order).
ALTER TYPE chargeonce_outcome ADD ATTRIBUTE s_grants text;

-- Holds ---------------------------------------------------------------------

-- The balance part of a hold, per grant, in spending order: their sum is
-- held[3].
ALTER TABLE reservations
  ADD COLUMN held_grants bigint[] NOT NULL DEFAULT '{}',
  ADD COLUMN held_grant_credits integer[] NOT NULL DEFAULT '{}';

ALTER TABLE uncertain_reservations
  ADD COLUMN held_grants bigint[] NOT NULL DEFAULT '{}',
  ADD COLUMN held_grant_credits integer[] NOT NULL DEFAULT '{}';

-- The soonest expires_at of the chat's grants not yet expired nor voided
-- (NULL: none): one column a writer reads under the chat's lock to know
-- whether it must expire grants first.
ALTER TABLE chats ADD COLUMN next_expiry timestamptz NULL;

-- The chat's one grant that can still give credits (neither expired nor
-- voided, something left), NULL when it has none or several: while it is
-- set, every other grant of the chat has nothing unheld to give, so a hold
-- on balance is all its own and needs no split over the grants (the common
-- case, one purchase). Kept by triggers on grants (functions/12_grants.sql).
ALTER TABLE chats ADD COLUMN sole_grant bigint NULL;

-- The ledger and events ------------------------------------------------------

-- A charge names the grants it took from; a top_up, expire or void row its
-- one grant. expire and void take a grant's unheld credits out of the
-- balance (detail: which grant, and the reservation whose end released
-- them); the reservation_id of a charge stays unique, so these rows name
-- the reservation in detail only.
ALTER TABLE ledger
  ADD COLUMN grant_ids bigint[] NOT NULL DEFAULT '{}',
  ADD COLUMN grant_credits integer[] NOT NULL DEFAULT '{}',
  DROP CONSTRAINT ledger_entry_check,
  ADD CONSTRAINT ledger_entry_check
    CHECK (entry IN ('charge', 'top_up', 'refill', 'admin', 'expire',
                     'void')),
  DROP CONSTRAINT ledger_entry_shape,
  ADD CONSTRAINT ledger_entry_shape CHECK (
    (entry = 'charge' AND reservation_id IS NOT NULL AND kind IS NOT NULL
      AND payment_id IS NULL AND detail IS NULL)
    OR (entry = 'top_up' AND reservation_id IS NULL AND payment_id IS NOT NULL
      AND credited_balance > 0 AND detail IS NULL)
    OR (entry IN ('refill', 'admin') AND reservation_id IS NULL
      AND payment_id IS NULL AND kind IS NULL AND credited_balance = 0
      AND detail IS NOT NULL AND pockets IS NOT NULL)
    OR (entry IN ('expire', 'void') AND reservation_id IS NULL
      AND payment_id IS NULL AND kind IS NULL AND credited_balance = 0
      AND cardinality(grant_ids) = 1 AND detail IS NOT NULL
      AND pockets IS NOT NULL));

-- A grant's events and balance_low carry what a subscriber reads as
-- columns, not inside the human `detail` (NULL for the other events):
-- grant_id, the grant (credits_expired, credits_expiring); credits, the
-- credits that left the balance (credits_expired), that the grant has
-- left (credits_expiring) or the available balance after the fall
-- (balance_low); expires_at, when the grant expires (credits_expiring);
-- threshold, the one the balance fell below (balance_low). Nullable and
-- without a default: adding them rewrites no row.
ALTER TABLE events DROP CONSTRAINT events_event_check,
  ADD CONSTRAINT events_event_check
    CHECK (event IN ('reservation_released', 'limits_refilled',
                     'cancel_requested', 'reconcile_needed',
                     'credits_expired', 'credits_expiring', 'balance_low')),
  ADD COLUMN grant_id bigint NULL,
  ADD COLUMN credits integer NULL,
  ADD COLUMN expires_at timestamptz NULL,
  ADD COLUMN threshold integer NULL;

-- Low balance ---------------------------------------------------------------

-- The chat's own balance_low threshold: one balance_low event when its
-- available balance (pockets[3] less what holds hold of it) falls from at
-- or above it to below it. NULL: the server's balance-low-threshold; 0:
-- never. Nothing else is stored: whether a fall crosses is decided from
-- the amounts before and after it, so re-arming costs no write.
ALTER TABLE chats ADD COLUMN balance_low_threshold integer NULL
  CHECK (balance_low_threshold >= 0);

-- status answers the chat's own threshold with its other limits.
ALTER TYPE chargeonce_outcome ADD ATTRIBUTE s_low_threshold integer;

-- Conversion ----------------------------------------------------------------

-- Each chat's balance becomes one admin grant that never expires (what
-- top-ups bought and admins gave is no longer told apart), with a ledger
-- row saying so that changes no pocket, and every open hold on balance a
-- hold on that grant. Payment ids of earlier top-ups stay in the ledger's
-- unique index: a retried old webhook still changes nothing, and names no
-- grant (void the converted grant by its id).
INSERT INTO grants (chat_id, source, credits)
SELECT chat_id, 'admin', pockets[3] FROM chats WHERE pockets[3] > 0
 ORDER BY chat_id;

INSERT INTO ledger (entry, chat_id, detail, pockets, changed, grant_ids,
                    grant_credits)
SELECT 'admin', c.chat_id,
       'the balance of ' || g.credits || ' credits became grant '
       || g.grant_id || ' (credit grants, migration 004_grants)',
       c.pockets, '{}', ARRAY[g.grant_id], ARRAY[g.credits]
  FROM grants g JOIN chats c ON c.chat_id = g.chat_id
 ORDER BY c.chat_id;

UPDATE chats c SET sole_grant = g.grant_id
  FROM grants g
 WHERE g.chat_id = c.chat_id;

UPDATE reservations r
   SET held_grants = ARRAY[g.grant_id], held_grant_credits = ARRAY[r.held[3]]
  FROM grants g
 WHERE g.chat_id = r.chat_id AND r.held[3] > 0;

UPDATE uncertain_reservations u
   SET held_grants = ARRAY[g.grant_id], held_grant_credits = ARRAY[u.held[3]]
  FROM grants g
 WHERE g.chat_id = u.chat_id AND u.outcome IS NULL AND u.held[3] > 0;
