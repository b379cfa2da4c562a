-- The set-based commit answered its receipts by joining the ledger rows it
-- inserted (RETURNING) back to the reservations they came from. A join of
-- two CTEs is a nested loop over both (hash and merge joins are off in
-- this function), n * n row comparisons for n commits, and RETURNING
-- stored every row once more. The receipt is known without it: the
-- charged amounts are the LEAST(held, available) that were inserted, and
-- committed_at is the ledger's default, now(). The ledger's unique
-- reservation_id still guards a second charge: a violation aborts the
-- statement and the batch is split. Measured with
-- `chargeonce-bench --persistence=11,32` (Postgres CPU per cycle), two
-- alternating pairs: 51.9-53.9 against 53.8-54.7 µs at 11 cycles per
-- statement, 36.4-37.2 against 38.1-39.0 at 32.
--
-- Otherwise the same function as 008_linear_batches.sql, with the
-- exemption from the reference triggers of 009_statement_references.sql
-- (CREATE OR REPLACE resets a function's SET clauses).

CREATE OR REPLACE FUNCTION chargeonce_apply_batch(
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

