-- A batch of one operation goes straight to chargeonce_apply_one, the
-- per-operation function the batch uses for whatever its set-based
-- statements do not answer: for one operation, the set-based statements
-- (array aggregates, materialized CTEs, several statements whatever the
-- batch holds) cost more to start than they save. pgbench, a reserve,
-- start and commit cycle on one connection (-M prepared, each statement
-- its own commit): 1.36-1.44 ms through the set-based path, 1.27-1.29 ms
-- through chargeonce_apply_one. The rest of the function is as in
-- 008_ledger_of_every_change.sql.

CREATE OR REPLACE FUNCTION chargeonce_apply_batch(
  b_ops text[], b_chats bigint[], b_ids bigint[], b_kinds text[],
  b_request_ids text[], b_units integer[], lease_ms bigint, free_max integer,
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
  -- One operation (a lone client, a quiet moment): the per-operation
  -- function, whose plain statements start faster than the set-based
  -- ones below, which pay off only for several operations.
  IF cardinality(b_ops) = 1 THEN
    o := chargeonce_apply_one(b_ops[1], b_chats[1], b_ids[1], b_kinds[1],
                              b_request_ids[1], b_units[1], lease_ms,
                              free_max, premium_max, products);
    o.idx := 0;
    RETURN NEXT o;
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
      SELECT u.* FROM unnest(b_ops, b_chats, b_ids, b_kinds, b_request_ids,
                             b_units)
                      WITH ORDINALITY
                      AS u(op, chat, id, k, request_id, units, n)
       ORDER BY u.n
    LOOP
      o := chargeonce_apply_one(x.op, x.chat, x.id, x.k, x.request_id,
                                x.units, lease_ms, free_max, premium_max,
                                products);
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
  -- and pockets with the price of its units (1 to 1,000,000) left after
  -- the other active holds. One
  -- INSERT for all of them; the UNIQUE (chat_id, slot) index stays the
  -- arbiter. The others are answered one by one below.
  IF v_reserve_chats IS NOT NULL THEN
    WITH req AS (
      SELECT u.n, u.chat, u.k, u.request_id, products -> u.k AS spec,
             coalesce(nullif(u.units, 0), 1) AS units
        FROM unnest(b_ops, b_chats, b_kinds, b_request_ids, b_units)
             WITH ORDINALITY AS u(op, chat, k, request_id, units, n)
       WHERE u.op = 'reserve'),
    -- Materialized: each chat's decision is computed once, not once per
    -- place the planner would copy it to.
    seen AS MATERIALIZED (
      SELECT req.*, c.banned, c.blocked, c.premium,
             chargeonce_job_limit(c.max_active_jobs, c.premium, free_max,
                                  premium_max) AS job_limit,
             a.slots,
             chargeonce_choose(req.spec, c.premium, c.pockets, a.held,
                               req.units) AS choice,
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
                 coalesce(array_agg(r.slot) FILTER (WHERE r.slot IS NOT NULL),
                          '{}') AS slots
            FROM (SELECT held, slot FROM reservations
                   WHERE chat_id = req.chat
                  UNION ALL
                  SELECT held, NULL FROM uncertain_reservations
                   WHERE chat_id = req.chat AND outcome IS NULL) r) a
       WHERE req.spec IS NOT NULL AND req.units BETWEEN 1 AND 1000000),
    granted AS (
      SELECT seen.*,
             (SELECT min(s) FROM generate_series(0, job_limit - 1) AS s
               WHERE s <> ALL (slots) AND cardinality(slots) < job_limit)
               AS free_slot
        FROM seen
       WHERE replay IS NULL AND NOT banned AND NOT blocked
         AND (job_limit = 1 OR request_id <> '') AND choice IS NOT NULL),
    inserted AS (
      INSERT INTO reservations (chat_id, kind, queue, held, request_id, slot,
                                units, held_units)
      SELECT chat, k, chargeonce_queue(spec, premium), choice -> 'held',
             request_id, free_slot, units, choice -> 'units'
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

  -- Commits of started reservations: exactly the held amounts (of the
  -- units named, at most the hold's), clamped at zero, one ledger row each with the pockets after it (its unique
  -- reservation_id stays the guard),
  -- the reservation deleted and, with a request id, remembered as
  -- committed. A repeated commit (the ledger answers) or a refusal goes
  -- through chargeonce_commit below.
  IF v_commit_ids IS NOT NULL THEN
    WITH cm AS (
      SELECT u.n, u.chat, u.id, coalesce(u.units, 0) AS units
        FROM unnest(b_ops, b_chats, b_ids, b_units) WITH ORDINALITY
             AS u(op, chat, id, units, n)
       WHERE u.op = 'commit'),
    taken AS (
      DELETE FROM reservations r USING cm
       WHERE r.id = ANY (v_commit_ids) AND r.id = cm.id AND r.chat_id = cm.chat
         AND r.status = 'in_progress' AND cm.units BETWEEN 0 AND r.units
      RETURNING cm.n, r.id, r.chat_id, r.kind, r.held, r.queue, r.request_id,
                r.slot, r.created_at, r.lease_expires_at, r.units,
                r.held_units, cm.units AS units_named),
    -- What each commit takes (charged: each amount of its units, at most
    -- what its pocket has) and leaves (after: each pocket less it, stopping
    -- at zero), computed in the statement: the helper functions would run
    -- a query of their own per commit. Only a commit of fewer units than
    -- held runs chargeonce_captured and releases something.
    before AS (
      SELECT t.*, c.ctid AS chat_row, m.charged, m.after,
             CASE WHEN p.partial THEN t.units_named ELSE t.units END
               AS units_charged,
             CASE WHEN p.partial
                  THEN chargeonce_pockets_less(t.held, p.nominal)
                  ELSE '{}'::jsonb END AS released
        FROM taken t
        JOIN LATERAL (SELECT ctid, * FROM chats c
                       WHERE c.chat_id = t.chat_id OFFSET 0) c ON true
        CROSS JOIN LATERAL (
          SELECT t.units_named BETWEEN 1 AND t.units - 1 AS partial,
                 CASE WHEN t.units_named BETWEEN 1 AND t.units - 1
                      THEN chargeonce_captured(t.held, t.held_units, t.units,
                                               t.units_named)
                      ELSE t.held END AS nominal) p
        CROSS JOIN LATERAL (
          SELECT coalesce(jsonb_object_agg(e.key,
                   LEAST(e.value::integer, chargeonce_amount(c.pockets, e.key))),
                   '{}') AS charged,
                 c.pockets || coalesce(jsonb_object_agg(e.key,
                   GREATEST(0, chargeonce_amount(c.pockets, e.key)
                               - e.value::integer)), '{}') AS after
            FROM jsonb_each_text(p.nominal) AS e) m),
    paid AS (
      UPDATE chats c SET pockets = bf.after
        FROM before bf
       WHERE c.ctid = bf.chat_row),
    booked AS (
      INSERT INTO ledger (reservation_id, chat_id, kind, charged, units,
                          released, pockets)
      SELECT id, chat_id, kind, charged, units_charged, released, after
        FROM before ORDER BY chat_id),
    remembered AS (
      INSERT INTO ended_reservations (id, chat_id, kind, status, queue, held,
                                      request_id, slot, created_at,
                                      lease_expires_at, units, held_units)
      SELECT id, chat_id, kind, 'committed', queue, held, request_id, slot,
             created_at, lease_expires_at, units, held_units
        FROM taken WHERE request_id <> '')
    -- The receipts from what was inserted, not from its RETURNING: the
    -- ledger's committed_at defaults to now(), the transaction's time.
    SELECT array_agg(chargeonce_receipt_at(bf.n::integer - 1, bf.chat_id,
                       bf.kind, bf.charged, now(),
                       bf.units_charged, bf.released))
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
      FROM unnest(b_ops, b_chats, b_ids, b_kinds, b_request_ids, b_units)
           WITH ORDINALITY AS u(op, chat, id, k, request_id, units, n)
     WHERE u.n <> ALL (answered)
     ORDER BY u.n
  LOOP
    o := chargeonce_apply_one(x.op, x.chat, x.id, x.k, x.request_id, x.units,
                              lease_ms, free_max, premium_max, products);
    o.idx := x.n - 1;
    RETURN NEXT o;
  END LOOP;
END $$;
