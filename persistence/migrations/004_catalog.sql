-- Pockets by name: the catalog of products (protocol/catalog.hpp) decides
-- which kinds exist, which pockets pay for them and at what price. A chat's
-- pockets, a reservation's hold and a charge are JSON objects of pocket
-- name to amount (a pocket not listed holds 0), so a catalog with new kinds
-- and pockets needs no migration. The rules come from the server with every
-- batch, as the plans' job limits do: the server's catalog in the compact
-- form of catalog_text() (persistence/pockets_column.hpp), one entry per kind:
--   {"image": {"pay": [["daily_images", 1], ["balance", 1]], "free": false,
--              "q": "image_generation", "pq": "image_generation_priority",
--              "refusal": "insufficient_images", "why": ""}, ...}
-- `why` ends the refusal's message ("chat 42 cannot pay for image" + why).
--
-- Every function that answers a chargeonce_outcome is defined again here,
-- on the new answer row, so this file is the whole of the hot path.

-- Amounts ---------------------------------------------------------------------

-- The CHECKs of the pockets columns are evaluated by every statement that
-- writes the row, and cost there far more than per row: a SQL function
-- is inlined (parsed) again for every statement, and jsonpath or regex
-- matching costs 15-25 us each time (measured with pgbench on the
-- per-operation cycle). So they are plain expressions: a chat's pockets
-- are an object whose text has no negative number (": -"); a hold and a
-- charge, made only by the functions below from the catalog's positive
-- prices, an object. Kinds are the catalog's business (the server checks
-- every kind against it): only catalog_kinds checks the name's form.

-- A kind's name, as protocol/types.hpp's is_catalog_name.
CREATE FUNCTION chargeonce_is_name(x text) RETURNS boolean
  LANGUAGE sql IMMUTABLE AS $$ SELECT x ~ '^[a-z][a-z0-9_]{0,31}$' $$;

-- What `pocket` holds in `p`: 0 when it is not listed.
CREATE FUNCTION chargeonce_amount(p jsonb, pocket text) RETURNS integer
  LANGUAGE sql IMMUTABLE AS $$ SELECT coalesce((p ->> pocket)::integer, 0) $$;

