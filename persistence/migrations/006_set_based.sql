-- Set-based batches: the reserves, starts and commits of a batch each run as
-- one statement over the whole batch instead of one statement per operation,
-- which pays executor start-up, CHECK-constraint and PL/pgSQL costs once per
-- batch. Same decisions as the per-operation functions of 004_functions.sql,
-- which still answer everything else: replays, refusals, heartbeats, fails,
-- cancels, status, and batches holding two operations of one chat (there,
-- order matters, so they run one by one in batch order).

-- The previous chargeonce_apply, under the name of what it does.
CREATE FUNCTION chargeonce_apply_each(ops jsonb, lease_ms bigint)
  RETURNS SETOF chargeonce_outcome LANGUAGE plpgsql
  SET enable_seqscan = off AS $$
DECLARE
  x jsonb;
  i bigint;
  o chargeonce_outcome;
BEGIN
  FOR x, i IN SELECT e, n FROM jsonb_array_elements(ops) WITH ORDINALITY AS t(e, n) LOOP
    o := chargeonce_apply_one(x->>'op', (x->>'chat')::bigint,
                              (x->>'id')::bigint, x->>'kind',
                              x->>'request_id', lease_ms);
    o.idx := i - 1;
    RETURN NEXT o;
  END LOOP;
END $$;

CREATE FUNCTION chargeonce_apply_one(op text, chat bigint, id bigint,
                                     k text, request_id text, lease_ms bigint)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
BEGIN
  CASE op
    WHEN 'reserve' THEN RETURN chargeonce_reserve(chat, k, request_id);
    WHEN 'start' THEN RETURN chargeonce_start(chat, id);
    WHEN 'heartbeat' THEN RETURN chargeonce_heartbeat(chat, id, lease_ms);
    WHEN 'commit' THEN RETURN chargeonce_commit(chat, id);
    WHEN 'fail' THEN RETURN chargeonce_fail(chat, id);
    WHEN 'cancel' THEN RETURN chargeonce_cancel(chat);
    WHEN 'status' THEN RETURN chargeonce_status(chat);
    ELSE RAISE EXCEPTION 'chargeonce_apply: unknown operation %', op;
  END CASE;
END $$;

-- The batch as parallel arrays; n is the 1-based position.
CREATE TYPE chargeonce_batch AS (
  op         text[],
  chat       bigint[],
  id         bigint[],
  k          text[],
  request_id text[]
);

CREATE OR REPLACE FUNCTION chargeonce_apply(ops jsonb, lease_ms bigint)
  RETURNS SETOF chargeonce_outcome LANGUAGE plpgsql
  SET enable_seqscan = off AS $$
DECLARE
  b chargeonce_batch;
  distinct_chats integer;
  answered integer[] := '{}';
  x record;
  o chargeonce_outcome;
