-- The billing operations as server-side functions: one statement (one round
-- trip, one commit) applies a whole batch of operations of different chats.
-- Same rules as the per-statement code in store.cpp: the chat row's lock
-- around check-and-hold, the UNIQUE (chat_id) index as the busy decision,
-- GREATEST(0, ...) on every subtraction, the ledger's unique reservation_id.
-- A refusal (busy, insufficient, not_found, ...) is a row with its outcome,
-- never an exception, so it never fails its neighbours.
--
-- The server calls only chargeonce_apply_batch; it answers reserves, starts
-- and commits set-based and hands everything else to the per-operation
-- functions through chargeonce_apply_one.

-- One operation at a time ---------------------------------------------------

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

-- A batch --------------------------------------------------------------------

-- The operations chargeonce_apply_batch does not answer set-based: replays,
-- refusals, heartbeats, fails, cancels, status, and batches holding two
-- operations of one chat (there, order matters).
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

-- Answers built by inlinable SQL functions.
CREATE FUNCTION chargeonce_reservation_at(i integer, r reservations)
  RETURNS chargeonce_outcome LANGUAGE sql STABLE AS $$
  SELECT ROW(i, 'ok', NULL, r.id, r.chat_id, r.kind, r.status, r.queue,
             r.held_daily_messages, r.held_daily_images, r.held_balance,
             r.request_id, chargeonce_us(r.created_at),
             chargeonce_us(r.lease_expires_at),
             NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL)::chargeonce_outcome
$$;

CREATE FUNCTION chargeonce_refusal_at(i integer, code text, msg text)
  RETURNS chargeonce_outcome LANGUAGE sql IMMUTABLE AS $$
  SELECT ROW(i, code, msg, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL)::chargeonce_outcome
$$;

CREATE FUNCTION chargeonce_receipt_at(i integer, chat bigint, k text,
                                      m integer, im integer, b integer,
                                      at timestamptz)
  RETURNS chargeonce_outcome LANGUAGE sql STABLE AS $$
  SELECT ROW(i, 'ok', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, chat, k, m, im, b, chargeonce_us(at),
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL)::chargeonce_outcome
$$;

-- One batch as parallel arrays (position i of each array is operation i).
-- Ids and kinds that an operation does not use may be 0 and ''. Reserves,
-- starts and commits run as one statement per section; every lookup is an
-- index lookup on the row's own key (a LATERAL subquery fenced with OFFSET
-- 0), whatever the statistics said when the generic plan was cached, so a
-- batch costs lookups in proportion to its size.
-- SET options, for the call and every function it calls:
-- * enable_seqscan, enable_mergejoin, enable_hashjoin off: a plan cached
--   while a table looked empty must not walk a whole table or index once it
--   has grown;
-- * plan_cache_mode = force_generic_plan: no planning per batch;
-- * chargeonce.references_checked: every row it inserts names a chat it
--   locked and read, so the reference triggers of 001_schema skip the check.
CREATE FUNCTION chargeonce_apply_batch(
  b_ops text[], b_chats bigint[], b_ids bigint[], b_kinds text[],
  b_request_ids text[], lease_ms bigint)
  RETURNS SETOF chargeonce_outcome LANGUAGE plpgsql
  SET enable_seqscan = off SET enable_mergejoin = off SET enable_hashjoin = off
  SET plan_cache_mode = force_generic_plan
  SET chargeonce.references_checked = 'on' AS $$
DECLARE
  -- The keys each section may touch. Chats are locked by = ANY (one scan);
  -- starts and commits filter their reservation rows by them.
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
                                lease_ms);
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

  -- Reserves: chargeonce_reserve's checks in its order (unknown, replay,
  -- banned, blocked, insufficient), then one INSERT for all that passed;
  -- the UNIQUE (chat_id) index, as ON CONFLICT arbiter, decides busy.
  IF v_reserve_chats IS NOT NULL THEN
    WITH req AS (
      SELECT u.n, u.chat, u.k, u.request_id
        FROM unnest(b_ops, b_chats, b_kinds, b_request_ids) WITH ORDINALITY
             AS u(op, chat, k, request_id, n)
       WHERE u.op = 'reserve'),
    seen AS (
      SELECT req.*, c.chat_id IS NOT NULL AS known, c.banned, c.blocked,
             c.daily_messages, c.daily_images, c.balance,
             coalesce(c.premium_until > now(), false) AS premium,
             ex.r AS existing
        FROM req
        LEFT JOIN LATERAL (SELECT * FROM chats c
                            WHERE c.chat_id = req.chat OFFSET 0) c ON true
        LEFT JOIN LATERAL (SELECT r FROM reservations r
                            WHERE r.chat_id = req.chat OFFSET 0) ex ON true),
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
    SELECT array_agg(CASE
             WHEN d.decision = 'replay'
               THEN chargeonce_reservation_at(d.n::integer - 1, d.existing)
             WHEN d.decision = 'not_found'
               THEN chargeonce_refusal_at(d.n::integer - 1, 'not_found',
                                          'unknown chat ' || d.chat)
             WHEN d.decision = 'chat_banned'
               THEN chargeonce_refusal_at(d.n::integer - 1, 'chat_banned',
                                          'chat ' || d.chat || ' is banned')
             WHEN d.decision = 'chat_blocked'
               THEN chargeonce_refusal_at(d.n::integer - 1, 'chat_blocked',
                                          'chat ' || d.chat || ' is blocked')
             WHEN d.decision IS NOT NULL
               THEN chargeonce_refusal_at(d.n::integer - 1, d.decision,
                      'chat ' || d.chat || ' cannot pay for ' || d.k)
             WHEN i.id IS NULL
               THEN chargeonce_refusal_at(d.n::integer - 1, 'busy',
                      'chat ' || d.chat || ' has an active reservation')
             ELSE chargeonce_reservation_at(d.n::integer - 1,
                                            ROW(i.*)::reservations)
           END)
      INTO part
      FROM decided d LEFT JOIN inserted i ON i.chat_id = d.chat;
    answers := answers || part;
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
  -- the reservation deleted. A repeated commit (the ledger answers) or a
  -- refusal goes through chargeonce_commit below.
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
                r.held_daily_images AS hi, r.held_balance AS hb),
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
        FROM before ORDER BY chat_id)
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
    o := chargeonce_apply_one(x.op, x.chat, x.id, x.k, x.request_id, lease_ms);
    o.idx := x.n - 1;
    RETURN NEXT o;
  END LOOP;
END $$;