-- PL/pgSQL for the helpers that run a query (see 003_parallel_jobs.sql: a
-- SQL function's query is planned again on every call).

-- a + b, per pocket.
CREATE FUNCTION chargeonce_pockets_add(a jsonb, b jsonb) RETURNS jsonb
  LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  k text;
  v integer;
BEGIN
  FOR k, v IN SELECT key, value::integer FROM jsonb_each_text(b) LOOP
    a := a || jsonb_build_object(k, chargeonce_amount(a, k) + v);
  END LOOP;
  RETURN a;
END $$;

-- The holds of a chat's active reservations, summed per pocket.
CREATE AGGREGATE chargeonce_pockets_sum(jsonb) (
  SFUNC = chargeonce_pockets_add, STYPE = jsonb, INITCOND = '{}');

-- Commit's arithmetic: `amounts` less `held`, each pocket stopping at zero
-- (a refill may have lowered it meanwhile; the clamp is the contract).
CREATE FUNCTION chargeonce_pockets_take(amounts jsonb, held jsonb)
  RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  k text;
  v integer;
BEGIN
  FOR k, v IN SELECT key, value::integer FROM jsonb_each_text(held) LOOP
    amounts := amounts
      || jsonb_build_object(k, GREATEST(0, chargeonce_amount(amounts, k) - v));
  END LOOP;
  RETURN amounts;
END $$;

-- What that commit takes, the receipt's `charged`: each held amount, at
-- most what its pocket has.
CREATE FUNCTION chargeonce_pockets_charged(held jsonb, amounts jsonb)
  RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  k text;
  v integer;
  out jsonb := '{}';
BEGIN
  FOR k, v IN SELECT key, value::integer FROM jsonb_each_text(held) LOOP
    out := out || jsonb_build_object(k, LEAST(v, chargeonce_amount(amounts, k)));
  END LOOP;
  RETURN out;
END $$;

-- protocol/pockets.cpp's choose_pockets for one kind's catalog entry: the
-- first pocket of its "pay" list whose price is left after `held` (the
-- chat's other active holds) pays; a premium chat holds nothing for a
-- premium-free kind ('{}'); NULL when nothing can pay.
CREATE FUNCTION chargeonce_choose(spec jsonb, premium boolean, amounts jsonb,
                                  held jsonb)
  RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  i integer;
  pocket text;
  price integer;
BEGIN
  IF premium AND (spec ->> 'free')::boolean THEN
    RETURN '{}';
  END IF;
  FOR i IN 0 .. jsonb_array_length(spec -> 'pay') - 1 LOOP
    pocket := spec -> 'pay' -> i ->> 0;
    price := (spec -> 'pay' -> i ->> 1)::integer;
    IF chargeonce_amount(amounts, pocket) - chargeonce_amount(held, pocket)
       >= price THEN
      RETURN jsonb_build_object(pocket, price);
    END IF;
  END LOOP;
  RETURN NULL;
END $$;

CREATE FUNCTION chargeonce_queue(spec jsonb, premium boolean) RETURNS text
  LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN premium THEN spec ->> 'pq' ELSE spec ->> 'q' END
$$;

-- Tables ---------------------------------------------------------------------

-- The three pockets of before become keys; zero holds and charges are left
-- out (a pocket not listed holds 0).
CREATE FUNCTION pg_temp.chargeonce_three(m integer, i integer, b integer)
  RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_strip_nulls(jsonb_build_object(
    'daily_messages', nullif(m, 0), 'daily_images', nullif(i, 0),
    'balance', nullif(b, 0)))
$$;

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
  kind     text PRIMARY KEY CHECK (chargeonce_is_name(kind)),
  added_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO catalog_kinds (kind)
  SELECT kind FROM reservations
  UNION SELECT kind FROM ended_reservations
  UNION SELECT kind FROM ledger WHERE kind IS NOT NULL;

-- The answer row ---------------------------------------------------------------

-- Every function that returns it goes with it, and comes back below (no
-- notice listing them on every migration).
SET LOCAL client_min_messages = warning;
DROP TYPE chargeonce_outcome CASCADE;
RESET client_min_messages;

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
  r_held         jsonb,
  r_request_id   text,
  r_created_us   bigint,
  r_lease_us     bigint,
  r_slot         integer,
  r_ended_us     bigint,   -- a job found by its request id after it ended
  -- the receipt (commit)
  c_chat         bigint,
  c_kind         text,
  c_charged      jsonb,
  c_committed_us bigint,
  -- the chat (status)
  s_pockets      jsonb,
  s_premium_us   bigint,
  s_premium      boolean,
  s_started      boolean,
  s_blocked      boolean,
  s_banned       boolean,
  s_window_us    bigint,
  s_activity_us  bigint,
  s_max_jobs     integer,  -- the chat's own limit; NULL: its plan's
  s_reservations text      -- every active reservation, oldest first (JSON)
);

CREATE FUNCTION chargeonce_refusal(code text, msg text)
  RETURNS chargeonce_outcome LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  o chargeonce_outcome;
BEGIN
  o.outcome := code;
  o.message := msg;
  RETURN o;
END $$;

CREATE FUNCTION chargeonce_with_reservation(r reservations)
  RETURNS chargeonce_outcome LANGUAGE plpgsql STABLE AS $$
DECLARE
  o chargeonce_outcome;
BEGIN
  o.outcome := 'ok';
  o.r_id := r.id;
  o.r_chat := r.chat_id;
  o.r_kind := r.kind;
  o.r_status := r.status;
  o.r_queue := r.queue;
  o.r_held := r.held;
  o.r_request_id := r.request_id;
  o.r_created_us := chargeonce_us(r.created_at);
  o.r_lease_us := chargeonce_us(r.lease_expires_at);
  o.r_slot := r.slot;
  RETURN o;
END $$;

-- Positional, for the set-based statements (inlined, no call per row): 14
-- r_ columns, 4 c_, 10 s_.
CREATE FUNCTION chargeonce_reservation_at(i integer, r reservations)
  RETURNS chargeonce_outcome LANGUAGE sql STABLE AS $$
  SELECT ROW(i, 'ok', NULL, r.id, r.chat_id, r.kind, r.status, r.queue,
             r.held, r.request_id, chargeonce_us(r.created_at),
             chargeonce_us(r.lease_expires_at), r.slot, NULL,
             NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL)::chargeonce_outcome
$$;

CREATE FUNCTION chargeonce_refusal_at(i integer, code text, msg text)
  RETURNS chargeonce_outcome LANGUAGE sql IMMUTABLE AS $$
  SELECT ROW(i, code, msg,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL)::chargeonce_outcome
$$;

CREATE FUNCTION chargeonce_receipt_at(i integer, chat bigint, k text,
                                      charged jsonb, at timestamptz)
  RETURNS chargeonce_outcome LANGUAGE sql STABLE AS $$
  SELECT ROW(i, 'ok', NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             chat, k, charged, chargeonce_us(at),
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL)::chargeonce_outcome
$$;

-- Ending a reservation -------------------------------------------------------

CREATE OR REPLACE FUNCTION chargeonce_remember_end(r reservations, how text)
  RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF r.request_id = '' THEN
    RETURN;
  END IF;
  INSERT INTO ended_reservations (id, chat_id, kind, status, queue, held,
                                  request_id, slot, created_at,
                                  lease_expires_at)
    VALUES (r.id, r.chat_id, r.kind, how, r.queue, r.held, r.request_id,
            r.slot, r.created_at, r.lease_expires_at);
END $$;

-- The job request_id names in p_chat, active or ended, in one statement
-- (003_parallel_jobs.sql). NULL when none.
CREATE FUNCTION chargeonce_find_request(p_chat bigint, p_request_id text)
  RETURNS chargeonce_outcome LANGUAGE plpgsql STABLE AS $$
DECLARE
  o chargeonce_outcome;
BEGIN
  IF p_request_id = '' THEN
    RETURN NULL;
  END IF;
  SELECT NULL, 'ok', NULL, x.id, x.chat_id, x.kind, x.status, x.queue,
         x.held, x.request_id, chargeonce_us(x.created_at),
         chargeonce_us(x.lease_expires_at), x.slot, chargeonce_us(x.ended_at),
         NULL, NULL, NULL, NULL,
         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
    INTO o
    FROM (SELECT id, chat_id, kind, status, queue, held, request_id,
                 created_at, lease_expires_at, slot,
                 NULL::timestamptz AS ended_at
            FROM reservations
           WHERE chat_id = p_chat AND request_id = p_request_id
          UNION ALL
          SELECT id, chat_id, kind, status, queue, held, request_id,
                 created_at, lease_expires_at, slot, ended_at
            FROM ended_reservations
           WHERE chat_id = p_chat AND request_id = p_request_id) x
   LIMIT 1;
  RETURN o;
END $$;

CREATE OR REPLACE FUNCTION chargeonce_reservations_json(p_chat bigint)
  RETURNS text LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (SELECT coalesce(json_agg(json_build_object(
           'id', id, 'chat', chat_id, 'kind', kind, 'status', status,
           'queue', queue, 'held', held, 'request_id', request_id,
           'created_us', chargeonce_us(created_at),
           'lease_us', chargeonce_us(lease_expires_at), 'slot', slot)
           ORDER BY created_at, id)::text, '[]')
    FROM reservations WHERE chat_id = p_chat);
END $$;

CREATE FUNCTION chargeonce_explain_missing(p_chat bigint, p_id bigint)
  RETURNS chargeonce_outcome LANGUAGE plpgsql STABLE AS $$
DECLARE
  owner bigint;
  how text;
  not_ours text := 'reservation ' || p_id || ' does not belong to chat ' || p_chat;
BEGIN
  SELECT chat_id INTO owner FROM reservations WHERE id = p_id;
  IF FOUND AND owner <> p_chat THEN
    RETURN chargeonce_refusal('invalid_argument', not_ours);
  END IF;
  SELECT chat_id INTO owner FROM ledger WHERE reservation_id = p_id;
  IF FOUND THEN
    IF owner <> p_chat THEN
      RETURN chargeonce_refusal('invalid_argument', not_ours);
    END IF;
    RETURN chargeonce_refusal('invalid_state',
      chargeonce_describe(p_chat, p_id) || ' was already committed');
  END IF;
  SELECT chat_id INTO owner FROM released_reservations WHERE id = p_id;
  IF FOUND THEN
    IF owner <> p_chat THEN
      RETURN chargeonce_refusal('invalid_argument', not_ours);
    END IF;
    RETURN chargeonce_refusal('expired',
      chargeonce_describe(p_chat, p_id) || ' was released by the sweeper');
  END IF;
  SELECT chat_id, status INTO owner, how FROM ended_reservations WHERE id = p_id;
  IF FOUND THEN
    IF owner <> p_chat THEN
      RETURN chargeonce_refusal('invalid_argument', not_ours);
    END IF;
    RETURN chargeonce_refusal('not_found',
      chargeonce_describe(p_chat, p_id) || ' was ' || how);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM chats WHERE chat_id = p_chat) THEN
    RETURN chargeonce_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  RETURN chargeonce_refusal('not_found', chargeonce_describe(p_chat, p_id) || ' is gone');
