-- SPDX-License-Identifier: Apache-2.0
-- The batch: one round trip for many operations, set-based where it can be,
-- one by one through chargeonce_apply_one where it must.
--
-- The live body of every function here: migrate() applies the function
-- files after the versioned migrations, in one transaction, when they
-- changed (persistence/migrations.hpp).

CREATE OR REPLACE FUNCTION chargeonce_apply_one(op text, chat bigint, id bigint,
                                                k text, request_id text,
                                                units integer, lease_ms bigint,
                                                free_max integer,
                                                premium_max integer,
                                                products jsonb)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  refused chargeonce_outcome;
BEGIN
  -- A worker's operation carries the worker's identity where a reserve or
  -- a cancel carries its request id (chargeonce_claim).
  IF op IN ('start', 'heartbeat', 'commit', 'fail') THEN
    refused := chargeonce_claim(op, chat, id, request_id);
    IF refused.outcome IS NOT NULL THEN
      RETURN refused;
    END IF;
  END IF;
  CASE op
    WHEN 'reserve' THEN
      RETURN chargeonce_reserve(chat, k, request_id, units, free_max,
                                premium_max, products);
    WHEN 'start' THEN RETURN chargeonce_start(chat, id);
    WHEN 'heartbeat' THEN RETURN chargeonce_heartbeat(chat, id, lease_ms);
    WHEN 'commit' THEN RETURN chargeonce_commit(chat, id, units);
    WHEN 'fail' THEN RETURN chargeonce_fail(chat, id);
    WHEN 'cancel' THEN
      RETURN chargeonce_cancel(chat, id, request_id, products);
    WHEN 'status' THEN RETURN chargeonce_status(chat);
    ELSE RAISE EXCEPTION 'chargeonce_apply: unknown operation %', op;
  END CASE;
END $$;

-- A whole batch in one statement. A batch of one operation goes straight
-- to chargeonce_apply_one: for one operation, the set-based statements
-- (array aggregates, materialized CTEs, several statements whatever the
-- batch holds) cost more to start than they save (pgbench, a reserve,
-- start and commit cycle on one connection, -M prepared: 1.36-1.44 ms
-- set-based, 1.27-1.29 ms through chargeonce_apply_one). Each operation carries its kind's first two ways to pay
-- (b_pay1/b_price1, b_pay2/b_price2: ordinal and price, 0 where the kind
-- has fewer), so that the set-based reserve decides with element reads
-- instead of walking the catalog's jsonb. And the set-based statements
-- take only the common case: a reserve of one unit that one of those two
-- pockets pays (or a premium-free kind for a premium chat), a commit of
-- a whole hold on one pocket (or on none). Every other operation (several
-- units, a third way to pay, a partial commit, a hold on several pockets,
-- every refusal) goes through chargeonce_apply_one after them, which
-- decides it in full.
CREATE OR REPLACE FUNCTION chargeonce_apply_batch(
  b_ops text[], b_chats bigint[], b_ids bigint[], b_kinds text[],
  b_request_ids text[], b_units integer[], b_pay1 integer[],
  b_price1 integer[], b_pay2 integer[], b_price2 integer[], lease_ms bigint,
  free_max integer, premium_max integer, products jsonb)
  RETURNS SETOF chargeonce_outcome LANGUAGE plpgsql
  SET enable_seqscan = off SET enable_mergejoin = off SET enable_hashjoin = off
  SET plan_cache_mode = force_generic_plan
  SET chargeonce.references_checked = 'on' AS $$
