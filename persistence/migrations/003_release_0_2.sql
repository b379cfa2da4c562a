-- SPDX-License-Identifier: Apache-2.0
-- Release 0.2: the tables, types and indexes of 0.2, and the conversion of a
-- 0.1 database's rows. Functions are not here: persistence/functions/ holds
-- their live bodies, which migrate() applies after this file. The 0.1
-- functions are dropped first (0.2 changes every one of their signatures
-- or answer rows); the functions of 001 stay.
--
-- Names, pockets, units, windows: see ARCHITECTURE.md and the function
-- files. Each section below says what it adds and why.

-- The 0.1 functions -----------------------------------------------------------

DROP FUNCTION chargeonce_apply_batch(text[], bigint[], bigint[], text[],
                                     text[], bigint);
DROP FUNCTION chargeonce_apply_one(text, bigint, bigint, text, text, bigint);
DROP FUNCTION chargeonce_receipt_at(integer, bigint, text, integer, integer,
                                    integer, timestamp with time zone);
DROP FUNCTION chargeonce_refusal_at(integer, text, text);
DROP FUNCTION chargeonce_reservation_at(integer, reservations);
DROP FUNCTION chargeonce_status(bigint);
DROP FUNCTION chargeonce_cancel(bigint);
DROP FUNCTION chargeonce_fail(bigint, bigint);
DROP FUNCTION chargeonce_commit(bigint, bigint);
DROP FUNCTION chargeonce_heartbeat(bigint, bigint, bigint);
DROP FUNCTION chargeonce_start(bigint, bigint);
DROP FUNCTION chargeonce_reserve(bigint, text, text);
DROP FUNCTION chargeonce_explain_missing(bigint, bigint);
DROP FUNCTION chargeonce_describe(bigint, bigint);
DROP FUNCTION chargeonce_with_reservation(reservations);
DROP FUNCTION chargeonce_refusal(text, text);
DROP FUNCTION chargeonce_us(timestamp with time zone);
DROP TYPE chargeonce_outcome;

-- Conversion helpers, gone with the migration's session -------------------------

-- 0.1's three pocket columns as an object, without zeros.
CREATE FUNCTION pg_temp.chargeonce_three(m integer, i integer, b integer)
  RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_strip_nulls(jsonb_build_object(
    'daily_messages', nullif(m, 0), 'daily_images', nullif(i, 0),
    'balance', nullif(b, 0)))
$$;