END $$;

-- One operation at a time ----------------------------------------------------

-- Lock, decide, hold: chargeonce_choose on what the pockets have left after
-- the other active holds, under the row lock; the lowest free slot below
-- the chat's limit, with the UNIQUE (chat_id, slot) index as the lock.
CREATE FUNCTION chargeonce_reserve(p_chat bigint, p_kind text,
                                   p_request_id text, p_free_max integer,
                                   p_premium_max integer, p_products jsonb)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  spec jsonb := p_products -> p_kind;
  c record;
  a record;
  r reservations;
  o chargeonce_outcome;
  job_limit integer;
  free_slot integer;
  hold jsonb;
BEGIN
  -- The server checks the kind before it asks; a caller that did not is
  -- told the same.
  IF spec IS NULL THEN
    RETURN chargeonce_refusal('invalid_argument', 'unknown kind ' || p_kind);
  END IF;
  SELECT pockets, max_active_jobs,
         coalesce(premium_until > now(), false) AS premium, blocked, banned
    INTO c FROM chats WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  -- A retry of the same request gets its job back, active or ended (a
  -- replay, never a new hold).
  o := chargeonce_find_request(p_chat, p_request_id);
  IF o.r_id IS NOT NULL THEN
    IF o.r_kind <> p_kind THEN
      RETURN chargeonce_refusal('invalid_argument',
        'request_id ' || p_request_id || ' of chat ' || p_chat
        || ' names a ' || o.r_kind || ' job, not ' || p_kind);
    END IF;
    RETURN o;
  END IF;
  IF c.banned THEN
    RETURN chargeonce_refusal('chat_banned', 'chat ' || p_chat || ' is banned');
  END IF;
  IF c.blocked THEN
    RETURN chargeonce_refusal('chat_blocked', 'chat ' || p_chat || ' is blocked');
  END IF;
  job_limit := chargeonce_job_limit(c.max_active_jobs, c.premium, p_free_max,
                                    p_premium_max);
  IF job_limit > 1 AND p_request_id = '' THEN
    RETURN chargeonce_refusal('invalid_argument',
      'chat ' || p_chat || ' runs up to ' || job_limit
      || ' jobs at once: reserve needs a request_id');
  END IF;
  SELECT count(*) AS n, chargeonce_pockets_sum(held) AS held,
         coalesce(array_agg(slot), '{}') AS slots
    INTO a FROM reservations WHERE chat_id = p_chat;
  -- A lowered limit leaves slots above it taken: the count decides too.
  SELECT min(s) INTO free_slot FROM generate_series(0, job_limit - 1) AS s
   WHERE s <> ALL (a.slots) AND a.n < job_limit;
  IF free_slot IS NULL THEN
    RETURN chargeonce_refusal('busy',
      chargeonce_busy_message(p_chat, a.n, job_limit));
  END IF;
  hold := chargeonce_choose(spec, c.premium, c.pockets, a.held);
  IF hold IS NULL THEN
    RETURN chargeonce_refusal(spec ->> 'refusal',
      'chat ' || p_chat || ' cannot pay for ' || p_kind || (spec ->> 'why'));
  END IF;
  INSERT INTO reservations (chat_id, kind, queue, held, request_id, slot)
    VALUES (p_chat, p_kind, chargeonce_queue(spec, c.premium), hold,
            p_request_id, free_slot)
    ON CONFLICT (chat_id, slot) DO NOTHING
    RETURNING * INTO r;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('busy',
      chargeonce_busy_message(p_chat, a.n + 1, job_limit));
  END IF;
  RETURN chargeonce_with_reservation(r);
