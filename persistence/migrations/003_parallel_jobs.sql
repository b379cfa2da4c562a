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

-- The answer row -------------------------------------------------------------

ALTER TYPE chargeonce_outcome
  ADD ATTRIBUTE r_slot integer,
  ADD ATTRIBUTE r_ended_us bigint,
  -- status: the chat's own limit (NULL: the plan's) and every active
  -- reservation, oldest first, as a JSON array
  ADD ATTRIBUTE s_max_jobs integer,
  ADD ATTRIBUTE s_reservations text;

CREATE OR REPLACE FUNCTION chargeonce_with_reservation(r reservations)
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
  o.r_held_m := r.held_daily_messages;
  o.r_held_i := r.held_daily_images;
  o.r_held_b := r.held_balance;
  o.r_request_id := r.request_id;
  o.r_created_us := chargeonce_us(r.created_at);
  o.r_lease_us := chargeonce_us(r.lease_expires_at);
  o.r_slot := r.slot;
  RETURN o;
END $$;

CREATE OR REPLACE FUNCTION chargeonce_reservation_at(i integer, r reservations)
  RETURNS chargeonce_outcome LANGUAGE sql STABLE AS $$
  SELECT ROW(i, 'ok', NULL, r.id, r.chat_id, r.kind, r.status, r.queue,
             r.held_daily_messages, r.held_daily_images, r.held_balance,
             r.request_id, chargeonce_us(r.created_at),
             chargeonce_us(r.lease_expires_at),
             NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, r.slot, NULL, NULL, NULL)::chargeonce_outcome
$$;

CREATE OR REPLACE FUNCTION chargeonce_refusal_at(i integer, code text, msg text)
  RETURNS chargeonce_outcome LANGUAGE sql IMMUTABLE AS $$
  SELECT ROW(i, code, msg, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL)::chargeonce_outcome
$$;

CREATE OR REPLACE FUNCTION chargeonce_receipt_at(i integer, chat bigint, k text,
                                                 m integer, im integer,
                                                 b integer, at timestamptz)
  RETURNS chargeonce_outcome LANGUAGE sql STABLE AS $$
  SELECT ROW(i, 'ok', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, chat, k, m, im, b, chargeonce_us(at),
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL)::chargeonce_outcome
$$;

-- Ending a reservation -------------------------------------------------------

-- PL/pgSQL, not SQL, for the helpers that run a query: Postgres 15 plans a
-- SQL function's query again on every call of the statement that calls it
-- (about 0.4 ms for find_request, on every reserve), while PL/pgSQL keeps
-- its plans for the session.

-- Remembers `r` as ended with `how`, if it has a request id; called in the
-- transaction that deletes it.
CREATE FUNCTION chargeonce_remember_end(r reservations, how text)
  RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF r.request_id = '' THEN
    RETURN;
  END IF;
  INSERT INTO ended_reservations (id, chat_id, kind, status, queue,
                                  held_daily_messages, held_daily_images,
                                  held_balance, request_id, slot, created_at,
                                  lease_expires_at)
    VALUES (r.id, r.chat_id, r.kind, how, r.queue, r.held_daily_messages,
            r.held_daily_images, r.held_balance, r.request_id, r.slot,
            r.created_at, r.lease_expires_at);
END $$;