-- One unit of every pocket a hold lists.
CREATE FUNCTION pg_temp.chargeonce_one_unit_each(held jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(jsonb_object_agg(key, 1), '{}') FROM jsonb_each(held)
$$;

-- The pockets an object lists with an amount other than 0: what changed from
-- nothing to `p` (the `changed` of a chat's opening row).
CREATE FUNCTION pg_temp.chargeonce_listed(p jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(jsonb_object_agg(key, value), '{}')
    FROM jsonb_each(p) WHERE value <> '0'::jsonb
$$;

-- An object of pocket name to amount as the array by ordinal; a name
-- catalog_pockets does not have is an error, not a pocket dropped.
CREATE FUNCTION pg_temp.chargeonce_pockets(p jsonb) RETURNS integer[]
  LANGUAGE plpgsql STABLE STRICT AS $$
DECLARE
  out integer[] := '{}';
  i integer;
  e record;
BEGIN
  FOR e IN SELECT key, value::integer AS amount FROM jsonb_each_text(p) LOOP
    SELECT ordinal INTO i FROM catalog_pockets WHERE pocket = e.key;
    IF i IS NULL THEN
      RAISE invalid_parameter_value USING
        MESSAGE = 'unknown pocket ' || e.key || ': not in catalog_pockets';
    END IF;
    out := (out)[:i - 1]
           || array_fill(NULL::integer,
                         ARRAY[GREATEST(0, i - 1 - cardinality(out))])
           || e.amount || (out)[i + 1:];
  END LOOP;
  RETURN out;
END $$;

-- Parallel jobs -------------------------------------------------------------------

-- Parallel jobs: the chat's lock separated from the hold. A reservation
-- occupies one of the chat's slots 0 … N-1 (N: the chat's max_active_jobs,
-- else its plan's default, a server option); UNIQUE (chat_id, slot) is the
-- lock, so a chat never has more than N active jobs. Every decision counts
-- what the chat's other active reservations hold. A request id names one
-- job for its whole life: while active in reservations, after it ended
-- (committed, failed, cancelled, released) in ended_reservations, for
-- request-retention.

-- Tables ---------------------------------------------------------------------

-- NULL: the plan's default (free-max-active-jobs, premium-max-active-jobs).
ALTER TABLE chats ADD COLUMN max_active_jobs integer NULL
  CHECK (max_active_jobs BETWEEN 1 AND 64);

-- Every existing reservation is its chat's only one: slot 0.
ALTER TABLE reservations ADD COLUMN slot integer NOT NULL DEFAULT 0
  CHECK (slot BETWEEN 0 AND 63);

ALTER TABLE reservations DROP CONSTRAINT reservations_chat_id_key;

-- The lock: at most one active reservation per slot, and reserve only takes
-- slots below the chat's limit. Also the index of every lookup by chat.
ALTER TABLE reservations ADD CONSTRAINT reservations_slot
  UNIQUE (chat_id, slot);

-- One active job per request id (the ended ones: ended_reservations).
CREATE UNIQUE INDEX reservations_request_id ON reservations (chat_id, request_id)
  WHERE request_id <> '';

-- Reservations with a request id after they ended, so that a retried reserve
-- returns the job with its final status instead of holding again. Written in
-- the transaction that ends the reservation; forgotten after
-- request-retention (prune). Jobs without a request id are not kept: nothing
-- can ask for them by request.
CREATE TABLE ended_reservations (
  id                  bigint PRIMARY KEY,          -- the reservation's id
  chat_id             bigint NOT NULL,
  kind                text NOT NULL,
  status              text NOT NULL
                        CHECK (status IN ('committed', 'failed', 'cancelled',
                                          'released')),
  queue               text NOT NULL,
  held_daily_messages integer NOT NULL,
  held_daily_images   integer NOT NULL,
  held_balance        integer NOT NULL,
  request_id          text NOT NULL CHECK (request_id <> ''),
  slot                integer NOT NULL,
  created_at          timestamptz NOT NULL,
  lease_expires_at    timestamptz NULL,
  ended_at            timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT ended_reservations_request_id UNIQUE (chat_id, request_id)
);

CREATE INDEX ended_reservations_ended_at ON ended_reservations (ended_at);

-- Pockets by name, the catalog of kinds -------------------------------------

-- Pockets by name (the catalog of protocol/catalog.hpp decides which kinds
-- and pockets exist); the three pocket columns of 0.1 become objects of
-- pocket name to amount first, then arrays by ordinal further down, as the
-- 0.2 development did.
ALTER TABLE chats ADD COLUMN pockets jsonb NOT NULL DEFAULT '{}';

UPDATE chats SET pockets = jsonb_build_object(
  'daily_messages', daily_messages, 'daily_images', daily_images,
  'balance', balance);

ALTER TABLE chats
  DROP COLUMN daily_messages, DROP COLUMN daily_images, DROP COLUMN balance,
  ADD CONSTRAINT chats_pockets CHECK (jsonb_typeof(pockets) = 'object'
                                      AND strpos(pockets::text, ': -') = 0);

ALTER TABLE reservations ADD COLUMN held jsonb NOT NULL DEFAULT '{}';

UPDATE reservations SET held = pg_temp.chargeonce_three(
  held_daily_messages, held_daily_images, held_balance);

ALTER TABLE reservations
  DROP COLUMN held_daily_messages, DROP COLUMN held_daily_images,
  DROP COLUMN held_balance, DROP CONSTRAINT reservations_kind_check,
  ADD CONSTRAINT reservations_held CHECK (jsonb_typeof(held) = 'object');

ALTER TABLE ended_reservations ADD COLUMN held jsonb NOT NULL DEFAULT '{}';

UPDATE ended_reservations SET held = pg_temp.chargeonce_three(
  held_daily_messages, held_daily_images, held_balance);

ALTER TABLE ended_reservations
  DROP COLUMN held_daily_messages, DROP COLUMN held_daily_images,
  DROP COLUMN held_balance;

-- A top-up's credit stays in credited_balance: balance is the purchased
-- pocket of every catalog.
ALTER TABLE ledger ADD COLUMN charged jsonb NOT NULL DEFAULT '{}';

UPDATE ledger SET charged = pg_temp.chargeonce_three(
  charged_daily_messages, charged_daily_images, charged_balance)
  WHERE entry = 'charge';

ALTER TABLE ledger
  DROP COLUMN charged_daily_messages, DROP COLUMN charged_daily_images,
  DROP COLUMN charged_balance, DROP CONSTRAINT ledger_kind_check,
  ADD CONSTRAINT ledger_charged CHECK (jsonb_typeof(charged) = 'object');

-- Every kind a server's catalog has had. A server that starts with a
-- catalog without one of them counts that kind's reservations and ledger
-- rows, and refuses to start unless there are none: the ledger has no index
-- on kind, so only a kind that is really gone costs a scan.
CREATE TABLE catalog_kinds (
  kind     text PRIMARY KEY CHECK (kind ~ '^[a-z][a-z0-9_]{0,31}$'),
  added_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO catalog_kinds (kind)
  SELECT kind FROM reservations
  UNION SELECT kind FROM ended_reservations
  UNION SELECT kind FROM ledger WHERE kind IS NOT NULL;

-- Units ---------------------------------------------------------------------

-- Units: a job of n units holds n of each unit price; what 0.1 held was
-- one unit from each pocket it held.
ALTER TABLE reservations
  ADD COLUMN units integer NOT NULL DEFAULT 1,
  ADD COLUMN held_units jsonb NOT NULL DEFAULT '{}';

UPDATE reservations SET held_units = pg_temp.chargeonce_one_unit_each(held)
 WHERE held <> '{}';

ALTER TABLE ended_reservations
  ADD COLUMN units integer NOT NULL DEFAULT 1,
  ADD COLUMN held_units jsonb NOT NULL DEFAULT '{}';

UPDATE ended_reservations
   SET held_units = pg_temp.chargeonce_one_unit_each(held)
 WHERE held <> '{}';

-- A top-up's row has units 1 and nothing released: neither means anything
-- there (a constant default adds the columns without rewriting the ledger).
ALTER TABLE ledger
  ADD COLUMN units integer NOT NULL DEFAULT 1,
  ADD COLUMN released jsonb NOT NULL DEFAULT '{}';

-- Cancel after start, windows -----------------------------------------------

-- Cancel after start, by policy per kind (the catalog's cancel_after_start,
-- passed in the products as "cancel"): `refuse` answers too_late, as the
-- original design does; `request` marks the started job cancel_requested
-- and answers it, and every later heartbeat answer carries the flag, so
-- the worker learns within one heartbeat that the user wants it stopped.
-- The worker decides what is honest: fail (nothing charged), commit (the
-- provider did the work) or commit fewer units. A cancel of a queued job
-- still deletes it. A cancel-requested job keeps its lease and sweep
-- deadline.
ALTER TABLE reservations
  ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;

-- A hold on a daily pocket belongs to the window it was taken in. Each
-- chat numbers its windows (one more at every refill; window_started_at
-- cannot tell them apart, since reactivation clears it and the next
-- activity opens a window without a refill), each job records the number
-- it was reserved in, and each charge row the window that paid. A hold of
-- a past window no longer counts against the chat's pockets, except its
-- balance part: the daily unit of its own window paid for it.
ALTER TABLE chats ADD COLUMN window_number bigint NOT NULL DEFAULT 0;

ALTER TABLE reservations ADD COLUMN window_number bigint NOT NULL DEFAULT 0;

ALTER TABLE ended_reservations
  ADD COLUMN window_number bigint NOT NULL DEFAULT 0;

-- charge: the window that paid; refill: the window it opened; else NULL.
ALTER TABLE ledger ADD COLUMN window_number bigint NULL;

-- Outcome unknown -----------------------------------------------------------

-- Outcome unknown, and reconciliation. A worker whose provider call timed
-- out calls `uncertain` with the idempotency key it gave the provider: the
-- reservation leaves `reservations` (its slot is free at once: the user is
-- not locked out by the provider's timeout) for `uncertain_reservations`,
-- where its hold keeps counting in what the chat may spend (nobody knows
-- yet whether it was paid). Lease and sweep do not apply there;
-- reconcile-timeout does. `resolve` records the outcome once: succeeded
-- commits (a ledger row, as commit does, optional units), failed releases
-- the hold. A row stays, resolved, for release-retention, so that a retried
-- resolve gets its first answer and the other outcome is refused.
CREATE TABLE uncertain_reservations (
  id               bigint PRIMARY KEY,   -- the reservation's id
  chat_id          bigint NOT NULL,
  kind             text NOT NULL,
  queue            text NOT NULL,
  held             jsonb NOT NULL,
  held_units       jsonb NOT NULL,
  units            integer NOT NULL,
  request_id       text NOT NULL,
  slot             integer NOT NULL,     -- the slot it had, freed
  created_at       timestamptz NOT NULL,
  cancel_requested boolean NOT NULL,
  provider_ref     text NOT NULL,
  uncertain_at     timestamptz NOT NULL DEFAULT now(),
  -- NULL while unresolved
  outcome          text NULL
                     CHECK (outcome IN ('succeeded', 'failed', 'released')),
  resolved_at      timestamptz NULL,
  charged          jsonb NULL,
  released         jsonb NULL,
  units_charged    integer NULL,
  window_number    bigint NOT NULL DEFAULT 0  -- the hold's window
);

-- A chat's open holds (every reserve reads them).
CREATE INDEX uncertain_reservations_open ON uncertain_reservations (chat_id)
  WHERE outcome IS NULL;

-- One job per request id, while its outcome is unknown (after it:
-- ended_reservations).
CREATE UNIQUE INDEX uncertain_reservations_request_id
  ON uncertain_reservations (chat_id, request_id)
  WHERE outcome IS NULL AND request_id <> '';

-- The reconcile-timeout scan, oldest first.
CREATE INDEX uncertain_reservations_since
  ON uncertain_reservations (uncertain_at, id) WHERE outcome IS NULL;

-- `unresolved` pages, by id.
CREATE INDEX uncertain_reservations_unresolved ON uncertain_reservations (id)
  WHERE outcome IS NULL;

-- Pruning after release-retention.
CREATE INDEX uncertain_reservations_resolved_at
  ON uncertain_reservations (resolved_at) WHERE outcome IS NOT NULL;

-- A ledger of every change --------------------------------------------------

-- A ledger of every change of a chat's pockets. Each row carries the
-- chat's pockets after it (`pockets`), so that a chat's balance can be
-- replayed from its ledger alone and each row checked against the one
-- before it:
--   charge   after = before less `charged`, each pocket stopping at zero
--            (the clamp of the contract);
--   top_up   after = before plus `credited_balance` in balance;
--   refill   after = before plus `changed` (signed, per pocket); `detail`
--            says which: window (the daily window, also a new chat's first)
--            or reactivation;
--   admin    the same, `detail`: create_chat, set_premium (no amount
--            changes: the plan does), seed (chats made by seed_chats) or
--            opening (the row the upgrade from 0.1 writes for every chat).
-- Rows written before this migration have no pockets; each chat's chain
-- starts at its opening row. Refills and admin changes write a row only
-- when they happen; a refill that leaves every pocket as it was writes
-- none. The hot path's cost is one more value in the commit's row, which
-- the statement has computed already.
ALTER TABLE ledger
  ADD COLUMN pockets jsonb NULL,
  ADD COLUMN changed jsonb NOT NULL DEFAULT '{}',
  ADD COLUMN detail  text NULL,
  DROP CONSTRAINT ledger_entry_check,
  ADD CONSTRAINT ledger_entry_check
    CHECK (entry IN ('charge', 'top_up', 'refill', 'admin')),
  DROP CONSTRAINT ledger_entry_shape,
  ADD CONSTRAINT ledger_entry_shape CHECK (
    (entry = 'charge' AND reservation_id IS NOT NULL AND kind IS NOT NULL
      AND payment_id IS NULL AND detail IS NULL)
    OR (entry = 'top_up' AND reservation_id IS NULL AND payment_id IS NOT NULL
      AND credited_balance > 0 AND detail IS NULL)
    OR (entry IN ('refill', 'admin') AND reservation_id IS NULL
      AND payment_id IS NULL AND kind IS NULL AND credited_balance = 0
      AND detail IS NOT NULL AND pockets IS NOT NULL)),
  ADD CONSTRAINT ledger_changed CHECK (jsonb_typeof(changed) = 'object'),
  ADD CONSTRAINT ledger_pockets
    CHECK (pockets IS NULL OR jsonb_typeof(pockets) = 'object');

-- A chat's rows in order: the support view's pages (newest first, keyset
-- on id) and the auditor's chain. It replaces (chat_id, committed_at),
-- which nothing read, so a commit still maintains the same number of
-- indexes.
DROP INDEX ledger_chat_committed_at;

CREATE INDEX ledger_chat_id ON ledger (chat_id, id);

-- Every chat's chain opens with its pockets as they are now.
INSERT INTO ledger (entry, detail, chat_id, changed, pockets)
SELECT 'admin', 'opening', chat_id, pg_temp.chargeonce_listed(pockets),
       pockets
  FROM chats ORDER BY chat_id;

-- History indexes -----------------------------------------------------------

-- The support view (history, explain) reads a page of one chat's timeline
-- from each table that keeps its reservations, by (chat_id, time), so that
-- a page costs what it shows however long the chat's past is.
-- released_reservations and uncertain_reservations are written off the hot
-- path only (a sweep's release, a provider timeout). ended_reservations'
-- index leaves out committed jobs, the bulk of them: a commit pays for no
-- new index (the history finds it through its ledger row); failed,
-- cancelled and released jobs do.
CREATE INDEX released_reservations_chat_id
  ON released_reservations (chat_id, released_at);

CREATE INDEX uncertain_reservations_chat_id
  ON uncertain_reservations (chat_id, uncertain_at);

CREATE INDEX ended_reservations_chat_not_committed
  ON ended_reservations (chat_id, ended_at) WHERE status <> 'committed';

-- Durable events ------------------------------------------------------------

-- Events that outlive a restart. The changes a gateway must hear of after
-- the fact (a release, a refill, a cancel request, a job to reconcile) are
-- written to `events` in the same transaction as the change itself, by
-- triggers on the tables that change (so that the batch function and the
-- per-statement SQL both write them without knowing) and by the
-- reactivation statement. Subscribers read them back by id, and resume
-- after the last id they saw.
--
-- The id a subscriber sees is given after the commit, not by the writer:
-- a writer's row has `seq` (write order) and no id. Whoever reads the
-- events (chargeonce_number_events, from every server's event bus) first
-- numbers the committed rows without one, in seq order, holding the row
-- lock of event_clock until its own commit. A numbering that gave id N is
-- therefore visible before any other can give N+1: a reader that has seen
-- N never meets a smaller id later (an id taken by the writer could not
-- promise it: a writer that took one early may commit late). Writers take
-- no lock for it, so releases commit in parallel as before; only the
-- readers, a few times a second, and the reactivation scan, once per page
-- of a thousand chats, queue for the clock.
CREATE TABLE event_clock (
  only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  last_id  bigint NOT NULL
);

INSERT INTO event_clock (last_id) VALUES (0);

CREATE TABLE events (
  seq            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id             bigint NULL,  -- NULL until numbered
  event          text NOT NULL
                   CHECK (event IN ('reservation_released', 'limits_refilled',
                                    'cancel_requested', 'reconcile_needed')),
  chat_id        bigint NOT NULL,
  reservation_id bigint NULL,  -- NULL for limits_refilled
  detail         text NULL,    -- a release's reason, a job's provider_ref
  at             timestamptz NOT NULL DEFAULT now()
);

-- Readers follow this one; a writer's insert (no id yet) touches only the
-- primary key and the next one. Pruning walks the primary key, oldest first
-- (seq follows the time closely enough for a retention of hours).
CREATE UNIQUE INDEX events_id ON events (id) WHERE id IS NOT NULL;

-- What the next numbering takes, oldest first.
CREATE INDEX events_unnumbered ON events (seq) WHERE id IS NULL;

-- The triggers that write the events are in persistence/functions/10_events.sql,
-- beside the functions they call.

-- Pockets by ordinal --------------------------------------------------------

-- Pockets, holds and charges as integer arrays indexed by a pocket ordinal
-- instead of jsonb objects: the per-pocket jsonb arithmetic of reserve and
-- commit (build, parse, iterate, merge objects) was the whole cost the
-- catalog added to the hot path at 64 clients (docs/performance.md,
-- 2026-12-06); the same work on arrays is element reads and writes.
--
-- catalog_pockets gives each pocket name its ordinal once and for ever
-- (the built-in pockets are 1, 2, 3); the servers register their catalog's
-- pockets at start-up and translate ordinals back into names: names stay
-- what the catalog, the API and the logs use. In every array a NULL element
-- is a pocket not listed, as a key absent from the object was: it holds 0.
-- A receipt that charged 0 of balance lists balance at 0, as before.
CREATE TABLE catalog_pockets (
  pocket text PRIMARY KEY CHECK (pocket ~ '^[a-z][a-z0-9_]{0,31}$'),
  ordinal integer NOT NULL UNIQUE CHECK (ordinal BETWEEN 1 AND 1000),
  added_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO catalog_pockets (pocket, ordinal)
  VALUES ('daily_messages', 1), ('daily_images', 2), ('balance', 3);

-- Every other pocket the data names, in name order after the built-in ones.
INSERT INTO catalog_pockets (pocket, ordinal)
SELECT k, 3 + row_number() OVER (ORDER BY k COLLATE "C")
  FROM (SELECT jsonb_object_keys(pockets) AS k FROM chats
        UNION SELECT jsonb_object_keys(held) FROM reservations
        UNION SELECT jsonb_object_keys(held_units) FROM reservations
        UNION SELECT jsonb_object_keys(held) FROM ended_reservations
        UNION SELECT jsonb_object_keys(held_units) FROM ended_reservations
        UNION SELECT jsonb_object_keys(held) FROM uncertain_reservations
        UNION SELECT jsonb_object_keys(held_units) FROM uncertain_reservations
        UNION SELECT jsonb_object_keys(charged) FROM uncertain_reservations
         WHERE charged IS NOT NULL
        UNION SELECT jsonb_object_keys(released) FROM uncertain_reservations
         WHERE released IS NOT NULL
        UNION SELECT jsonb_object_keys(charged) FROM ledger
        UNION SELECT jsonb_object_keys(released) FROM ledger
        UNION SELECT jsonb_object_keys(changed) FROM ledger
        UNION SELECT jsonb_object_keys(pockets) FROM ledger
         WHERE pockets IS NOT NULL) names
 WHERE k NOT IN ('daily_messages', 'daily_images', 'balance');

ALTER TABLE chats DROP CONSTRAINT chats_pockets;

ALTER TABLE reservations DROP CONSTRAINT reservations_held;

ALTER TABLE ledger DROP CONSTRAINT ledger_changed,
  DROP CONSTRAINT ledger_charged, DROP CONSTRAINT ledger_pockets;

ALTER TABLE chats ALTER COLUMN pockets DROP DEFAULT,
  ALTER COLUMN pockets TYPE integer[] USING pg_temp.chargeonce_pockets(pockets),
  ALTER COLUMN pockets SET DEFAULT '{}';

ALTER TABLE reservations ALTER COLUMN held DROP DEFAULT,
  ALTER COLUMN held TYPE integer[] USING pg_temp.chargeonce_pockets(held),
  ALTER COLUMN held SET DEFAULT '{}',
  ALTER COLUMN held_units DROP DEFAULT,
  ALTER COLUMN held_units TYPE integer[]
    USING pg_temp.chargeonce_pockets(held_units),
  ALTER COLUMN held_units SET DEFAULT '{}';

ALTER TABLE ended_reservations ALTER COLUMN held DROP DEFAULT,
  ALTER COLUMN held TYPE integer[] USING pg_temp.chargeonce_pockets(held),
  ALTER COLUMN held SET DEFAULT '{}',
  ALTER COLUMN held_units DROP DEFAULT,
  ALTER COLUMN held_units TYPE integer[]
    USING pg_temp.chargeonce_pockets(held_units),
  ALTER COLUMN held_units SET DEFAULT '{}';

ALTER TABLE uncertain_reservations
  ALTER COLUMN held TYPE integer[] USING pg_temp.chargeonce_pockets(held),
  ALTER COLUMN held_units TYPE integer[]
    USING pg_temp.chargeonce_pockets(held_units),
  ALTER COLUMN charged TYPE integer[] USING pg_temp.chargeonce_pockets(charged),
  ALTER COLUMN released TYPE integer[]
    USING pg_temp.chargeonce_pockets(released);

ALTER TABLE ledger ALTER COLUMN charged DROP DEFAULT,
  ALTER COLUMN charged TYPE integer[] USING pg_temp.chargeonce_pockets(charged),
  ALTER COLUMN charged SET DEFAULT '{}',
  ALTER COLUMN released DROP DEFAULT,
  ALTER COLUMN released TYPE integer[]
    USING pg_temp.chargeonce_pockets(released),
  ALTER COLUMN released SET DEFAULT '{}',
  ALTER COLUMN changed DROP DEFAULT,
  ALTER COLUMN changed TYPE integer[] USING pg_temp.chargeonce_pockets(changed),
  ALTER COLUMN changed SET DEFAULT '{}',
  ALTER COLUMN pockets TYPE integer[] USING pg_temp.chargeonce_pockets(pockets);

-- One dimension from 1 (array_ndims and array_lower are NULL for an empty
-- array, which passes); a chat's pockets never below zero (the clamp).
-- Built-in functions only: a CHECK's expression is prepared again for every
-- statement, and an SQL function in it is parsed and planned again each
-- time: chargeonce_commit's ledger insert took 86 us with three of them,
-- 66 us without (pg_stat_statements, one connection).
ALTER TABLE chats ADD CONSTRAINT chats_pockets
  CHECK (array_ndims(pockets) = 1 AND array_lower(pockets, 1) = 1
         AND 0 <= ALL (pockets));

ALTER TABLE reservations ADD CONSTRAINT reservations_held
  CHECK (array_ndims(held) = 1 AND array_lower(held, 1) = 1
         AND array_ndims(held_units) = 1 AND array_lower(held_units, 1) = 1);

ALTER TABLE ledger ADD CONSTRAINT ledger_charged
    CHECK (array_ndims(charged) = 1 AND array_lower(charged, 1) = 1),
  ADD CONSTRAINT ledger_changed
    CHECK (array_ndims(changed) = 1 AND array_lower(changed, 1) = 1),
  ADD CONSTRAINT ledger_pockets
    CHECK (array_ndims(pockets) = 1 AND array_lower(pockets, 1) = 1);

-- Worker identity -----------------------------------------------------------

-- A job delivered twice runs once: the worker that starts a job may name
-- itself (any string it chooses for this attempt, e.g. its queue job id and
-- attempt); the first start that names one records it, and a start, a
-- heartbeat, a commit, a fail or an uncertain naming another one is
-- refused with already_started while the job runs. A call naming none
-- behaves as before. The identity is never shown: the refusal names
-- nothing of the other worker.
ALTER TABLE reservations ADD COLUMN worker text NOT NULL DEFAULT '';

-- The answer rows -----------------------------------------------------------------

-- What every operation answers, one row per operation of a batch; the
-- positional helpers of persistence/functions/03_rows.sql build it, so a new
-- attribute goes last.
CREATE TYPE chargeonce_outcome AS (
  idx            integer,  -- position in the batch
  outcome        text,     -- 'ok' or an error name of protocol/errors.hpp
  message        text,
  -- the reservation (reserve, start, heartbeat, fail, cancel; status: the
  -- oldest active one)
  r_id           bigint,
  r_chat         bigint,
  r_kind         text,
  r_status       text,
  r_queue        text,
  r_held         integer[],
  r_request_id   text,
  r_created_us   bigint,
  r_lease_us     bigint,
  r_slot         integer,
  r_ended_us     bigint,   -- a job found by its request id after it ended
  -- the receipt (commit)
  c_chat         bigint,
  c_kind         text,
  c_charged      integer[],
  c_committed_us bigint,
  -- the chat (status)
  s_pockets      integer[],
  s_premium_us   bigint,
  s_premium      boolean,
  s_started      boolean,
  s_blocked      boolean,
  s_banned       boolean,
  s_window_us    bigint,
  s_activity_us  bigint,
  s_max_jobs     integer,  -- the chat's own limit; NULL: its plan's
  s_reservations text,     -- every active reservation, oldest first (JSON)
  r_units        integer,
  r_held_units   integer[],
  c_units        integer,
  c_released     integer[],
  r_cancel_requested boolean,
  -- a reservation's window (r_ attributes) or the window that paid a
  -- receipt (c_ attributes)
  window_number  bigint
);

-- The answer of resolve: the outcome recorded, what it charged and released.
CREATE TYPE chargeonce_resolution AS (
  outcome     text,   -- 'ok' or an error name
  message     text,
  kind        text,
  resolution  text,   -- succeeded or failed
  charged     integer[],
  released    integer[],
  units       integer,
  resolved_us bigint,
  provider_ref text,
  window_number bigint  -- the window that paid (the hold's)
);

-- What reserve holds, per pocket: the amounts and the units each pays.
CREATE TYPE chargeonce_choice AS (held integer[], held_units integer[]);