END $$;

CREATE FUNCTION chargeonce_start(p_chat bigint, p_id bigint)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  r reservations;
BEGIN
  UPDATE reservations SET status = 'in_progress', started_at = now()
    WHERE id = p_id AND chat_id = p_chat AND status = 'queued'
    RETURNING * INTO r;
  IF FOUND THEN
    RETURN chargeonce_with_reservation(r);
  END IF;
  -- A worker retrying its start must not be told the job is gone.
  SELECT * INTO r FROM reservations WHERE id = p_id AND chat_id = p_chat;
  IF FOUND THEN
    RETURN chargeonce_with_reservation(r);
  END IF;
  RETURN chargeonce_explain_missing(p_chat, p_id);
END $$;

CREATE FUNCTION chargeonce_heartbeat(p_chat bigint, p_id bigint,
                                     p_lease_ms bigint)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  r reservations;
BEGIN
  UPDATE reservations
    SET lease_expires_at = now() + p_lease_ms * interval '1 millisecond'
    WHERE id = p_id AND chat_id = p_chat AND status = 'in_progress'
    RETURNING * INTO r;
  IF FOUND THEN
    RETURN chargeonce_with_reservation(r);
  END IF;
  IF EXISTS (SELECT 1 FROM reservations WHERE id = p_id AND chat_id = p_chat) THEN
    RETURN chargeonce_refusal('invalid_state',
      chargeonce_describe(p_chat, p_id) || ' was never started');
  END IF;
  RETURN chargeonce_explain_missing(p_chat, p_id);