BEGIN
  SELECT array_agg(e->>'op' ORDER BY n), array_agg((e->>'chat')::bigint ORDER BY n),
         array_agg(coalesce((e->>'id')::bigint, 0) ORDER BY n),
         array_agg(coalesce(e->>'kind', '') ORDER BY n),
         array_agg(coalesce(e->>'request_id', '') ORDER BY n),
         count(DISTINCT (e->>'chat')::bigint)
    INTO b.op, b.chat, b.id, b.k, b.request_id, distinct_chats
    FROM jsonb_array_elements(ops) WITH ORDINALITY AS t(e, n);
  IF b.op IS NULL THEN
    RETURN;
  END IF;
  IF distinct_chats < cardinality(b.op) THEN
    RETURN QUERY SELECT * FROM chargeonce_apply_each(ops, lease_ms);
    RETURN;
  END IF;

  -- Every chat row this batch may write, in chat order, before anything
  -- else: concurrent batches (other connections, other servers) wait for
  -- each other here and never deadlock later on reservation rows.
  PERFORM 1 FROM chats
    WHERE chat_id IN (SELECT u.chat FROM unnest(b.op, b.chat) AS u(op, chat)
                       WHERE u.op <> 'status')
    ORDER BY chat_id FOR UPDATE;

  -- Each section runs only if the batch holds its kind of operation.
  -- Reserves: chargeonce_reserve's checks in its order (unknown, replay,
  -- banned, blocked, insufficient), then one INSERT for all that passed;
  -- the UNIQUE (chat_id) index, as ON CONFLICT arbiter, decides busy.
  IF 'reserve' = ANY (b.op) THEN
    FOR x IN
      WITH req AS (
        SELECT u.n, u.chat, u.k, u.request_id
          FROM unnest(b.op, b.chat, b.k, b.request_id) WITH ORDINALITY
               AS u(op, chat, k, request_id, n)
         WHERE u.op = 'reserve'),
      seen AS (
        SELECT req.*, c.chat_id IS NOT NULL AS known, c.banned, c.blocked,
               c.daily_messages, c.daily_images, c.balance,
               coalesce(c.premium_until > now(), false) AS premium, r AS existing
          FROM req
          LEFT JOIN chats c ON c.chat_id = req.chat
          LEFT JOIN reservations r ON r.chat_id = req.chat),
      decided AS (
        SELECT seen.*,
               CASE
                 WHEN NOT known THEN 'not_found'
                 WHEN (existing).id IS NOT NULL AND request_id <> ''
                      AND (existing).request_id = request_id
                      AND (existing).kind = k THEN 'replay'
                 WHEN banned THEN 'chat_banned'
                 WHEN blocked THEN 'chat_blocked'
                 WHEN k = 'text' AND NOT premium AND daily_messages <= 0
                   THEN 'insufficient_messages'
                 WHEN k <> 'text' AND daily_images <= 0 AND balance <= 0
                   THEN 'insufficient_images'
               END AS decision
          FROM seen),
      inserted AS (
        INSERT INTO reservations (chat_id, kind, queue, held_daily_messages,
                                  held_daily_images, held_balance, request_id)
        SELECT chat, k,
               k || '_generation' || CASE WHEN premium THEN '_priority' ELSE '' END,
               CASE WHEN k = 'text' AND NOT premium THEN 1 ELSE 0 END,
               CASE WHEN k <> 'text' AND daily_images > 0 THEN 1 ELSE 0 END,
               CASE WHEN k <> 'text' AND daily_images <= 0 THEN 1 ELSE 0 END,
               request_id
          FROM decided WHERE decision IS NULL ORDER BY chat
        ON CONFLICT (chat_id) DO NOTHING
        RETURNING *)
      SELECT d.n, d.chat, d.k, d.decision, d.existing, i.id AS made_id,
             ROW(i.*)::reservations AS made
        FROM decided d LEFT JOIN inserted i ON i.chat_id = d.chat
    LOOP
      o := CASE
        WHEN x.decision = 'replay' THEN chargeonce_with_reservation(x.existing)
        WHEN x.decision = 'not_found'
          THEN chargeonce_refusal('not_found', 'unknown chat ' || x.chat)
        WHEN x.decision = 'chat_banned'
          THEN chargeonce_refusal('chat_banned', 'chat ' || x.chat || ' is banned')
        WHEN x.decision = 'chat_blocked'
          THEN chargeonce_refusal('chat_blocked', 'chat ' || x.chat || ' is blocked')
        WHEN x.decision IS NOT NULL
          THEN chargeonce_refusal(x.decision,
                 'chat ' || x.chat || ' cannot pay for ' || x.k)
        WHEN x.made_id IS NULL
          THEN chargeonce_refusal('busy',
                 'chat ' || x.chat || ' has an active reservation')
        ELSE chargeonce_with_reservation(x.made)
      END;
      o.idx := x.n - 1;
      answered := answered || x.n::integer;
      RETURN NEXT o;
    END LOOP;
  END IF;

  -- Starts of queued reservations in one UPDATE; the rest (a retried
  -- start, a refusal) go through chargeonce_start below.
  IF 'start' = ANY (b.op) THEN
    FOR x IN
      WITH s AS (
        SELECT u.n, u.chat, u.id
          FROM unnest(b.op, b.chat, b.id) WITH ORDINALITY AS u(op, chat, id, n)
         WHERE u.op = 'start'),
      started AS (
        UPDATE reservations r SET status = 'in_progress', started_at = now()
          FROM s
         WHERE r.id = s.id AND r.chat_id = s.chat AND r.status = 'queued'
        RETURNING s.n, r)
      SELECT * FROM started
    LOOP
      o := chargeonce_with_reservation(x.r);
      o.idx := x.n - 1;
      answered := answered || x.n::integer;
      RETURN NEXT o;
    END LOOP;
  END IF;

  -- Commits of started reservations: exactly the held amounts, clamped at
  -- zero, one ledger row each (its unique reservation_id stays the guard),
  -- the reservation deleted; all in three statements' worth of one query.
  -- A repeated commit (the ledger answers) or a refusal goes through
  -- chargeonce_commit below.
  IF 'commit' = ANY (b.op) THEN
    FOR x IN
      WITH cm AS (
        SELECT u.n, u.chat, u.id
          FROM unnest(b.op, b.chat, b.id) WITH ORDINALITY AS u(op, chat, id, n)
         WHERE u.op = 'commit'),
      taken AS (
        DELETE FROM reservations r USING cm
         WHERE r.id = cm.id AND r.chat_id = cm.chat AND r.status = 'in_progress'
        RETURNING cm.n, r.id, r.chat_id, r.kind, r.held_daily_messages AS hm,
                  r.held_daily_images AS hi, r.held_balance AS hb),
      before AS (
        SELECT t.*, c.daily_messages AS m, c.daily_images AS i, c.balance AS bal
          FROM taken t JOIN chats c ON c.chat_id = t.chat_id),
      charged AS (
        UPDATE chats c
           SET daily_messages = GREATEST(0, c.daily_messages - bf.hm),
               daily_images = GREATEST(0, c.daily_images - bf.hi),
               balance = GREATEST(0, c.balance - bf.hb)
          FROM before bf
         WHERE c.chat_id = bf.chat_id),
      booked AS (
        INSERT INTO ledger (reservation_id, chat_id, kind, charged_daily_messages,
                            charged_daily_images, charged_balance)
        SELECT id, chat_id, kind, LEAST(hm, m), LEAST(hi, i), LEAST(hb, bal)
          FROM before ORDER BY chat_id
        RETURNING reservation_id, chat_id, kind, charged_daily_messages,
                  charged_daily_images, charged_balance, committed_at)
      SELECT bf.n, l.*
        FROM booked l JOIN before bf ON bf.id = l.reservation_id
    LOOP
      o := NULL;
      o.idx := x.n - 1;
      o.outcome := 'ok';
      o.c_chat := x.chat_id;
      o.c_kind := x.kind;
      o.c_m := x.charged_daily_messages;
      o.c_i := x.charged_daily_images;
      o.c_b := x.charged_balance;
      o.c_committed_us := chargeonce_us(x.committed_at);
      answered := answered || x.n::integer;
      RETURN NEXT o;
    END LOOP;
  END IF;

  -- Everything else, one by one in batch order (the caller sorted it by
  -- chat).
  IF cardinality(answered) = cardinality(b.op) THEN
    RETURN;
  END IF;
  FOR x IN
    SELECT u.*
      FROM unnest(b.op, b.chat, b.id, b.k, b.request_id) WITH ORDINALITY
           AS u(op, chat, id, k, request_id, n)
     WHERE u.n <> ALL (answered)
     ORDER BY u.n
  LOOP
    o := chargeonce_apply_one(x.op, x.chat, x.id, x.k, x.request_id, lease_ms);
    o.idx := x.n - 1;
    RETURN NEXT o;
  END LOOP;
END $$;