DECLARE
  v_lock_chats bigint[];
  v_reserve_chats bigint[];
  v_start_ids bigint[];
  v_commit_ids bigint[];
  v_due_chats bigint[];
  -- balance_low: the server's threshold, and whether any reserve of the
  -- batch may cross one (the server's, or a chat's own)
  v_low integer;
  v_low_on boolean := false;
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
  -- Those with a grant due to expire are noted: their reserves and commits
  -- go one by one below, each expiring it first, as every writer does.
  -- Whether one has a balance_low threshold of its own is noted too: with
  -- none and none of the server's, the reserves below skip the check.
  IF v_lock_chats IS NOT NULL THEN
    SELECT array_agg(l.chat_id) FILTER (WHERE l.next_expiry <= now()),
           coalesce(bool_or(l.balance_low_threshold IS NOT NULL), false)
      INTO v_due_chats, v_low_on
      FROM (SELECT chat_id, next_expiry, balance_low_threshold FROM chats
             WHERE chat_id = ANY (v_lock_chats)
             ORDER BY chat_id FOR UPDATE) l;
  END IF;

  -- Reserves of one unit that chargeonce_reserve would grant from the
  -- kind's first or second pocket (or for nothing: a premium-free kind, a
  -- premium chat): a kind of the catalog, a known chat, neither banned nor
  -- blocked, no job of the same request id, a request id where the limit
  -- is above 1, a free slot below the limit and the pocket's price left
  -- after the other active holds. One INSERT for all of them; the UNIQUE
  -- (chat_id, slot) index stays the arbiter. The others are answered one
  -- by one below.
  IF v_reserve_chats IS NOT NULL THEN
    -- As chargeonce_low_threshold has it (functions/10_events.sql).
    v_low := coalesce(nullif(current_setting(
                               'chargeonce.balance_low_threshold', true),
                             '')::integer,
                      0);
    v_low_on := v_low_on OR v_low > 0;
    WITH req AS (
      SELECT u.n, u.chat, u.k, u.request_id, products -> u.k AS spec,
             u.p1, u.c1, u.p2, u.c2
        FROM unnest(b_ops, b_chats, b_kinds, b_request_ids, b_units, b_pay1,
                    b_price1, b_pay2, b_price2)
             WITH ORDINALITY
             AS u(op, chat, k, request_id, units, p1, c1, p2, c2, n)
       WHERE u.op = 'reserve' AND coalesce(nullif(u.units, 0), 1) = 1),
    -- Materialized: each chat's decision is computed once, not once per
    -- place the planner would copy it to.
    seen AS MATERIALIZED (
      SELECT req.*, c.banned, c.blocked, c.premium,
             c.window_number AS chat_window,
             coalesce(c.next_expiry <= now(), false) AS expiry_due,
             c.sole_grant, c.balance_low_threshold AS own_low,
             coalesce(c.pockets[3], 0) AS balance,
             chargeonce_job_limit(c.max_active_jobs, c.premium, free_max,
                                  premium_max) AS job_limit,
             a.slots, a.held1, a.held2,
             CASE WHEN c.premium AND (req.spec ->> 'free')::boolean THEN 0
                  WHEN req.p1 > 0
                   AND coalesce(c.pockets[req.p1], 0) - a.held1 >= req.c1
                    THEN 1
                  WHEN req.p2 > 0
                   AND coalesce(c.pockets[req.p2], 0) - a.held2 >= req.c2
                    THEN 2 END AS choice,
             (chargeonce_find_request(req.chat, req.request_id)).r_id
               AS replay
        FROM req
        JOIN LATERAL (SELECT c.*,
                             coalesce(c.premium_until > now(), false)
                               AS premium
                        FROM chats c
                       WHERE c.chat_id = req.chat OFFSET 0) c ON true
        CROSS JOIN LATERAL (
          SELECT coalesce(sum(r.now_held[req.p1]), 0) AS held1,
                 coalesce(sum(r.now_held[req.p2]), 0) AS held2,
                 coalesce(array_agg(r.slot) FILTER (WHERE r.slot IS NOT NULL),
                          '{}') AS slots
            FROM (SELECT chargeonce_in_window(held, window_number,
                                              c.window_number) AS now_held,
                         slot
                    FROM reservations WHERE chat_id = req.chat
                  UNION ALL
                  SELECT chargeonce_in_window(held, window_number,
                                              c.window_number),
                         NULL
                    FROM uncertain_reservations
                   WHERE chat_id = req.chat AND outcome IS NULL) r) a
       WHERE req.spec IS NOT NULL),
    granted AS (
      SELECT seen.*,
             (SELECT min(s) FROM generate_series(0, job_limit - 1) AS s
               WHERE s <> ALL (slots) AND cardinality(slots) < job_limit)
               AS free_slot
        FROM seen
       WHERE replay IS NULL AND NOT banned AND NOT blocked
         AND (job_limit = 1
              OR (request_id <> '' AND request_id NOT LIKE 'auto:%'))
         AND choice IS NOT NULL AND NOT expiry_due),
    -- A hold on balance records the grants it holds: the same split as
    -- chargeonce_reserve's. Materialized: the insert reads two fields of
    -- the split, which would otherwise run it twice per reserve.
    split AS MATERIALIZED (
      SELECT granted.*,
             CASE WHEN choice = 1 AND p1 = 3
                    THEN chargeonce_hold_grants(chat, c1, sole_grant)
                  WHEN choice = 2 AND p2 = 3
                    THEN chargeonce_hold_grants(chat, c2, sole_grant)
                  ELSE ROW('{}', '{}')::chargeonce_grant_hold END AS hold
        FROM granted WHERE free_slot IS NOT NULL),
    inserted AS (
      INSERT INTO reservations (chat_id, kind, queue, held, request_id, slot,
                                units, held_units, window_number,
                                held_grants, held_grant_credits)
      SELECT chat, k, chargeonce_queue(spec, premium),
             CASE choice WHEN 0 THEN '{}'
                         WHEN 1 THEN array_fill(NULL::integer, ARRAY[p1 - 1])
                                     || c1
                         ELSE array_fill(NULL::integer, ARRAY[p2 - 1]) || c2
             END,
             request_id, free_slot, 1,
             CASE choice WHEN 0 THEN '{}'
                         ELSE array_fill(NULL::integer,
                                         ARRAY[CASE choice WHEN 1 THEN p1
                                                           ELSE p2 END - 1])
                              || 1
             END,
             chat_window, (hold).grant_ids, (hold).credits
        FROM split ORDER BY chat
      ON CONFLICT (chat_id, slot) DO NOTHING
      RETURNING *),
    -- balance_low for a hold on balance that takes the available balance
    -- (balance less the other holds' balance part) below the chat's
    -- threshold, as chargeonce_reserve decides it (chargeonce_note_balance).
    -- With no threshold anywhere, v_low_on is false: a one-time filter,
    -- nothing read, nothing written.
    fell AS (
      SELECT s.chat, s.low, s.available, s.available - s.price AS after
        FROM (SELECT chat, coalesce(own_low, v_low) AS low,
                     balance - CASE choice WHEN 1 THEN held1 ELSE held2 END
                       AS available,
                     CASE choice WHEN 1 THEN c1 ELSE c2 END AS price
                FROM split
               WHERE v_low_on
                 AND ((choice = 1 AND p1 = 3) OR (choice = 2 AND p2 = 3))) s
       WHERE s.low > 0 AND s.available >= s.low
         AND s.available - s.price < s.low),
    low AS (
      INSERT INTO events (event, chat_id, reservation_id, detail, credits,
                          threshold)
      SELECT 'balance_low', f.chat, i.id, 'reserve', f.after, f.low
        FROM fell f JOIN inserted i ON i.chat_id = f.chat
       ORDER BY f.chat)
    SELECT array_agg(chargeonce_reservation_at(g.n::integer - 1,
                                               ROW(i.*)::reservations))
      INTO part
      FROM granted g JOIN inserted i ON i.chat_id = g.chat;
    answers := answers || coalesce(part, '{}');
  END IF;

  -- Starts of queued reservations in one UPDATE, each recording the worker
  -- it names (b_request_ids carries a worker's identity); the rest (a
  -- retried start, a refusal) go through chargeonce_apply_one below.
  IF v_start_ids IS NOT NULL THEN
    WITH s AS (
      SELECT u.n, u.chat, u.id, coalesce(u.worker, '') AS worker
        FROM unnest(b_ops, b_chats, b_ids, b_request_ids) WITH ORDINALITY
             AS u(op, chat, id, worker, n)
       WHERE u.op = 'start'),
    started AS (
      UPDATE reservations r SET status = 'in_progress', started_at = now(),
                                worker = s.worker
        FROM s
       WHERE r.id = ANY (v_start_ids) AND r.id = s.id AND r.chat_id = s.chat
         AND r.status = 'queued'
      RETURNING s.n, r)
    SELECT array_agg(chargeonce_reservation_at(n::integer - 1, r))
      INTO part FROM started;
    answers := answers || coalesce(part, '{}');
  END IF;

  -- Commits of the whole hold of a started reservation that holds on one
  -- pocket (its last pocket pays all its units) or on none: the held amount,
  -- clamped at zero, one ledger row each with the pockets after it (its
  -- unique reservation_id stays the guard), the reservation deleted and,
  -- with a request id, remembered as committed. A repeated commit (the
  -- ledger answers), a partial one, a hold on several pockets or a refusal
  -- goes through chargeonce_commit below.
  IF v_commit_ids IS NOT NULL THEN
    WITH cm AS (
      SELECT u.n, u.chat, u.id, coalesce(u.units, 0) AS units,
             coalesce(u.worker, '') AS worker
        FROM unnest(b_ops, b_chats, b_ids, b_units, b_request_ids)
             WITH ORDINALITY AS u(op, chat, id, units, worker, n)
       WHERE u.op = 'commit'),
    taken AS (
      DELETE FROM reservations r USING cm
       WHERE r.id = ANY (v_commit_ids) AND r.id = cm.id AND r.chat_id = cm.chat
         AND r.status = 'in_progress' AND cm.units IN (0, r.units)
         AND (cm.worker = '' OR cm.worker = r.worker)
         AND (cardinality(r.held) = 0
              OR r.held_units[cardinality(r.held_units)] = r.units)
         AND (coalesce(r.held[3], 0) = 0 OR cardinality(r.held_grants) > 0)
         AND r.chat_id <> ALL (coalesce(v_due_chats, '{}'))
      RETURNING cm.n, r.id, r.chat_id, r.kind, r.held, r.queue, r.request_id,
                r.slot, r.created_at, r.lease_expires_at, r.units,
                r.held_units, r.window_number, cardinality(r.held) AS p,
                r.held_grants, r.held_grant_credits),
    -- A whole commit of a hold on balance charges each grant its part
    -- (chargeonce_settle_hold with nothing left over).
    -- No two parts name one grant: the batch's chats are distinct, a
    -- grant is its chat's, and a hold names each grant once.
    grants_charged AS (
      UPDATE grants g SET charged = g.charged + h.credits
        FROM taken t, unnest(t.held_grants, t.held_grant_credits)
                        AS h(grant_id, credits)
       WHERE g.grant_id = h.grant_id),
    -- A hold on a daily pocket of a past window (its pocket is not in
    -- the hold's part in this window) is charged whole and takes
    -- nothing: its own window's unit paid.
    window_part AS (
      SELECT t.*, c.ctid AS chat_row, c.pockets AS pockets_before,
             t.p > 0 AND (chargeonce_in_window(t.held, t.window_number,
                                               c.window_number))[t.p]
                         IS NULL AS past
        FROM taken t
        JOIN LATERAL (SELECT ctid, * FROM chats c
                       WHERE c.chat_id = t.chat_id OFFSET 0) c ON true),
    before AS (
      SELECT w.*,
             CASE WHEN w.p = 0 THEN '{}'::integer[]
                  WHEN w.past THEN array_fill(NULL::integer, ARRAY[w.p - 1])
                                   || w.held[w.p]
                  ELSE array_fill(NULL::integer, ARRAY[w.p - 1])
                       || LEAST(w.held[w.p], coalesce(w.pockets_before[w.p], 0))
             END AS charged,
             CASE WHEN w.p = 0 OR w.past THEN w.pockets_before
                  ELSE chargeonce_pockets_set(w.pockets_before, w.p,
                         GREATEST(0, coalesce(w.pockets_before[w.p], 0)
                                     - w.held[w.p]))
             END AS after
        FROM window_part w),
    paid AS (
      UPDATE chats c SET pockets = bf.after
        FROM before bf
       WHERE c.ctid = bf.chat_row),
    booked AS (
      INSERT INTO ledger (reservation_id, chat_id, kind, charged, units,
                          released, pockets, changed, window_number,
                          grant_ids, grant_credits)
      SELECT id, chat_id, kind, charged, units, '{}', after,
             CASE WHEN coalesce(after[p], 0)
                       = coalesce(pockets_before[p], 0) THEN '{}'::integer[]
                  ELSE array_fill(NULL::integer, ARRAY[p - 1])
                       || coalesce(after[p], 0)
                          - coalesce(pockets_before[p], 0) END,
             window_number, held_grants, held_grant_credits
        FROM before ORDER BY chat_id),
    remembered AS (
      INSERT INTO ended_reservations (id, chat_id, kind, status, queue, held,
                                      request_id, slot, created_at,
                                      lease_expires_at, units, held_units,
                                      window_number)
      SELECT id, chat_id, kind, 'committed', queue, held, request_id, slot,
             created_at, lease_expires_at, units, held_units, window_number
        FROM taken WHERE request_id <> '')
    -- The receipts from what was inserted, not from its RETURNING: the
    -- ledger's committed_at defaults to now(), the transaction's time.
    SELECT array_agg(chargeonce_receipt_at(bf.n::integer - 1, bf.chat_id,
                       bf.kind, bf.charged, now(), bf.units, '{}',
                       bf.window_number))
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