END $$;

-- Exactly the held amounts, never re-priced, clamped at zero; the ledger's
-- unique reservation_id makes a repeated commit return the first receipt.
CREATE FUNCTION chargeonce_commit(p_chat bigint, p_id bigint)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  c record;
  r reservations;
  l record;
  o chargeonce_outcome;
BEGIN
  SELECT pockets INTO c FROM chats WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  SELECT chat_id, kind, charged, committed_at INTO l
    FROM ledger WHERE reservation_id = p_id;
  IF NOT FOUND THEN
    SELECT * INTO r FROM reservations WHERE id = p_id FOR UPDATE;
    IF NOT FOUND OR r.chat_id <> p_chat THEN
      RETURN chargeonce_explain_missing(p_chat, p_id);
    END IF;
    IF r.status <> 'in_progress' THEN
      RETURN chargeonce_refusal('invalid_state',
        chargeonce_describe(p_chat, p_id) || ' was never started');
    END IF;
    UPDATE chats SET pockets = chargeonce_pockets_take(pockets, r.held)
      WHERE chat_id = p_chat;
    INSERT INTO ledger (reservation_id, chat_id, kind, charged)
      VALUES (p_id, p_chat, r.kind,
              chargeonce_pockets_charged(r.held, c.pockets))
      RETURNING chat_id, kind, charged, committed_at INTO l;
    DELETE FROM reservations WHERE id = p_id;
    PERFORM chargeonce_remember_end(r, 'committed');
  ELSIF l.chat_id <> p_chat THEN
    RETURN chargeonce_explain_missing(p_chat, p_id);
  END IF;
  o.outcome := 'ok';
  o.c_chat := l.chat_id;
  o.c_kind := l.kind;
  o.c_charged := l.charged;
  o.c_committed_us := chargeonce_us(l.committed_at);
  RETURN o;
END $$;

CREATE FUNCTION chargeonce_fail(p_chat bigint, p_id bigint)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  r reservations;
BEGIN
  DELETE FROM reservations WHERE id = p_id AND chat_id = p_chat RETURNING * INTO r;
  IF FOUND THEN
    PERFORM chargeonce_remember_end(r, 'failed');
    RETURN chargeonce_with_reservation(r);
  END IF;
  RETURN chargeonce_explain_missing(p_chat, p_id);
END $$;

-- Which job a cancel names: p_id, else the job of p_request_id, else the
-- chat's only active one. Conditional on status: a start that won the row
-- first leaves nothing to delete, and the cancel sees in_progress.
CREATE FUNCTION chargeonce_cancel(p_chat bigint, p_id bigint, p_request_id text)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  r reservations;
  o chargeonce_outcome;
  target bigint := p_id;
  active bigint;
  ids text;
BEGIN
  IF target = 0 AND p_request_id <> '' THEN
    o := chargeonce_find_request(p_chat, p_request_id);
    target := o.r_id;
    IF target IS NULL THEN
      IF NOT EXISTS (SELECT 1 FROM chats WHERE chat_id = p_chat) THEN
        RETURN chargeonce_refusal('not_found', 'unknown chat ' || p_chat);
      END IF;
      RETURN chargeonce_refusal('not_found',
        'chat ' || p_chat || ' has no job of request_id ' || p_request_id);
    END IF;
  ELSIF target = 0 THEN
    SELECT count(*), min(id), string_agg(id::text, ', ' ORDER BY created_at, id)
      INTO active, target, ids FROM reservations WHERE chat_id = p_chat;
    IF active > 1 THEN
      RETURN chargeonce_refusal('invalid_argument',
        'chat ' || p_chat || ' has ' || active || ' active reservations ('
        || ids || '): name the one to cancel');
    END IF;
    IF active = 0 THEN
      IF NOT EXISTS (SELECT 1 FROM chats WHERE chat_id = p_chat) THEN
        RETURN chargeonce_refusal('not_found', 'unknown chat ' || p_chat);
      END IF;
      RETURN chargeonce_refusal('not_found',
        'chat ' || p_chat || ' has no reservation');
    END IF;
  END IF;
  DELETE FROM reservations
   WHERE id = target AND chat_id = p_chat AND status = 'queued'
  RETURNING * INTO r;
  IF FOUND THEN
    PERFORM chargeonce_remember_end(r, 'cancelled');
    RETURN chargeonce_with_reservation(r);
  END IF;
  IF EXISTS (SELECT 1 FROM reservations WHERE id = target AND chat_id = p_chat) THEN
    RETURN chargeonce_refusal('too_late',
      chargeonce_describe(p_chat, target) || ' is already in progress');
  END IF;
  RETURN chargeonce_explain_missing(p_chat, target);
