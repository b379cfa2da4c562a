-- The hot billing operations as server-side functions, so that one statement
-- (one round trip, one commit) applies a whole batch of operations of
-- different chats. Same rules as the per-statement code in store.cpp: the
-- chat row's lock around check-and-hold, the UNIQUE (chat_id) index as the
-- busy decision, GREATEST(0, ...) on every subtraction, the ledger's unique
-- reservation_id. A refusal (busy, insufficient, not_found, ...) is a row
-- with its outcome, never an exception, so it never fails its neighbours.

CREATE TYPE chargeonce_outcome AS (
  idx            integer,  -- position in the batch
  outcome        text,     -- 'ok' or an error name of protocol/errors.hpp
  message        text,
  -- the reservation (reserve, start, heartbeat, fail, cancel; status: active)
  r_id           bigint,
  r_chat         bigint,
  r_kind         text,
  r_status       text,
  r_queue        text,
  r_held_m       integer,
  r_held_i       integer,
  r_held_b       integer,
  r_request_id   text,
  r_created_us   bigint,
  r_lease_us     bigint,
  -- the receipt (commit)
  c_chat         bigint,
  c_kind         text,
  c_m            integer,
  c_i            integer,
  c_b            integer,
  c_committed_us bigint,
  -- the chat (status)
  s_m            integer,
  s_i            integer,
  s_b            integer,
  s_premium_us   bigint,
  s_premium      boolean,
  s_started      boolean,
  s_blocked      boolean,
  s_banned       boolean,
  s_window_us    bigint,
  s_activity_us  bigint
);

CREATE FUNCTION chargeonce_us(t timestamptz) RETURNS bigint
  LANGUAGE sql STABLE AS $$ SELECT (extract(epoch FROM t) * 1000000)::bigint $$;

CREATE FUNCTION chargeonce_refusal(code text, msg text) RETURNS chargeonce_outcome
  LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  o chargeonce_outcome;
BEGIN
  o.outcome := code;
  o.message := msg;
  RETURN o;
END $$;

CREATE FUNCTION chargeonce_with_reservation(r reservations) RETURNS chargeonce_outcome
  LANGUAGE plpgsql STABLE AS $$
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
  RETURN o;
END $$;

CREATE FUNCTION chargeonce_describe(p_chat bigint, p_id bigint) RETURNS text
  LANGUAGE sql IMMUTABLE AS $$ SELECT 'reservation ' || p_id || ' of chat ' || p_chat $$;

-- Why reservation p_id is not an active reservation of p_chat (store.cpp's
-- explain_missing): another chat's, committed, released (fencing), or gone.
CREATE FUNCTION chargeonce_explain_missing(p_chat bigint, p_id bigint)
  RETURNS chargeonce_outcome LANGUAGE plpgsql STABLE AS $$
DECLARE
  owner bigint;
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
  IF NOT EXISTS (SELECT 1 FROM chats WHERE chat_id = p_chat) THEN
    RETURN chargeonce_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  RETURN chargeonce_refusal('not_found', chargeonce_describe(p_chat, p_id) || ' is gone');
END $$;

-- Lock, decide, hold: protocol/pockets.cpp's choose_pockets, under the row
-- lock. Busy is decided by the UNIQUE (chat_id) index itself (ON CONFLICT
-- names it as the arbiter), so no other error can pass for busy and no
-- subtransaction is needed.
CREATE FUNCTION chargeonce_reserve(p_chat bigint, p_kind text, p_request_id text)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  c record;
  r reservations;
  held_m integer := 0;
  held_i integer := 0;
  held_b integer := 0;
  q text;
