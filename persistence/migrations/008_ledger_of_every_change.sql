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
--            opening (the row this migration writes for every chat).
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

-- What changed from `before` to `after`, per pocket, without zeros: the
-- `changed` of a refill or an admin row.
CREATE FUNCTION chargeonce_pockets_change(before jsonb, after jsonb)
  RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(jsonb_object_agg(k, d), '{}')
    FROM (SELECT k, chargeonce_amount(after, k) - chargeonce_amount(before, k)
                 AS d
            FROM (SELECT jsonb_object_keys(before) AS k
                  UNION SELECT jsonb_object_keys(after)) AS keys) AS x
   WHERE d <> 0
$$;

-- Every chat's chain opens with its pockets as they are now.
INSERT INTO ledger (entry, detail, chat_id, changed, pockets)
SELECT 'admin', 'opening', chat_id, chargeonce_pockets_change('{}', pockets),
       pockets
  FROM chats ORDER BY chat_id;

-- Commit, resolve and the batch write the pockets after the charge --------------

CREATE OR REPLACE FUNCTION chargeonce_commit(p_chat bigint, p_id bigint, p_units integer)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  c record;
  r reservations;
  l record;
  o chargeonce_outcome;
  nominal jsonb;
  after jsonb;
BEGIN
  SELECT pockets INTO c FROM chats WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  SELECT chat_id, kind, charged, committed_at, units, released INTO l
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
    IF coalesce(p_units, 0) NOT BETWEEN 0 AND r.units THEN
      RETURN chargeonce_refusal('invalid_argument',
        chargeonce_describe(p_chat, p_id) || ' holds ' || r.units
        || ' units: a commit of ' || p_units || ' units charges more');
    END IF;
    nominal := chargeonce_captured(r.held, r.held_units, r.units, p_units);
    UPDATE chats SET pockets = chargeonce_pockets_take(pockets, nominal)
      WHERE chat_id = p_chat RETURNING pockets INTO after;
    INSERT INTO ledger (reservation_id, chat_id, kind, charged, units,
                        released, pockets)
      VALUES (p_id, p_chat, r.kind,
              chargeonce_pockets_charged(nominal, c.pockets),
              coalesce(nullif(p_units, 0), r.units),
              chargeonce_pockets_less(r.held, nominal), after)
      RETURNING chat_id, kind, charged, committed_at, units, released INTO l;
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
  o.c_units := l.units;
  o.c_released := l.released;
  RETURN o;
END $$;

CREATE OR REPLACE FUNCTION chargeonce_resolve(p_chat bigint, p_id bigint,
                                   p_outcome text, p_units integer)
  RETURNS chargeonce_resolution LANGUAGE plpgsql AS $$
DECLARE
  c record;
  u uncertain_reservations;
  o chargeonce_outcome;
  nominal jsonb;
  after jsonb;
BEGIN
  IF p_outcome NOT IN ('succeeded', 'failed') THEN
    RETURN chargeonce_resolution_refusal('invalid_argument',
      'outcome must be succeeded or failed, not ' || p_outcome);
  END IF;
  SELECT pockets INTO c FROM chats WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_resolution_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  SELECT * INTO u FROM uncertain_reservations WHERE id = p_id FOR UPDATE;
  IF NOT FOUND OR u.chat_id <> p_chat THEN
    IF EXISTS (SELECT 1 FROM reservations WHERE id = p_id AND chat_id = p_chat) THEN
      RETURN chargeonce_resolution_refusal('invalid_state',
        chargeonce_describe(p_chat, p_id) || ' is not uncertain: commit or '
        || 'fail it');
    END IF;
    o := chargeonce_explain_missing(p_chat, p_id);
    RETURN chargeonce_resolution_refusal(o.outcome, o.message);
  END IF;
  IF u.outcome = 'released' THEN
    RETURN chargeonce_resolution_refusal('expired',
      chargeonce_describe(p_chat, p_id)
      || ' was released unresolved at reconcile-timeout');
  END IF;
  IF u.outcome IS NOT NULL THEN
    IF u.outcome <> p_outcome THEN
      RETURN chargeonce_resolution_refusal('invalid_state',
        chargeonce_describe(p_chat, p_id) || ' was already resolved '
        || u.outcome);
    END IF;
    RETURN chargeonce_resolution_of(u);
  END IF;
  IF p_outcome = 'failed' THEN
    UPDATE uncertain_reservations
       SET outcome = 'failed', resolved_at = now(), charged = '{}',
           released = held, units_charged = 0
     WHERE id = p_id RETURNING * INTO u;
    PERFORM chargeonce_remember_uncertain_end(u, 'failed');
    RETURN chargeonce_resolution_of(u);
  END IF;
  IF coalesce(p_units, 0) NOT BETWEEN 0 AND u.units THEN
    RETURN chargeonce_resolution_refusal('invalid_argument',
      chargeonce_describe(p_chat, p_id) || ' holds ' || u.units
      || ' units: a resolve of ' || p_units || ' units charges more');
  END IF;
  nominal := chargeonce_captured(u.held, u.held_units, u.units, p_units);
  UPDATE chats SET pockets = chargeonce_pockets_take(pockets, nominal)
   WHERE chat_id = p_chat RETURNING pockets INTO after;
  -- The ledger's unique reservation_id guards against a second charge.
  INSERT INTO ledger (reservation_id, chat_id, kind, charged, units, released,
                      pockets)
    VALUES (p_id, p_chat, u.kind,
            chargeonce_pockets_charged(nominal, c.pockets),
            coalesce(nullif(p_units, 0), u.units),
            chargeonce_pockets_less(u.held, nominal), after);
  UPDATE uncertain_reservations
     SET outcome = 'succeeded', resolved_at = now(),
         charged = chargeonce_pockets_charged(nominal, c.pockets),
         released = chargeonce_pockets_less(u.held, nominal),
         units_charged = coalesce(nullif(p_units, 0), u.units)
   WHERE id = p_id RETURNING * INTO u;
  PERFORM chargeonce_remember_uncertain_end(u, 'committed');
  RETURN chargeonce_resolution_of(u);
END $$;

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