END $$;

CREATE FUNCTION chargeonce_status(p_chat bigint)
  RETURNS chargeonce_outcome LANGUAGE plpgsql STABLE AS $$
DECLARE
  c chats;
  r reservations;
  o chargeonce_outcome;
BEGIN
  SELECT * INTO c FROM chats WHERE chat_id = p_chat;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  -- Fenced (OFFSET 0): the chat's few rows by its index, then sorted; never
  -- the created_at index walked in order for the one chat.
  SELECT * INTO r
    FROM (SELECT * FROM reservations WHERE chat_id = p_chat OFFSET 0) x
   ORDER BY created_at, id LIMIT 1;
  IF FOUND THEN
    o := chargeonce_with_reservation(r);
  END IF;
  o.outcome := 'ok';
  o.s_pockets := c.pockets;
  o.s_premium_us := chargeonce_us(c.premium_until);
  o.s_premium := coalesce(c.premium_until > now(), false);
  o.s_started := c.started;
  o.s_blocked := c.blocked;
  o.s_banned := c.banned;
  o.s_window_us := chargeonce_us(c.window_started_at);
  o.s_activity_us := chargeonce_us(c.last_activity_at);
  o.s_max_jobs := c.max_active_jobs;
  o.s_reservations := chargeonce_reservations_json(p_chat);
  -- A status answer's window is the chat's (006_cancel_after_start.sql).
  o.window_number := c.window_number;
  RETURN o;
END $$;

-- A batch --------------------------------------------------------------------

CREATE FUNCTION chargeonce_apply_one(op text, chat bigint, id bigint,
                                     k text, request_id text, lease_ms bigint,
                                     free_max integer, premium_max integer,
                                     products jsonb)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
BEGIN
  CASE op
    WHEN 'reserve' THEN
      RETURN chargeonce_reserve(chat, k, request_id, free_max, premium_max,
                                products);
    WHEN 'start' THEN RETURN chargeonce_start(chat, id);
    WHEN 'heartbeat' THEN RETURN chargeonce_heartbeat(chat, id, lease_ms);
    WHEN 'commit' THEN RETURN chargeonce_commit(chat, id);
    WHEN 'fail' THEN RETURN chargeonce_fail(chat, id);
    WHEN 'cancel' THEN RETURN chargeonce_cancel(chat, id, request_id);
    WHEN 'status' THEN RETURN chargeonce_status(chat);
    ELSE RAISE EXCEPTION 'chargeonce_apply: unknown operation %', op;
  END CASE;
END $$;

-- One batch as parallel arrays (position i of each array is operation i);
-- 002_functions.sql's design, with the plans' job limits and the catalog as
-- parameters. Set-based: reserves that get a slot and can pay (one
-- INSERT), starts of queued reservations (one UPDATE), commits of started
-- ones (one DELETE with the pockets' UPDATE and the ledger's INSERT).
-- Everything else — replays, refusals, heartbeats, fails, cancels, status,
-- two operations of one chat — goes through the per-operation functions,
-- which give every refusal its answer.
CREATE FUNCTION chargeonce_apply_batch(
  b_ops text[], b_chats bigint[], b_ids bigint[], b_kinds text[],
  b_request_ids text[], lease_ms bigint, free_max integer,
  premium_max integer, products jsonb)
  RETURNS SETOF chargeonce_outcome LANGUAGE plpgsql
  SET enable_seqscan = off SET enable_mergejoin = off SET enable_hashjoin = off
  SET plan_cache_mode = force_generic_plan
  SET chargeonce.references_checked = 'on' AS $$
DECLARE
  v_lock_chats bigint[];
  v_reserve_chats bigint[];
  v_start_ids bigint[];
  v_commit_ids bigint[];
  distinct_chats bigint;
  answers chargeonce_outcome[] := '{}';
  part chargeonce_outcome[];
  answered integer[];
  x record;
  o chargeonce_outcome;