BEGIN
  SELECT daily_messages, daily_images, balance,
         coalesce(premium_until > now(), false) AS premium, blocked, banned
    INTO c FROM chats WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  -- A retry of the same request gets its reservation back (a replay, never
  -- the busy decision, which stays with the index).
  SELECT * INTO r FROM reservations WHERE chat_id = p_chat;
  IF FOUND AND p_request_id <> '' AND r.request_id = p_request_id
     AND r.kind = p_kind THEN
    RETURN chargeonce_with_reservation(r);
  END IF;
  IF c.banned THEN
    RETURN chargeonce_refusal('chat_banned', 'chat ' || p_chat || ' is banned');
  END IF;
  IF c.blocked THEN
    RETURN chargeonce_refusal('chat_blocked', 'chat ' || p_chat || ' is blocked');
  END IF;
  q := p_kind || '_generation' || CASE WHEN c.premium THEN '_priority' ELSE '' END;
  IF p_kind = 'text' THEN
    IF NOT c.premium THEN
      IF c.daily_messages <= 0 THEN
        RETURN chargeonce_refusal('insufficient_messages',
          'chat ' || p_chat || ' cannot pay for text');
      END IF;
      held_m := 1;
    END IF;
  ELSIF c.daily_images > 0 THEN
    held_i := 1;
  ELSIF c.balance > 0 THEN
    held_b := 1;
  ELSE
    RETURN chargeonce_refusal('insufficient_images',
      'chat ' || p_chat || ' cannot pay for image');
  END IF;
  INSERT INTO reservations (chat_id, kind, queue, held_daily_messages,
                            held_daily_images, held_balance, request_id)
    VALUES (p_chat, p_kind, q, held_m, held_i, held_b, p_request_id)
    ON CONFLICT (chat_id) DO NOTHING
    RETURNING * INTO r;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('busy', 'chat ' || p_chat || ' has an active reservation');
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
  SELECT * INTO r FROM reservations WHERE chat_id = p_chat;
  IF FOUND AND r.id = p_id THEN
    RETURN chargeonce_with_reservation(r);
  END IF;
  RETURN chargeonce_explain_missing(p_chat, p_id);
END $$;

CREATE FUNCTION chargeonce_heartbeat(p_chat bigint, p_id bigint, p_lease_ms bigint)
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
  SELECT * INTO r FROM reservations WHERE chat_id = p_chat;
  IF FOUND AND r.id = p_id THEN
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

CREATE FUNCTION chargeonce_fail(p_chat bigint, p_id bigint)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  r reservations;
BEGIN
  DELETE FROM reservations WHERE id = p_id AND chat_id = p_chat RETURNING * INTO r;
  IF FOUND THEN
    RETURN chargeonce_with_reservation(r);
  END IF;
  RETURN chargeonce_explain_missing(p_chat, p_id);
END $$;

-- Conditional on status: a start that won the row first leaves nothing to
-- delete, and the cancel sees in_progress.
CREATE FUNCTION chargeonce_cancel(p_chat bigint)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  r reservations;
BEGIN
  DELETE FROM reservations WHERE chat_id = p_chat AND status = 'queued'
    RETURNING * INTO r;
  IF FOUND THEN
    RETURN chargeonce_with_reservation(r);
  END IF;
  SELECT * INTO r FROM reservations WHERE chat_id = p_chat;
  IF FOUND THEN
    RETURN chargeonce_refusal('too_late',
      chargeonce_describe(p_chat, r.id) || ' is already in progress');
  END IF;
  IF NOT EXISTS (SELECT 1 FROM chats WHERE chat_id = p_chat) THEN
    RETURN chargeonce_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  RETURN chargeonce_refusal('not_found', 'chat ' || p_chat || ' has no reservation');
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
  SELECT * INTO r FROM reservations WHERE chat_id = p_chat;
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
  RETURN o;
END $$;

-- One batch: [{"op": "reserve", "chat": 1, "kind": "text", "request_id": ""},
-- {"op": "commit", "chat": 2, "id": 17}, ...], applied in array order (the
-- caller sorts by chat, so concurrent batches lock rows in one order).
CREATE FUNCTION chargeonce_apply(ops jsonb, lease_ms bigint)
  RETURNS SETOF chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  x jsonb;
  i bigint;
  o chargeonce_outcome;
  chat bigint;
  id bigint;
BEGIN
  FOR x, i IN SELECT e, n FROM jsonb_array_elements(ops) WITH ORDINALITY AS t(e, n) LOOP
    chat := (x->>'chat')::bigint;
    id := (x->>'id')::bigint;
    CASE x->>'op'
      WHEN 'reserve' THEN o := chargeonce_reserve(chat, x->>'kind', x->>'request_id');
      WHEN 'start' THEN o := chargeonce_start(chat, id);
      WHEN 'heartbeat' THEN o := chargeonce_heartbeat(chat, id, lease_ms);
      WHEN 'commit' THEN o := chargeonce_commit(chat, id);
      WHEN 'fail' THEN o := chargeonce_fail(chat, id);
      WHEN 'cancel' THEN o := chargeonce_cancel(chat);
      WHEN 'status' THEN o := chargeonce_status(chat);
      ELSE RAISE EXCEPTION 'chargeonce_apply: unknown operation %', x->>'op';
    END CASE;
    o.idx := i - 1;
    RETURN NEXT o;
  END LOOP;
END $$;