-- The job request_id names in p_chat, active or ended, in one statement: a
-- job that ends meanwhile is seen on one side, never on neither (fail,
-- cancel and release do not take the chat's lock). NULL when none.
CREATE FUNCTION chargeonce_find_request(p_chat bigint, p_request_id text)
  RETURNS chargeonce_outcome LANGUAGE plpgsql STABLE AS $$
DECLARE
  o chargeonce_outcome;
BEGIN
  IF p_request_id = '' THEN
    RETURN NULL;
  END IF;
  -- Column by column: a composite target takes one column per attribute.
  SELECT NULL, 'ok', NULL, x.id, x.chat_id, x.kind, x.status, x.queue,
         x.held_daily_messages, x.held_daily_images, x.held_balance,
         x.request_id, chargeonce_us(x.created_at),
         chargeonce_us(x.lease_expires_at),
         NULL, NULL, NULL, NULL, NULL, NULL,
         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
         NULL, x.slot, chargeonce_us(x.ended_at), NULL, NULL
    INTO o
    FROM (SELECT id, chat_id, kind, status, queue, held_daily_messages,
                 held_daily_images, held_balance, request_id, created_at,
                 lease_expires_at, slot, NULL::timestamptz AS ended_at
            FROM reservations
           WHERE chat_id = p_chat AND request_id = p_request_id
          UNION ALL
          SELECT id, chat_id, kind, status, queue, held_daily_messages,
                 held_daily_images, held_balance, request_id, created_at,
                 lease_expires_at, slot, ended_at
            FROM ended_reservations
           WHERE chat_id = p_chat AND request_id = p_request_id) x
   LIMIT 1;
  RETURN o;
END $$;

-- The chat's active reservations, oldest first, as a JSON array (status).
CREATE FUNCTION chargeonce_reservations_json(p_chat bigint)
  RETURNS text LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (SELECT coalesce(json_agg(json_build_object(
           'id', id, 'chat', chat_id, 'kind', kind, 'status', status,
           'queue', queue, 'held_m', held_daily_messages,
           'held_i', held_daily_images, 'held_b', held_balance,
           'request_id', request_id, 'created_us', chargeonce_us(created_at),
           'lease_us', chargeonce_us(lease_expires_at), 'slot', slot)
           ORDER BY created_at, id)::text, '[]')
    FROM reservations WHERE chat_id = p_chat);
END $$;

-- Why reservation p_id is not an active reservation of p_chat: another
-- chat's, committed, released (fencing), failed or cancelled, or gone.
CREATE OR REPLACE FUNCTION chargeonce_explain_missing(p_chat bigint, p_id bigint)
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

DROP FUNCTION chargeonce_apply_batch(text[], bigint[], bigint[], text[],
                                     text[], bigint);
DROP FUNCTION chargeonce_apply_one(text, bigint, bigint, text, text, bigint);
DROP FUNCTION chargeonce_reserve(bigint, text, text);
DROP FUNCTION chargeonce_cancel(bigint);

-- The limit of a chat: its own, else its plan's.
CREATE FUNCTION chargeonce_job_limit(own integer, premium boolean,
                                     free_max integer, premium_max integer)
  RETURNS integer LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(own, CASE WHEN premium THEN premium_max ELSE free_max END)
$$;

CREATE FUNCTION chargeonce_busy_message(p_chat bigint, active bigint,
                                        job_limit integer)
  RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT 'chat ' || p_chat || ' has ' || active || ' of ' || job_limit
         || ' jobs active'
$$;

-- Lock, decide, hold: protocol/pockets.cpp's choose_pockets on what the
-- pockets have left after the other active holds, under the row lock. The
-- slot is the lowest one free below the chat's limit; the UNIQUE
-- (chat_id, slot) index is the lock (ON CONFLICT names it as the arbiter),
-- so no error can pass for busy and no subtransaction is needed.
CREATE FUNCTION chargeonce_reserve(p_chat bigint, p_kind text,
                                   p_request_id text, p_free_max integer,
                                   p_premium_max integer)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  c record;
  a record;
  r reservations;
  o chargeonce_outcome;
  job_limit integer;
  free_slot integer;
  held_m integer := 0;
  held_i integer := 0;
  held_b integer := 0;
  q text;
BEGIN
  SELECT daily_messages, daily_images, balance, max_active_jobs,
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
  SELECT count(*) AS n,
         coalesce(sum(held_daily_messages), 0) AS m,
         coalesce(sum(held_daily_images), 0) AS i,
         coalesce(sum(held_balance), 0) AS b,
         coalesce(array_agg(slot), '{}') AS slots
    INTO a FROM reservations WHERE chat_id = p_chat;
  -- A lowered limit leaves slots above it taken: the count decides too.
  SELECT min(s) INTO free_slot FROM generate_series(0, job_limit - 1) AS s
   WHERE s <> ALL (a.slots) AND a.n < job_limit;
  IF free_slot IS NULL THEN
    RETURN chargeonce_refusal('busy',
      chargeonce_busy_message(p_chat, a.n, job_limit));
  END IF;
  q := p_kind || '_generation' || CASE WHEN c.premium THEN '_priority' ELSE '' END;
  IF p_kind = 'text' THEN
    IF NOT c.premium THEN
      IF c.daily_messages - a.m <= 0 THEN
        RETURN chargeonce_refusal('insufficient_messages',
          'chat ' || p_chat || ' cannot pay for text');
      END IF;
      held_m := 1;
    END IF;
  ELSIF c.daily_images - a.i > 0 THEN
    held_i := 1;
  ELSIF c.balance - a.b > 0 THEN
    held_b := 1;
  ELSE
    RETURN chargeonce_refusal('insufficient_images',
      'chat ' || p_chat || ' cannot pay for image');
  END IF;
  INSERT INTO reservations (chat_id, kind, queue, held_daily_messages,
                            held_daily_images, held_balance, request_id, slot)
    VALUES (p_chat, p_kind, q, held_m, held_i, held_b, p_request_id, free_slot)
    ON CONFLICT (chat_id, slot) DO NOTHING
    RETURNING * INTO r;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('busy',
      chargeonce_busy_message(p_chat, a.n + 1, job_limit));
  END IF;
  RETURN chargeonce_with_reservation(r);
END $$;

CREATE OR REPLACE FUNCTION chargeonce_start(p_chat bigint, p_id bigint)
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

CREATE OR REPLACE FUNCTION chargeonce_heartbeat(p_chat bigint, p_id bigint,
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
CREATE OR REPLACE FUNCTION chargeonce_commit(p_chat bigint, p_id bigint)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  c record;
  r reservations;
  l record;
  o chargeonce_outcome;
BEGIN
  SELECT daily_messages, daily_images, balance INTO c
    FROM chats WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  SELECT chat_id, kind, charged_daily_messages AS m, charged_daily_images AS i,
         charged_balance AS b, committed_at INTO l
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
    UPDATE chats SET
        daily_messages = GREATEST(0, daily_messages - r.held_daily_messages),
        daily_images = GREATEST(0, daily_images - r.held_daily_images),
        balance = GREATEST(0, balance - r.held_balance)
      WHERE chat_id = p_chat;
    INSERT INTO ledger (reservation_id, chat_id, kind, charged_daily_messages,
                        charged_daily_images, charged_balance)
      VALUES (p_id, p_chat, r.kind,
              LEAST(r.held_daily_messages, c.daily_messages),
              LEAST(r.held_daily_images, c.daily_images),
              LEAST(r.held_balance, c.balance))
      RETURNING chat_id, kind, charged_daily_messages AS m,
                charged_daily_images AS i, charged_balance AS b, committed_at
      INTO l;
    DELETE FROM reservations WHERE id = p_id;
    PERFORM chargeonce_remember_end(r, 'committed');
  ELSIF l.chat_id <> p_chat THEN
    RETURN chargeonce_explain_missing(p_chat, p_id);
  END IF;
  o.outcome := 'ok';
  o.c_chat := l.chat_id;
  o.c_kind := l.kind;
  o.c_m := l.m;
  o.c_i := l.i;
  o.c_b := l.b;
  o.c_committed_us := chargeonce_us(l.committed_at);
  RETURN o;
END $$;

CREATE OR REPLACE FUNCTION chargeonce_fail(p_chat bigint, p_id bigint)
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

CREATE OR REPLACE FUNCTION chargeonce_status(p_chat bigint)
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
  o.s_m := c.daily_messages;
  o.s_i := c.daily_images;
  o.s_b := c.balance;
  o.s_premium_us := chargeonce_us(c.premium_until);
  o.s_premium := coalesce(c.premium_until > now(), false);
  o.s_started := c.started;
  o.s_blocked := c.blocked;
  o.s_banned := c.banned;
  o.s_window_us := chargeonce_us(c.window_started_at);
  o.s_activity_us := chargeonce_us(c.last_activity_at);
  o.s_max_jobs := c.max_active_jobs;
  o.s_reservations := chargeonce_reservations_json(p_chat);
  RETURN o;
END $$;

-- A batch --------------------------------------------------------------------

CREATE FUNCTION chargeonce_apply_one(op text, chat bigint, id bigint,
                                     k text, request_id text, lease_ms bigint,
                                     free_max integer, premium_max integer)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
BEGIN
  CASE op
    WHEN 'reserve' THEN
      RETURN chargeonce_reserve(chat, k, request_id, free_max, premium_max);
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
-- 002_functions.sql's design, with the plans' job limits as parameters.
-- Set-based: reserves that get a slot and can pay (one INSERT), starts of
-- queued reservations (one UPDATE), commits of started ones (one DELETE
-- with the pockets' UPDATE and the ledger's INSERT). Everything else —
-- replays, refusals, heartbeats, fails, cancels, status, two operations of
-- one chat — goes through the per-operation functions, which give every
-- refusal its answer.
CREATE FUNCTION chargeonce_apply_batch(
  b_ops text[], b_chats bigint[], b_ids bigint[], b_kinds text[],
  b_request_ids text[], lease_ms bigint, free_max integer,
  premium_max integer)
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
                                lease_ms, free_max, premium_max);
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

  -- Reserves that chargeonce_reserve would grant: a known chat, neither
  -- banned nor blocked, no job of the same request id, a request id where
  -- the limit is above 1, a free slot below the limit and a pocket with
  -- something left after the other active holds. One INSERT for all of
  -- them; the UNIQUE (chat_id, slot) index stays the arbiter. The others
  -- are answered one by one below.
  IF v_reserve_chats IS NOT NULL THEN
    WITH req AS (
      SELECT u.n, u.chat, u.k, u.request_id
        FROM unnest(b_ops, b_chats, b_kinds, b_request_ids) WITH ORDINALITY
             AS u(op, chat, k, request_id, n)
       WHERE u.op = 'reserve'),
    seen AS (
      SELECT req.*, c.banned, c.blocked, c.daily_messages - a.m AS left_m,
             c.daily_images - a.i AS left_i, c.balance - a.b AS left_b,
             c.premium,
             chargeonce_job_limit(c.max_active_jobs, c.premium, free_max,
                                  premium_max) AS job_limit,
             a.slots,
             (chargeonce_find_request(req.chat, req.request_id)).r_id
               AS replay
        FROM req
        JOIN LATERAL (SELECT c.*,
                             coalesce(c.premium_until > now(), false)
                               AS premium
                        FROM chats c
                       WHERE c.chat_id = req.chat OFFSET 0) c ON true
        CROSS JOIN LATERAL (
          SELECT coalesce(sum(r.held_daily_messages), 0) AS m,
                 coalesce(sum(r.held_daily_images), 0) AS i,
                 coalesce(sum(r.held_balance), 0) AS b,
                 coalesce(array_agg(r.slot), '{}') AS slots
            FROM reservations r WHERE r.chat_id = req.chat) a),
    granted AS (
      SELECT seen.*,
             (SELECT min(s) FROM generate_series(0, job_limit - 1) AS s
               WHERE s <> ALL (slots) AND cardinality(slots) < job_limit)
               AS free_slot
        FROM seen
       WHERE replay IS NULL AND NOT banned AND NOT blocked
         AND (job_limit = 1 OR request_id <> '')
         AND CASE WHEN k = 'text' THEN premium OR left_m > 0
                  ELSE left_i > 0 OR left_b > 0 END),
    inserted AS (
      INSERT INTO reservations (chat_id, kind, queue, held_daily_messages,
                                held_daily_images, held_balance, request_id,
                                slot)
      SELECT chat, k,
             k || '_generation' || CASE WHEN premium THEN '_priority' ELSE '' END,
             CASE WHEN k = 'text' AND NOT premium THEN 1 ELSE 0 END,
             CASE WHEN k <> 'text' AND left_i > 0 THEN 1 ELSE 0 END,
             CASE WHEN k <> 'text' AND left_i <= 0 THEN 1 ELSE 0 END,
             request_id, free_slot
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
      RETURNING cm.n, r.id, r.chat_id, r.kind, r.held_daily_messages AS hm,
                r.held_daily_images AS hi, r.held_balance AS hb, r.queue,
                r.request_id, r.slot, r.created_at, r.lease_expires_at),
    before AS (
      SELECT t.*, c.ctid AS chat_row, c.daily_messages AS m,
             c.daily_images AS i, c.balance AS bal
        FROM taken t
        JOIN LATERAL (SELECT ctid, * FROM chats c
                       WHERE c.chat_id = t.chat_id OFFSET 0) c ON true),
    charged AS (
      UPDATE chats c
         SET daily_messages = GREATEST(0, c.daily_messages - bf.hm),
             daily_images = GREATEST(0, c.daily_images - bf.hi),
             balance = GREATEST(0, c.balance - bf.hb)
        FROM before bf
       WHERE c.ctid = bf.chat_row),
    booked AS (
      INSERT INTO ledger (reservation_id, chat_id, kind, charged_daily_messages,
                          charged_daily_images, charged_balance)
      SELECT id, chat_id, kind, LEAST(hm, m), LEAST(hi, i), LEAST(hb, bal)
        FROM before ORDER BY chat_id),
    remembered AS (
      INSERT INTO ended_reservations (id, chat_id, kind, status, queue,
                                      held_daily_messages, held_daily_images,
                                      held_balance, request_id, slot,
                                      created_at, lease_expires_at)
      SELECT id, chat_id, kind, 'committed', queue, hm, hi, hb, request_id,
             slot, created_at, lease_expires_at
        FROM taken WHERE request_id <> '')
    -- The receipts from what was inserted, not from its RETURNING: the
    -- ledger's committed_at defaults to now(), the transaction's time.
    SELECT array_agg(chargeonce_receipt_at(bf.n::integer - 1, bf.chat_id,
                       bf.kind, LEAST(bf.hm, bf.m), LEAST(bf.hi, bf.i),
                       LEAST(bf.hb, bf.bal), now()))
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
                              free_max, premium_max);
    o.idx := x.n - 1;
    RETURN NEXT o;
  END LOOP;
END $$;