BEGIN
  IF cardinality(b_ops) IS NULL OR cardinality(b_ops) = 0 THEN
    RETURN;
  END IF;
  SELECT array_agg(u.chat) FILTER (WHERE u.op IN ('reserve', 'commit')),
         array_agg(u.chat) FILTER (WHERE u.op = 'reserve'),
         array_agg(u.id) FILTER (WHERE u.op = 'start'),
         array_agg(u.id) FILTER (WHERE u.op = 'commit'),
         count(DISTINCT u.chat)
    INTO v_lock_chats, v_reserve_chats, v_start_ids, v_commit_ids,
         distinct_chats
    FROM unnest(b_ops, b_chats, b_ids) AS u(op, chat, id);
  -- Two operations of one chat: their order matters, one by one.
  IF distinct_chats < cardinality(b_ops) THEN
    FOR x IN
      SELECT u.* FROM unnest(b_ops, b_chats, b_ids, b_kinds, b_request_ids)
                      WITH ORDINALITY
                      AS u(op, chat, id, k, request_id, n)
       ORDER BY u.n
    LOOP
      o := chargeonce_apply_one(x.op, x.chat, x.id, x.k, x.request_id,
                                lease_ms, free_max, premium_max, products);
      o.idx := x.n - 1;
      RETURN NEXT o;
    END LOOP;
    RETURN;
  END IF;

  -- The chat rows that reserves and commits read and write, in chat order,
  -- before anything else: concurrent batches wait for each other here
  -- instead of deadlocking. (A start writes only its reservation row.)
  IF v_lock_chats IS NOT NULL THEN
    PERFORM 1 FROM chats WHERE chat_id = ANY (v_lock_chats)
      ORDER BY chat_id FOR UPDATE;
  END IF;

  -- Reserves that chargeonce_reserve would grant: a kind of the catalog, a
  -- known chat, neither banned nor blocked, no job of the same request id,
  -- a request id where the limit is above 1, a free slot below the limit
  -- and a pocket with the price left after the other active holds. One
  -- INSERT for all of them; the UNIQUE (chat_id, slot) index stays the
  -- arbiter. The others are answered one by one below.
  IF v_reserve_chats IS NOT NULL THEN
    WITH req AS (
      SELECT u.n, u.chat, u.k, u.request_id, products -> u.k AS spec
        FROM unnest(b_ops, b_chats, b_kinds, b_request_ids) WITH ORDINALITY
             AS u(op, chat, k, request_id, n)
       WHERE u.op = 'reserve'),
    -- Materialized: each chat's decision is computed once, not once per
    -- place the planner would copy it to.
    seen AS MATERIALIZED (
      SELECT req.*, c.banned, c.blocked, c.premium,
             chargeonce_job_limit(c.max_active_jobs, c.premium, free_max,
                                  premium_max) AS job_limit,
             a.slots,
             chargeonce_choose(req.spec, c.premium, c.pockets, a.held) AS hold,
             (chargeonce_find_request(req.chat, req.request_id)).r_id
               AS replay
        FROM req
        JOIN LATERAL (SELECT c.*,
                             coalesce(c.premium_until > now(), false)
                               AS premium
                        FROM chats c
                       WHERE c.chat_id = req.chat OFFSET 0) c ON true
        CROSS JOIN LATERAL (
          SELECT chargeonce_pockets_sum(r.held) AS held,
                 coalesce(array_agg(r.slot), '{}') AS slots
            FROM reservations r WHERE r.chat_id = req.chat) a
       WHERE req.spec IS NOT NULL),
    granted AS (
      SELECT seen.*,
             (SELECT min(s) FROM generate_series(0, job_limit - 1) AS s
               WHERE s <> ALL (slots) AND cardinality(slots) < job_limit)
               AS free_slot
        FROM seen
       WHERE replay IS NULL AND NOT banned AND NOT blocked
         AND (job_limit = 1 OR request_id <> '') AND hold IS NOT NULL),
    inserted AS (
      INSERT INTO reservations (chat_id, kind, queue, held, request_id, slot)
      SELECT chat, k, chargeonce_queue(spec, premium), hold, request_id,
             free_slot
        FROM granted WHERE free_slot IS NOT NULL ORDER BY chat
      ON CONFLICT (chat_id, slot) DO NOTHING
      RETURNING *)
    SELECT array_agg(chargeonce_reservation_at(g.n::integer - 1,
                                               ROW(i.*)::reservations))
      INTO part
      FROM granted g JOIN inserted i ON i.chat_id = g.chat;
    answers := answers || coalesce(part, '{}');
  END IF;

  -- Starts of queued reservations in one UPDATE; the rest (a retried
  -- start, a refusal) go through chargeonce_start below.
  IF v_start_ids IS NOT NULL THEN
    WITH s AS (
      SELECT u.n, u.chat, u.id
        FROM unnest(b_ops, b_chats, b_ids) WITH ORDINALITY AS u(op, chat, id, n)
       WHERE u.op = 'start'),
    started AS (
      UPDATE reservations r SET status = 'in_progress', started_at = now()
        FROM s
       WHERE r.id = ANY (v_start_ids) AND r.id = s.id AND r.chat_id = s.chat
         AND r.status = 'queued'
      RETURNING s.n, r)
    SELECT array_agg(chargeonce_reservation_at(n::integer - 1, r))
      INTO part FROM started;
    answers := answers || coalesce(part, '{}');
  END IF;

  -- Commits of started reservations: exactly the held amounts, clamped at
  -- zero, one ledger row each (its unique reservation_id stays the guard),
  -- the reservation deleted and, with a request id, remembered as
  -- committed. A repeated commit (the ledger answers) or a refusal goes
  -- through chargeonce_commit below.
  IF v_commit_ids IS NOT NULL THEN
    WITH cm AS (
      SELECT u.n, u.chat, u.id
        FROM unnest(b_ops, b_chats, b_ids) WITH ORDINALITY AS u(op, chat, id, n)
       WHERE u.op = 'commit'),
    taken AS (
      DELETE FROM reservations r USING cm
       WHERE r.id = ANY (v_commit_ids) AND r.id = cm.id AND r.chat_id = cm.chat
         AND r.status = 'in_progress'
      RETURNING cm.n, r.id, r.chat_id, r.kind, r.held, r.queue, r.request_id,
                r.slot, r.created_at, r.lease_expires_at),
    -- What each commit takes (charged: each held amount, at most what its
    -- pocket has) and leaves (after: each pocket less it, stopping at
    -- zero), computed in the statement: the helper functions would run a
    -- query of their own per commit.
    before AS (
      SELECT t.*, c.ctid AS chat_row, m.charged, m.after
        FROM taken t
        JOIN LATERAL (SELECT ctid, * FROM chats c
                       WHERE c.chat_id = t.chat_id OFFSET 0) c ON true
        CROSS JOIN LATERAL (
          SELECT coalesce(jsonb_object_agg(e.key,
                   LEAST(e.value::integer, chargeonce_amount(c.pockets, e.key))),
                   '{}') AS charged,
                 c.pockets || coalesce(jsonb_object_agg(e.key,
                   GREATEST(0, chargeonce_amount(c.pockets, e.key)
                               - e.value::integer)), '{}') AS after
            FROM jsonb_each_text(t.held) AS e) m),
    paid AS (
      UPDATE chats c SET pockets = bf.after
        FROM before bf
       WHERE c.ctid = bf.chat_row),
    booked AS (
      INSERT INTO ledger (reservation_id, chat_id, kind, charged)
      SELECT id, chat_id, kind, charged FROM before ORDER BY chat_id),
    remembered AS (
      INSERT INTO ended_reservations (id, chat_id, kind, status, queue, held,
                                      request_id, slot, created_at,
                                      lease_expires_at)
      SELECT id, chat_id, kind, 'committed', queue, held, request_id, slot,
             created_at, lease_expires_at
        FROM taken WHERE request_id <> '')
    -- The receipts from what was inserted, not from its RETURNING: the
    -- ledger's committed_at defaults to now(), the transaction's time.
    SELECT array_agg(chargeonce_receipt_at(bf.n::integer - 1, bf.chat_id,
                       bf.kind, bf.charged, now()))
      INTO part
      FROM before bf;
    answers := answers || coalesce(part, '{}');
  END IF;

  RETURN QUERY SELECT * FROM unnest(answers);
  IF cardinality(answers) = cardinality(b_ops) THEN
    RETURN;
  END IF;

  -- Everything else, one by one in batch order (the caller sorted it by
  -- chat).
  answered := ARRAY(SELECT a.idx + 1 FROM unnest(answers) AS a);
  FOR x IN
    SELECT u.*
      FROM unnest(b_ops, b_chats, b_ids, b_kinds, b_request_ids) WITH ORDINALITY
           AS u(op, chat, id, k, request_id, n)
     WHERE u.n <> ALL (answered)
     ORDER BY u.n
  LOOP
    o := chargeonce_apply_one(x.op, x.chat, x.id, x.k, x.request_id, lease_ms,
                              free_max, premium_max, products);
    o.idx := x.n - 1;
    RETURN NEXT o;
  END LOOP;
END $$;
