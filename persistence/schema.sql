--
-- PostgreSQL database dump
--



SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: chargeonce_choice; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.chargeonce_choice AS (
	held integer[],
	held_units integer[]
);


--
-- Name: chargeonce_grant_answer; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.chargeonce_grant_answer AS (
	outcome text,
	message text,
	grant_id bigint,
	chat_id bigint,
	source text,
	credits integer,
	left_credits integer,
	held integer,
	priority integer,
	expires_us bigint,
	expires_in_ms bigint,
	payment_id text,
	created_us bigint,
	expired_us bigint,
	voided_us bigint,
	committed_us bigint,
	ended text
);


--
-- Name: chargeonce_grant_hold; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.chargeonce_grant_hold AS (
	grant_ids bigint[],
	credits integer[]
);


--
-- Name: chargeonce_outcome; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.chargeonce_outcome AS (
	idx integer,
	outcome text,
	message text,
	r_id bigint,
	r_chat bigint,
	r_kind text,
	r_status text,
	r_queue text,
	r_held integer[],
	r_request_id text,
	r_created_us bigint,
	r_lease_us bigint,
	r_slot integer,
	r_ended_us bigint,
	c_chat bigint,
	c_kind text,
	c_charged integer[],
	c_committed_us bigint,
	s_pockets integer[],
	s_premium_us bigint,
	s_premium boolean,
	s_started boolean,
	s_blocked boolean,
	s_banned boolean,
	s_window_us bigint,
	s_activity_us bigint,
	s_max_jobs integer,
	s_reservations text,
	r_units integer,
	r_held_units integer[],
	c_units integer,
	c_released integer[],
	r_cancel_requested boolean,
	window_number bigint,
	s_grants text,
	s_low_threshold integer
);


--
-- Name: chargeonce_resolution; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.chargeonce_resolution AS (
	outcome text,
	message text,
	kind text,
	resolution text,
	charged integer[],
	released integer[],
	units integer,
	resolved_us bigint,
	provider_ref text,
	window_number bigint
);


--
-- Name: chargeonce_spending_key; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.chargeonce_spending_key AS (
	priority integer,
	never_expires boolean,
	expires_at timestamp with time zone,
	source_rank integer,
	created_at timestamp with time zone,
	grant_id bigint
);


--
-- Name: chargeonce_amount(integer[], text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_amount(p integer[], pocket text) RETURNS integer
    LANGUAGE sql STABLE
    AS $$
  SELECT coalesce(p[chargeonce_pocket(pocket)], 0)
$$;


--
-- Name: chargeonce_apply_batch(text[], bigint[], bigint[], text[], text[], integer[], integer[], integer[], integer[], integer[], bigint, integer, integer, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_apply_batch(b_ops text[], b_chats bigint[], b_ids bigint[], b_kinds text[], b_request_ids text[], b_units integer[], b_pay1 integer[], b_price1 integer[], b_pay2 integer[], b_price2 integer[], lease_ms bigint, free_max integer, premium_max integer, products jsonb) RETURNS SETOF public.chargeonce_outcome
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET enable_mergejoin TO 'off'
    SET enable_hashjoin TO 'off'
    SET plan_cache_mode TO 'force_generic_plan'
    SET "chargeonce.references_checked" TO 'on'
    AS $$
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


--
-- Name: chargeonce_apply_one(text, bigint, bigint, text, text, integer, bigint, integer, integer, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_apply_one(op text, chat bigint, id bigint, k text, request_id text, units integer, lease_ms bigint, free_max integer, premium_max integer, products jsonb) RETURNS public.chargeonce_outcome
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: chargeonce_balance_held(bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_balance_held(p_chat bigint) RETURNS integer
    LANGUAGE sql STABLE
    AS $$
  SELECT coalesce(sum(x.held), 0)::integer
    FROM (SELECT held[3] AS held FROM reservations WHERE chat_id = p_chat
          UNION ALL
          SELECT held[3] FROM uncertain_reservations
           WHERE chat_id = p_chat AND outcome IS NULL) x
$$;


--
-- Name: chargeonce_busy_message(bigint, bigint, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_busy_message(p_chat bigint, active bigint, job_limit integer) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
  SELECT 'chat ' || p_chat || ' has ' || active || ' of ' || job_limit
         || ' jobs active'
$$;


--
-- Name: chargeonce_cancel(bigint, bigint, text, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_cancel(p_chat bigint, p_id bigint, p_request_id text, p_products jsonb) RETURNS public.chargeonce_outcome
    LANGUAGE plpgsql
    AS $$
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
  IF EXISTS (SELECT 1 FROM reservations
              WHERE id = target AND chat_id = p_chat AND status = 'queued'
                AND cardinality(held_grants) > 0) THEN
    PERFORM chargeonce_lock_for_settle(p_chat);
  END IF;
  DELETE FROM reservations
   WHERE id = target AND chat_id = p_chat AND status = 'queued'
  RETURNING * INTO r;
  IF FOUND THEN
    PERFORM chargeonce_settle_hold(p_chat, r.held_grants,
                                   r.held_grant_credits, 0, r.id);
    PERFORM chargeonce_remember_end(r, 'cancelled');
    RETURN chargeonce_with_reservation(r);
  END IF;
  -- A repeated cancel writes the flag again and answers the same.
  UPDATE reservations SET cancel_requested = true
   WHERE id = target AND chat_id = p_chat AND status = 'in_progress'
     AND coalesce(p_products -> kind ->> 'cancel', 'refuse') = 'request'
  RETURNING * INTO r;
  IF FOUND THEN
    RETURN chargeonce_with_reservation(r);
  END IF;
  IF EXISTS (SELECT 1 FROM reservations WHERE id = target AND chat_id = p_chat) THEN
    RETURN chargeonce_refusal('too_late',
      chargeonce_describe(p_chat, target) || ' is already in progress');
  END IF;
  RETURN chargeonce_explain_missing(p_chat, target);
END $$;


--
-- Name: chargeonce_captured(integer[], integer[], integer, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_captured(held integer[], held_units integer[], held_total integer, units integer) RETURNS integer[]
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
  i integer;
  n integer;
  take integer;
  left_units integer := units;
  out integer[] := '{}';
BEGIN
  IF coalesce(units, 0) <= 0 OR units >= held_total THEN
    RETURN held;
  END IF;
  FOR i, n IN
    SELECT u.i, u.n
      FROM unnest(held_units) WITH ORDINALITY AS u(n, i)
      JOIN catalog_pockets c ON c.ordinal = u.i
     WHERE u.n IS NOT NULL
     ORDER BY c.pocket = 'balance', c.pocket COLLATE "C"
  LOOP
    take := LEAST(left_units, n);
    IF n > 0 AND take > 0 THEN
      out := chargeonce_pockets_set(out, i,
                                    coalesce(held[i], 0) / n * take);
    END IF;
    left_units := left_units - take;
  END LOOP;
  RETURN out;
END $$;


--
-- Name: chargeonce_charged_in(integer[], bigint, bigint, integer[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_charged_in(nominal integer[], taken_in bigint, now_window bigint, amounts integer[]) RETURNS integer[]
    LANGUAGE sql IMMUTABLE
    AS $$
  SELECT CASE WHEN taken_in = now_window
              THEN chargeonce_pockets_charged(nominal, amounts)
              ELSE chargeonce_pockets_add(
                     chargeonce_pockets_charged(
                       chargeonce_in_window(nominal, taken_in, now_window),
                       amounts),
                     chargeonce_pockets_less(nominal,
                       chargeonce_in_window(nominal, taken_in, now_window)))
         END
$$;


--
-- Name: chargeonce_chat_id_changed(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_chat_id_changed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM ledger WHERE chat_id = OLD.chat_id) THEN
    PERFORM chargeonce_chat_still_referenced('ledger', OLD.chat_id);
  ELSIF EXISTS (SELECT 1 FROM reservations WHERE chat_id = OLD.chat_id) THEN
    PERFORM chargeonce_chat_still_referenced('reservations', OLD.chat_id);
  ELSIF EXISTS (SELECT 1 FROM grants WHERE chat_id = OLD.chat_id) THEN
    PERFORM chargeonce_chat_still_referenced('grants', OLD.chat_id);
  END IF;
  RETURN NULL;
END $$;


--
-- Name: chargeonce_chat_still_referenced(text, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_chat_still_referenced(t text, chat bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
  RAISE foreign_key_violation USING
    MESSAGE = format('update or delete on table "chats" violates foreign key '
                     'constraint "%s_chat_id_fkey" on table "%s"', t, t),
    DETAIL = format('Key (chat_id)=(%s) is still referenced from table '
                    '"%s".', chat, t),
    TABLE = t, CONSTRAINT = t || '_chat_id_fkey';
END $$;


--
-- Name: chargeonce_chats_deleted(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_chats_deleted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
  referenced bigint;
BEGIN
  SELECT min(l.chat_id) INTO referenced
    FROM old_rows o JOIN ledger l ON l.chat_id = o.chat_id;
  IF referenced IS NOT NULL THEN
    PERFORM chargeonce_chat_still_referenced('ledger', referenced);
  END IF;
  SELECT min(g.chat_id) INTO referenced
    FROM old_rows o JOIN grants g ON g.chat_id = o.chat_id;
  IF referenced IS NOT NULL THEN
    PERFORM chargeonce_chat_still_referenced('grants', referenced);
  END IF;
  DELETE FROM reservations r USING old_rows o WHERE r.chat_id = o.chat_id;
  RETURN NULL;
END $$;


--
-- Name: chargeonce_chats_truncated(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_chats_truncated() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM reservations) OR EXISTS (SELECT 1 FROM ledger)
     OR EXISTS (SELECT 1 FROM grants) THEN
    RAISE foreign_key_violation USING
      MESSAGE = 'cannot truncate chats while reservations, ledger or grants '
                'hold rows (truncate them first)',
      TABLE = 'chats', CONSTRAINT = 'chats_referenced';
  END IF;
  RETURN NULL;
END $$;


--
-- Name: chargeonce_check_chat_reference(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_check_chat_reference() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  PERFORM 1 FROM chats WHERE chat_id = NEW.chat_id FOR KEY SHARE;
  IF NOT FOUND THEN
    RAISE foreign_key_violation USING
      MESSAGE = format('insert or update on table "%s" violates foreign key '
                       'constraint "%s_chat_id_fkey"', TG_TABLE_NAME,
                       TG_TABLE_NAME),
      DETAIL = format('Key (chat_id)=(%s) is not present in table "chats".',
                      NEW.chat_id),
      TABLE = TG_TABLE_NAME, CONSTRAINT = TG_TABLE_NAME || '_chat_id_fkey';
  END IF;
  RETURN NEW;
END $$;


--
-- Name: chargeonce_choose(jsonb, boolean, integer[], integer[], integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_choose(spec jsonb, premium boolean, amounts integer[], held integer[], units integer) RETURNS public.chargeonce_choice
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
  pay jsonb := spec -> 'pay';
  p integer;
  price integer;
  take integer;
  left_units integer := GREATEST(units, 1);
  h integer[] := '{}';
  u integer[] := '{}';
BEGIN
  IF premium AND (spec ->> 'free')::boolean THEN
    RETURN ROW('{}', '{}')::chargeonce_choice;
  END IF;
  FOR i IN 0 .. jsonb_array_length(pay) - 1 LOOP
    EXIT WHEN left_units = 0;
    p := (pay -> i ->> 0)::integer;
    price := (pay -> i ->> 1)::integer;
    take := LEAST(left_units, GREATEST(0, coalesce(amounts[p], 0)
                                          - coalesce(held[p], 0)) / price);
    IF take > 0 THEN
      h := chargeonce_pockets_set(h, p, take * price);
      u := chargeonce_pockets_set(u, p, take);
      left_units := left_units - take;
    END IF;
  END LOOP;
  IF left_units > 0 THEN
    RETURN NULL;
  END IF;
  RETURN ROW(h, u)::chargeonce_choice;
END $$;


--
-- Name: chargeonce_claim(text, bigint, bigint, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_claim(p_op text, p_chat bigint, p_id bigint, p_worker text) RETURNS public.chargeonce_outcome
    LANGUAGE plpgsql
    AS $$
DECLARE
  v_status text;
  v_worker text;
BEGIN
  IF coalesce(p_worker, '') = '' THEN
    RETURN NULL;
  END IF;
  -- A commit writes the chat's pockets, and so may a fail (what it held of
  -- an expired or voided grant): the chat's row first, as every writer
  -- takes them, then the reservation's.
  IF p_op IN ('commit', 'fail') THEN
    PERFORM 1 FROM chats WHERE chat_id = p_chat FOR UPDATE;
  END IF;
  SELECT status, worker INTO v_status, v_worker
    FROM reservations WHERE id = p_id AND chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN NULL; -- the operation itself says what became of it
  END IF;
  IF v_status = 'queued' THEN
    IF p_op = 'start' THEN
      UPDATE reservations SET worker = p_worker WHERE id = p_id;
    END IF;
    RETURN NULL;
  END IF;
  IF v_worker = p_worker THEN
    RETURN NULL;
  END IF;
  RETURN chargeonce_refusal('already_started',
    'reservation ' || p_id || ' of chat ' || p_chat
    || ' was started by another worker');
END $$;


--
-- Name: chargeonce_commit(bigint, bigint, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_commit(p_chat bigint, p_id bigint, p_units integer) RETURNS public.chargeonce_outcome
    LANGUAGE plpgsql
    AS $$
DECLARE
  c record;
  r reservations;
  l record;
  o chargeonce_outcome;
  nominal integer[];
  taken integer[];
  v_charged integer[];
  after integer[];
BEGIN
  SELECT pockets, window_number, next_expiry INTO c FROM chats
   WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  IF c.next_expiry <= now() THEN
    PERFORM chargeonce_expire_grants(p_chat);
    SELECT pockets, window_number, next_expiry INTO c FROM chats
     WHERE chat_id = p_chat;
  END IF;
  SELECT chat_id, kind, charged, committed_at, units, released, window_number
    INTO l
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
    -- A hold of a past window takes nothing more of the daily pockets:
    -- its window's unit paid, and the receipt says which window that was.
    nominal := chargeonce_captured(r.held, r.held_units, r.units, p_units);
    v_charged := chargeonce_charged_in(nominal, r.window_number,
                                     c.window_number, c.pockets);
    -- The balance part, clamped at what the pocket has, is charged from
    -- the hold's grants in the hold's order (each at most what it has
    -- left); what the hold has over it on a grant that expired or was
    -- voided leaves the balance in rows before this one.
    IF cardinality(r.held_grants) > 0 THEN
      taken := chargeonce_settle_hold(p_chat, r.held_grants,
                                      r.held_grant_credits, v_charged[3],
                                      p_id);
      IF nominal[3] IS NOT NULL THEN
        v_charged := chargeonce_pockets_set(v_charged, 3,
          (SELECT sum(t)::integer FROM unnest(taken) AS t));
      END IF;
      SELECT pockets INTO c.pockets FROM chats WHERE chat_id = p_chat;
    END IF;
    UPDATE chats SET pockets = chargeonce_pockets_take(pockets,
                       chargeonce_pockets_charged(
                         chargeonce_in_window(nominal, r.window_number,
                                              c.window_number),
                         v_charged))
      WHERE chat_id = p_chat RETURNING pockets INTO after;
    INSERT INTO ledger (reservation_id, chat_id, kind, charged, units,
                        released, pockets, changed, window_number,
                        grant_ids, grant_credits)
      VALUES (p_id, p_chat, r.kind, v_charged,
              coalesce(nullif(p_units, 0), r.units),
              chargeonce_pockets_less(r.held, nominal), after,
              chargeonce_pockets_change(c.pockets, after), r.window_number,
              coalesce(r.held_grants, '{}'), coalesce(taken, '{}'))
      RETURNING chat_id, kind, charged, committed_at, units, released,
                window_number INTO l;
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
  o.window_number := l.window_number;
  RETURN o;
END $$;


--
-- Name: chargeonce_describe(bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_describe(p_chat bigint, p_id bigint) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT 'reservation ' || p_id || ' of chat ' || p_chat $$;


--
-- Name: chargeonce_event_cancel_requested(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_event_cancel_requested() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  PERFORM chargeonce_publish('cancel_requested', NEW.chat_id, NEW.id, NULL);
  RETURN NULL;
END $$;


--
-- Name: chargeonce_event_reconcile_needed(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_event_reconcile_needed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  PERFORM chargeonce_publish('reconcile_needed', NEW.chat_id, NEW.id,
                             NEW.provider_ref);
  RETURN NULL;
END $$;


--
-- Name: chargeonce_event_released(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_event_released() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  PERFORM chargeonce_publish('reservation_released', NEW.chat_id, NEW.id,
                             NEW.reason);
  RETURN NULL;
END $$;


--
-- Name: chargeonce_event_unresolved(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_event_unresolved() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  PERFORM chargeonce_publish('reservation_released', NEW.chat_id, NEW.id,
                             'unresolved');
  RETURN NULL;
END $$;


--
-- Name: chargeonce_expire_due(integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_expire_due(p_limit integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
  due bigint[];
  chat bigint;
  n integer := 0;
BEGIN
  SELECT array_agg(DISTINCT g.chat_id) INTO due
    FROM (SELECT chat_id FROM grants
           WHERE expires_at <= now() AND expired_at IS NULL
             AND voided_at IS NULL AND expires_at IS NOT NULL
           ORDER BY expires_at LIMIT p_limit) g;
  IF due IS NULL THEN
    RETURN 0;
  END IF;
  FOR chat IN
    SELECT chat_id FROM chats WHERE chat_id = ANY (due)
     ORDER BY chat_id FOR UPDATE
  LOOP
    n := n + chargeonce_expire_grants(chat);
  END LOOP;
  RETURN n;
END $$;


--
-- Name: chargeonce_expire_grants(bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_expire_grants(p_chat bigint) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
  g record;
  n integer := 0;
  low integer;
  balance_before integer;
  held_balance integer;
BEGIN
  SELECT chargeonce_low_threshold(balance_low_threshold),
         coalesce(pockets[3], 0)
    INTO low, balance_before FROM chats WHERE chat_id = p_chat;
  FOR g IN
    SELECT x.grant_id, chargeonce_grant_left(x) AS left_credits,
           coalesce(h.held, 0) AS held
      FROM grants x
      LEFT JOIN chargeonce_grants_held(p_chat) h ON h.grant_id = x.grant_id
     WHERE x.chat_id = p_chat AND x.expires_at <= now()
       AND x.expired_at IS NULL AND x.voided_at IS NULL
     ORDER BY x.expires_at, x.grant_id
     FOR UPDATE OF x
  LOOP
    UPDATE grants
       SET expired = expired + GREATEST(0, g.left_credits - g.held),
           expired_at = now()
     WHERE grant_id = g.grant_id;
    n := n + 1;
    CONTINUE WHEN g.left_credits <= 0;
    PERFORM chargeonce_grant_leaves(p_chat, g.grant_id,
      GREATEST(0, g.left_credits - g.held), 'expire',
      'grant ' || g.grant_id || ' expired'
      || CASE WHEN g.held > 0 THEN ' (' || g.held || ' credits still held)'
              ELSE '' END);
    INSERT INTO events (event, chat_id, detail, grant_id, credits)
      VALUES ('credits_expired', p_chat,
              'grant ' || g.grant_id || ': '
              || GREATEST(0, g.left_credits - g.held) || ' credits expired'
              || CASE WHEN g.held > 0 THEN ', ' || g.held || ' held'
                      ELSE '' END,
              g.grant_id, GREATEST(0, g.left_credits - g.held));
  END LOOP;
  -- Holds are what they were: the fall is what left pockets[3].
  IF low > 0 AND n > 0 THEN
    held_balance := chargeonce_balance_held(p_chat);
    PERFORM chargeonce_note_balance(p_chat, balance_before - held_balance,
      (SELECT coalesce(pockets[3], 0) FROM chats WHERE chat_id = p_chat)
        - held_balance,
      low, 'expire');
  END IF;
  UPDATE chats SET next_expiry = chargeonce_next_expiry(p_chat)
   WHERE chat_id = p_chat;
  RETURN n;
END $$;


--
-- Name: chargeonce_expire_if_due(bigint, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_expire_if_due(p_chat bigint, p_next_expiry timestamp with time zone) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
  IF p_next_expiry <= now() THEN
    PERFORM chargeonce_expire_grants(p_chat);
    RETURN true;
  END IF;
  RETURN false;
END $$;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: grants; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.grants (
    grant_id bigint NOT NULL,
    chat_id bigint NOT NULL,
    source text DEFAULT 'purchase'::text NOT NULL,
    credits integer NOT NULL,
    charged integer DEFAULT 0 NOT NULL,
    expired integer DEFAULT 0 NOT NULL,
    voided integer DEFAULT 0 NOT NULL,
    priority integer DEFAULT 100 NOT NULL,
    expires_at timestamp with time zone,
    expires_in_ms bigint,
    payment_id text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expired_at timestamp with time zone,
    voided_at timestamp with time zone,
    expiring_noticed_at timestamp with time zone,
    CONSTRAINT grants_amounts CHECK ((((charged + expired) + voided) <= credits)),
    CONSTRAINT grants_charged_check CHECK ((charged >= 0)),
    CONSTRAINT grants_credits_check CHECK ((credits > 0)),
    CONSTRAINT grants_expired_check CHECK ((expired >= 0)),
    CONSTRAINT grants_priority_check CHECK (((priority >= 0) AND (priority <= 1000))),
    CONSTRAINT grants_source_check CHECK ((source = ANY (ARRAY['purchase'::text, 'promo'::text, 'admin'::text]))),
    CONSTRAINT grants_voided_check CHECK ((voided >= 0))
)
WITH (fillfactor='70');


--
-- Name: chargeonce_expiring_detail(public.grants); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_expiring_detail(g public.grants) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
  SELECT 'grant ' || g.grant_id || ': ' || chargeonce_grant_left(g)
         || ' credits expire at '
         || to_char(g.expires_at AT TIME ZONE 'UTC',
                    'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;


--
-- Name: chargeonce_expiring_unheld(bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_expiring_unheld(p_chat bigint) RETURNS integer
    LANGUAGE sql STABLE
    AS $$
  SELECT coalesce(sum(GREATEST(0, chargeonce_grant_left(g)
                                  - coalesce(h.held, 0))), 0)::integer
    FROM grants g
    LEFT JOIN chargeonce_grants_held(p_chat) h ON h.grant_id = g.grant_id
   WHERE g.chat_id = p_chat AND g.expires_at <= now()
     AND g.expired_at IS NULL AND g.voided_at IS NULL
$$;


--
-- Name: chargeonce_explain_missing(bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_explain_missing(p_chat bigint, p_id bigint) RETURNS public.chargeonce_outcome
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
  owner bigint;
  how text;
  ref text;
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
  SELECT chat_id, outcome, provider_ref INTO owner, how, ref
    FROM uncertain_reservations WHERE id = p_id;
  IF FOUND THEN
    IF owner <> p_chat THEN
      RETURN chargeonce_refusal('invalid_argument', not_ours);
    END IF;
    IF how IS NULL THEN
      RETURN chargeonce_refusal('invalid_state',
        chargeonce_describe(p_chat, p_id) || ' has an unknown outcome '
        || '(provider_ref ' || ref || '): resolve it');
    END IF;
    IF how = 'released' THEN
      RETURN chargeonce_refusal('expired',
        chargeonce_describe(p_chat, p_id)
        || ' was released unresolved at reconcile-timeout');
    END IF;
    RETURN chargeonce_refusal(CASE how WHEN 'failed' THEN 'not_found'
                                       ELSE 'invalid_state' END,
      chargeonce_describe(p_chat, p_id) || ' was resolved ' || how);
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


--
-- Name: chargeonce_fail(bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_fail(p_chat bigint, p_id bigint) RETURNS public.chargeonce_outcome
    LANGUAGE plpgsql
    AS $$
DECLARE
  r reservations;
BEGIN
  -- A hold on grants may write the balance: the chat's row first, as
  -- every writer takes them (held_grants never changes after reserve).
  IF EXISTS (SELECT 1 FROM reservations
              WHERE id = p_id AND chat_id = p_chat
                AND cardinality(held_grants) > 0) THEN
    PERFORM chargeonce_lock_for_settle(p_chat);
  END IF;
  DELETE FROM reservations WHERE id = p_id AND chat_id = p_chat RETURNING * INTO r;
  IF FOUND THEN
    PERFORM chargeonce_settle_hold(p_chat, r.held_grants,
                                   r.held_grant_credits, 0, r.id);
    PERFORM chargeonce_remember_end(r, 'failed');
    RETURN chargeonce_with_reservation(r);
  END IF;
  RETURN chargeonce_explain_missing(p_chat, p_id);
END $$;


--
-- Name: chargeonce_find_request(bigint, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_find_request(p_chat bigint, p_request_id text) RETURNS public.chargeonce_outcome
    LANGUAGE plpgsql STABLE
    AS $$
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
         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
         x.units, x.held_units, NULL, NULL, x.cancel_requested,
         x.window_number
    INTO o
    FROM (SELECT id, chat_id, kind, status, queue, held, request_id,
                 created_at, lease_expires_at, slot,
                 NULL::timestamptz AS ended_at, units, held_units,
                 cancel_requested, window_number
            FROM reservations
           WHERE chat_id = p_chat AND request_id = p_request_id
          UNION ALL
          SELECT id, chat_id, kind, 'outcome_unknown', queue, held,
                 request_id, created_at, NULL, -1, NULL, units, held_units,
                 cancel_requested, window_number
            FROM uncertain_reservations
           WHERE chat_id = p_chat AND request_id = p_request_id
             AND outcome IS NULL
          UNION ALL
          SELECT id, chat_id, kind, status, queue, held, request_id,
                 created_at, lease_expires_at, slot, ended_at, units,
                 held_units, false, window_number
            FROM ended_reservations
           WHERE chat_id = p_chat AND request_id = p_request_id) x
   LIMIT 1;
  RETURN o;
END $$;


--
-- Name: chargeonce_grant_answer_of(public.grants); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_grant_answer_of(g public.grants) RETURNS public.chargeonce_grant_answer
    LANGUAGE sql STABLE
    AS $$
  SELECT ROW('ok', NULL, g.grant_id, g.chat_id, g.source, g.credits,
             chargeonce_grant_left(g),
             coalesce((SELECT h.held FROM chargeonce_grants_held(g.chat_id) h
                        WHERE h.grant_id = g.grant_id), 0),
             g.priority, chargeonce_us(g.expires_at), g.expires_in_ms,
             g.payment_id, chargeonce_us(g.created_at),
             chargeonce_us(g.expired_at), chargeonce_us(g.voided_at),
             chargeonce_us(g.created_at),
             chargeonce_grant_end(g))::chargeonce_grant_answer
$$;


--
-- Name: chargeonce_grant_balance(bigint, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_grant_balance(p_chat bigint, p_source text DEFAULT 'admin'::text) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
  missing integer;
  id bigint;
BEGIN
  SELECT coalesce(c.pockets[3], 0)
         - coalesce((SELECT sum(chargeonce_grant_left(g))
                       FROM grants g WHERE g.chat_id = p_chat), 0)
    INTO missing FROM chats c WHERE c.chat_id = p_chat;
  IF coalesce(missing, 0) <= 0 THEN
    RETURN NULL;
  END IF;
  INSERT INTO grants (chat_id, source, credits)
    VALUES (p_chat, p_source, missing) RETURNING grant_id INTO id;
  RETURN id;
END $$;


--
-- Name: chargeonce_grant_end(public.grants); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_grant_end(g public.grants) RETURNS text
    LANGUAGE sql STABLE
    AS $$
  SELECT CASE WHEN g.voided_at IS NOT NULL
                   AND (g.expires_at IS NULL OR g.voided_at < g.expires_at)
                THEN 'void'
              WHEN g.expires_at <= now() THEN 'expire' END
$$;


--
-- Name: chargeonce_grant_ended(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_grant_ended() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  UPDATE chats SET sole_grant = chargeonce_sole_grant(NEW.chat_id)
   WHERE chat_id = NEW.chat_id;
  RETURN NULL;
END $$;


--
-- Name: chargeonce_grant_leaves(bigint, bigint, integer, text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_grant_leaves(p_chat bigint, p_grant bigint, p_credits integer, p_entry text, p_detail text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
  before integer[];
  after integer[];
BEGIN
  SELECT pockets INTO before FROM chats WHERE chat_id = p_chat;
  after := chargeonce_pockets_set(before, 3,
             GREATEST(0, coalesce(before[3], 0) - p_credits));
  IF p_credits <> 0 THEN
    UPDATE chats SET pockets = after WHERE chat_id = p_chat;
  END IF;
  INSERT INTO ledger (entry, chat_id, detail, pockets, changed, grant_ids,
                      grant_credits)
    VALUES (p_entry, p_chat, p_detail, after,
            chargeonce_pockets_change(before, after), ARRAY[p_grant],
            ARRAY[p_credits]);
END $$;


--
-- Name: chargeonce_grant_left(public.grants); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_grant_left(g public.grants) RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$
  SELECT g.credits - g.charged - g.expired - g.voided
$$;


--
-- Name: chargeonce_grant_parts(bigint[], integer[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_grant_parts(p_grants bigint[], p_credits integer[]) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
  SELECT coalesce(json_agg(json_build_object('grant', g, 'credits', n)
                           ORDER BY i)::text, '[]')
    FROM unnest(p_grants, p_credits) WITH ORDINALITY AS u(g, n, i)
$$;


--
-- Name: chargeonce_grant_refusal(text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_grant_refusal(code text, msg text) RETURNS public.chargeonce_grant_answer
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
  o chargeonce_grant_answer;
BEGIN
  o.outcome := code;
  o.message := msg;
  RETURN o;
END $$;


--
-- Name: chargeonce_grants_added(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_grants_added() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  UPDATE chats c SET sole_grant = chargeonce_sole_grant(c.chat_id)
    FROM (SELECT DISTINCT chat_id FROM added_grants) a
   WHERE c.chat_id = a.chat_id;
  RETURN NULL;
END $$;


--
-- Name: chargeonce_grants_held(bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_grants_held(p_chat bigint) RETURNS TABLE(grant_id bigint, held integer)
    LANGUAGE sql STABLE
    AS $$
  SELECT h.grant_id, sum(h.credits)::integer
    FROM (SELECT x.grant_id, x.credits
            FROM reservations r,
                 unnest(r.held_grants, r.held_grant_credits)
                   AS x(grant_id, credits)
           WHERE r.chat_id = p_chat
          UNION ALL
          SELECT x.grant_id, x.credits
            FROM uncertain_reservations u,
                 unnest(u.held_grants, u.held_grant_credits)
                   AS x(grant_id, credits)
           WHERE u.chat_id = p_chat AND u.outcome IS NULL) h
   GROUP BY h.grant_id
$$;


--
-- Name: chargeonce_grants_json(bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_grants_json(p_chat bigint) RETURNS text
    LANGUAGE sql STABLE
    AS $$
  SELECT coalesce(json_agg(json_build_object(
           'id', x.grant_id, 'source', x.source, 'credits', x.credits,
           'left', x.shown_left, 'held', x.held,
           'expires_us', chargeonce_us(x.expires_at),
           'priority', x.priority, 'payment_id', x.payment_id,
           'created_us', chargeonce_us(x.created_at),
           'expired_us', chargeonce_us(x.expired_at),
           'voided_us', chargeonce_us(x.voided_at),
           'expired', x.dead IS NOT DISTINCT FROM 'expire',
           'voided', x.dead IS NOT DISTINCT FROM 'void')
           ORDER BY x.spending)::text, '[]')
    FROM (SELECT g.*, coalesce(h.held, 0) AS held,
                 chargeonce_grant_end(g) AS dead,
                 chargeonce_spending_order(g) AS spending,
                 CASE WHEN chargeonce_grant_end(g) IS NULL
                      THEN chargeonce_grant_left(g)
                      ELSE LEAST(chargeonce_grant_left(g),
                                 coalesce(h.held, 0)) END AS shown_left
            FROM grants g
            LEFT JOIN chargeonce_grants_held(p_chat) h
              ON h.grant_id = g.grant_id
           WHERE g.chat_id = p_chat) x
   WHERE x.shown_left > 0
$$;


--
-- Name: chargeonce_heartbeat(bigint, bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_heartbeat(p_chat bigint, p_id bigint, p_lease_ms bigint) RETURNS public.chargeonce_outcome
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: chargeonce_hold_grants(bigint, integer, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_hold_grants(p_chat bigint, p_credits integer, p_sole_grant bigint DEFAULT NULL::bigint) RETURNS public.chargeonce_grant_hold
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
  need integer := coalesce(p_credits, 0);
  ids bigint[] := '{}';
  amounts integer[] := '{}';
  take integer;
  g record;
BEGIN
  IF need <= 0 THEN
    RETURN ROW('{}', '{}')::chargeonce_grant_hold;
  END IF;
  IF p_sole_grant IS NOT NULL THEN
    RETURN ROW(ARRAY[p_sole_grant], ARRAY[need])::chargeonce_grant_hold;
  END IF;
  FOR g IN
    SELECT x.grant_id, chargeonce_grant_left(x) - coalesce(h.held, 0) AS free
      FROM grants x
      LEFT JOIN chargeonce_grants_held(p_chat) h ON h.grant_id = x.grant_id
     WHERE x.chat_id = p_chat AND x.voided_at IS NULL
       AND (x.expires_at IS NULL OR x.expires_at > now())
       AND chargeonce_grant_left(x) > 0
     ORDER BY chargeonce_spending_order(x)
  LOOP
    take := LEAST(need, g.free);
    IF take > 0 THEN
      ids := ids || g.grant_id;
      amounts := amounts || take;
      need := need - take;
    END IF;
    EXIT WHEN need = 0;
  END LOOP;
  IF need > 0 THEN
    RAISE EXCEPTION 'chat % holds % balance credits but its live grants '
      'cover only %: pockets[3] and the grants disagree (a bug)', p_chat,
      p_credits, p_credits - need;
  END IF;
  RETURN ROW(ids, amounts)::chargeonce_grant_hold;
END $$;


--
-- Name: chargeonce_in_window(integer[], bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_in_window(x integer[], taken_in bigint, now_window bigint) RETURNS integer[]
    LANGUAGE sql IMMUTABLE
    AS $$
  SELECT CASE WHEN taken_in = now_window THEN x
              WHEN cardinality(x) >= 3 THEN ARRAY[NULL, NULL, x[3]]::integer[]
              ELSE '{}'::integer[] END
$$;


--
-- Name: chargeonce_job_limit(integer, boolean, integer, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_job_limit(own integer, premium boolean, free_max integer, premium_max integer) RETURNS integer
    LANGUAGE sql IMMUTABLE
    AS $$
  SELECT coalesce(own, CASE WHEN premium THEN premium_max ELSE free_max END)
$$;


--
-- Name: chargeonce_lock_for_settle(bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_lock_for_settle(p_chat bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
  due timestamptz;
BEGIN
  SELECT next_expiry INTO due FROM chats WHERE chat_id = p_chat FOR UPDATE;
  PERFORM chargeonce_expire_if_due(p_chat, due);
END $$;


--
-- Name: chargeonce_low_threshold(integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_low_threshold(p_own integer) RETURNS integer
    LANGUAGE sql STABLE
    AS $$
  SELECT coalesce(p_own,
                  nullif(current_setting('chargeonce.balance_low_threshold',
                                         true), '')::integer,
                  0)
$$;


--
-- Name: chargeonce_next_expiry(bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_next_expiry(p_chat bigint) RETURNS timestamp with time zone
    LANGUAGE sql STABLE
    AS $$
  SELECT min(x.expires_at)
    FROM (SELECT expires_at FROM grants
           WHERE chat_id = p_chat AND expires_at IS NOT NULL
             AND expired_at IS NULL AND voided_at IS NULL OFFSET 0) x
$$;


--
-- Name: chargeonce_note_balance(bigint, integer, integer, integer, text, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_note_balance(p_chat bigint, p_before integer, p_after integer, p_threshold integer, p_cause text, p_reservation bigint DEFAULT NULL::bigint) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
BEGIN
  IF p_threshold > 0 AND p_before >= p_threshold
     AND p_after < p_threshold THEN
    INSERT INTO events (event, chat_id, reservation_id, detail, credits,
                        threshold)
      VALUES ('balance_low', p_chat, p_reservation, p_cause, p_after,
              p_threshold);
    RETURN true;
  END IF;
  RETURN false;
END $$;


--
-- Name: chargeonce_notice_expiring(bigint, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_notice_expiring(p_notice_ms bigint, p_limit integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
  n integer;
BEGIN
  WITH due AS (
    SELECT grant_id FROM grants
     WHERE expires_at <= now() + p_notice_ms * interval '1 millisecond'
       AND expired_at IS NULL AND voided_at IS NULL
       AND expires_at IS NOT NULL AND expiring_noticed_at IS NULL
     ORDER BY expires_at LIMIT p_limit FOR UPDATE SKIP LOCKED),
  noticed AS (
    UPDATE grants g SET expiring_noticed_at = now()
      FROM due WHERE g.grant_id = due.grant_id
    RETURNING g.*),
  published AS (
    INSERT INTO events (event, chat_id, detail, grant_id, credits,
                        expires_at)
    SELECT 'credits_expiring', x.chat_id, chargeonce_expiring_detail(x),
           x.grant_id, chargeonce_grant_left(x), x.expires_at
      FROM noticed x
     WHERE chargeonce_grant_left(x) > 0
     ORDER BY x.chat_id, x.grant_id)
  SELECT count(*) INTO n FROM noticed;
  RETURN n;
END $$;


--
-- Name: chargeonce_number_events(integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_number_events(p_max integer) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
  v_last bigint;
  v_count bigint;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM events WHERE id IS NULL) THEN
    RETURN (SELECT last_id FROM event_clock);
  END IF;
  SELECT last_id INTO v_last FROM event_clock FOR UPDATE;
  WITH todo AS (
    SELECT seq, row_number() OVER (ORDER BY seq) AS n
      FROM (SELECT seq FROM events WHERE id IS NULL ORDER BY seq
            LIMIT p_max FOR UPDATE SKIP LOCKED) x)
  UPDATE events e SET id = v_last + todo.n FROM todo WHERE e.seq = todo.seq;
  GET DIAGNOSTICS v_count = ROW_COUNT;
  UPDATE event_clock SET last_id = v_last + v_count;
  RETURN v_last + v_count;
END $$;


--
-- Name: chargeonce_pocket(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_pocket(name text) RETURNS integer
    LANGUAGE sql STABLE
    AS $$
  SELECT ordinal FROM catalog_pockets WHERE pocket = name
$$;


--
-- Name: chargeonce_pockets(jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_pockets(p jsonb) RETURNS integer[]
    LANGUAGE plpgsql STABLE STRICT
    AS $$
DECLARE
  names text[];
  amounts integer[];
  out integer[] := '{}';
  i integer;
BEGIN
  SELECT array_agg(key), array_agg(value::integer) INTO names, amounts
    FROM jsonb_each_text(p);
  FOR k IN 1 .. coalesce(cardinality(names), 0) LOOP
    i := chargeonce_pocket(names[k]);
    IF i IS NULL THEN
      RAISE invalid_parameter_value USING
        MESSAGE = 'unknown pocket ' || names[k] || ': not in catalog_pockets';
    END IF;
    out := chargeonce_pockets_set(out, i, amounts[k]);
  END LOOP;
  RETURN out;
END $$;


--
-- Name: chargeonce_pockets_add(integer[], integer[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_pockets_add(a integer[], b integer[]) RETURNS integer[]
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
  a := coalesce(a, '{}');
  FOR i IN 1 .. coalesce(cardinality(b), 0) LOOP
    IF b[i] IS NOT NULL THEN
      a := chargeonce_pockets_set(a, i, coalesce(a[i], 0) + b[i]);
    END IF;
  END LOOP;
  RETURN a;
END $$;


--
-- Name: chargeonce_pockets_change(integer[], integer[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_pockets_change(before integer[], after integer[]) RETURNS integer[]
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
  out integer[] := '{}';
BEGIN
  FOR i IN 1 .. coalesce(GREATEST(cardinality(before), cardinality(after)),
                         0) LOOP
    IF coalesce(after[i], 0) <> coalesce(before[i], 0) THEN
      out := chargeonce_pockets_set(out, i,
               coalesce(after[i], 0) - coalesce(before[i], 0));
    END IF;
  END LOOP;
  RETURN out;
END $$;


--
-- Name: chargeonce_pockets_charged(integer[], integer[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_pockets_charged(held integer[], amounts integer[]) RETURNS integer[]
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
  out integer[] := '{}';
BEGIN
  FOR i IN 1 .. coalesce(cardinality(held), 0) LOOP
    IF held[i] IS NOT NULL THEN
      out := chargeonce_pockets_set(out, i,
                                    LEAST(held[i], coalesce(amounts[i], 0)));
    END IF;
  END LOOP;
  RETURN out;
END $$;


--
-- Name: chargeonce_pockets_json(integer[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_pockets_json(p integer[]) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
  SELECT coalesce(jsonb_object_agg(c.pocket, e.amount), '{}')
    FROM unnest(p) WITH ORDINALITY AS e(amount, i)
    JOIN catalog_pockets c ON c.ordinal = e.i
   WHERE e.amount IS NOT NULL
$$;


--
-- Name: chargeonce_pockets_less(integer[], integer[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_pockets_less(a integer[], b integer[]) RETURNS integer[]
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
  out integer[] := '{}';
BEGIN
  FOR i IN 1 .. coalesce(cardinality(a), 0) LOOP
    IF a[i] IS NOT NULL AND a[i] - coalesce(b[i], 0) <> 0 THEN
      out := chargeonce_pockets_set(out, i, a[i] - coalesce(b[i], 0));
    END IF;
  END LOOP;
  RETURN out;
END $$;


--
-- Name: chargeonce_pockets_set(integer[], integer, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_pockets_set(a integer[], i integer, v integer) RETURNS integer[]
    LANGUAGE sql IMMUTABLE
    AS $$
  SELECT (coalesce(a, '{}'::integer[]))[:i - 1]
         || array_fill(NULL::integer,
                       ARRAY[GREATEST(0, i - 1
                                         - cardinality(coalesce(a, '{}')))])
         || v || (coalesce(a, '{}'::integer[]))[i + 1:]
$$;


--
-- Name: chargeonce_pockets_take(integer[], integer[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_pockets_take(amounts integer[], held integer[]) RETURNS integer[]
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
  amounts := coalesce(amounts, '{}');
  FOR i IN 1 .. coalesce(cardinality(held), 0) LOOP
    IF held[i] IS NOT NULL THEN
      amounts := chargeonce_pockets_set(amounts, i,
                   GREATEST(0, coalesce(amounts[i], 0) - held[i]));
    END IF;
  END LOOP;
  RETURN amounts;
END $$;


--
-- Name: chargeonce_pockets_with(integer[], jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_pockets_with(a integer[], names jsonb) RETURNS integer[]
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
  b integer[] := chargeonce_pockets(names);
BEGIN
  a := coalesce(a, '{}');
  FOR i IN 1 .. coalesce(cardinality(b), 0) LOOP
    IF b[i] IS NOT NULL THEN
      a := chargeonce_pockets_set(a, i, b[i]);
    END IF;
  END LOOP;
  RETURN a;
END $$;


--
-- Name: chargeonce_publish(text, bigint, bigint, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_publish(p_event text, p_chat bigint, p_reservation bigint, p_detail text) RETURNS void
    LANGUAGE sql
    AS $$
  INSERT INTO events (event, chat_id, reservation_id, detail)
  VALUES (p_event, p_chat, p_reservation, p_detail);
$$;


--
-- Name: chargeonce_queue(jsonb, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_queue(spec jsonb, premium boolean) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
  SELECT CASE WHEN premium THEN spec ->> 'pq' ELSE spec ->> 'q' END
$$;


--
-- Name: chargeonce_receipt_at(integer, bigint, text, integer[], timestamp with time zone, integer, integer[], bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_receipt_at(i integer, chat bigint, k text, charged integer[], at timestamp with time zone, units integer, released integer[], paid_by bigint) RETURNS public.chargeonce_outcome
    LANGUAGE sql STABLE
    AS $$
  SELECT ROW(i, 'ok', NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             chat, k, charged, chargeonce_us(at),
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, units, released, NULL,
             paid_by, NULL, NULL)::chargeonce_outcome
$$;


--
-- Name: chargeonce_refusal(text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_refusal(code text, msg text) RETURNS public.chargeonce_outcome
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
  o chargeonce_outcome;
BEGIN
  o.outcome := code;
  o.message := msg;
  RETURN o;
END $$;


--
-- Name: chargeonce_refusal_at(integer, text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_refusal_at(i integer, code text, msg text) RETURNS public.chargeonce_outcome
    LANGUAGE sql IMMUTABLE
    AS $$
  SELECT ROW(i, code, msg,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL)::chargeonce_outcome
$$;


--
-- Name: chargeonce_release_swept(bigint, bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_release_swept(p_chat bigint, p_id bigint, p_timeout_ms bigint) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
  r reservations;
  why text;
BEGIN
  IF EXISTS (SELECT 1 FROM reservations
              WHERE id = p_id AND chat_id = p_chat
                AND cardinality(held_grants) > 0) THEN
    PERFORM chargeonce_lock_for_settle(p_chat);
  END IF;
  DELETE FROM reservations
   WHERE id = p_id AND chat_id = p_chat
     AND (created_at < now() - p_timeout_ms * interval '1 millisecond'
          OR lease_expires_at < now())
  RETURNING * INTO r;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  why := CASE WHEN r.lease_expires_at < now() THEN 'lease_expired'
              ELSE 'sweep_timeout' END;
  PERFORM chargeonce_remember_end(r, 'released');
  INSERT INTO released_reservations (id, chat_id, reason)
    VALUES (r.id, r.chat_id, why);
  PERFORM chargeonce_settle_hold(p_chat, r.held_grants, r.held_grant_credits,
                                 0, r.id);
  RETURN why;
END $$;


--
-- Name: chargeonce_release_unresolved(bigint, bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_release_unresolved(p_chat bigint, p_id bigint, p_timeout_ms bigint) RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
  u uncertain_reservations;
BEGIN
  -- Its hold may leave the balance (a grant expired or voided): the chat's
  -- row first, as every writer takes them, and what was due expired while
  -- the hold still counts.
  IF EXISTS (SELECT 1 FROM uncertain_reservations
              WHERE id = p_id AND chat_id = p_chat AND outcome IS NULL
                AND cardinality(held_grants) > 0) THEN
    PERFORM chargeonce_lock_for_settle(p_chat);
  END IF;
  UPDATE uncertain_reservations
     SET outcome = 'released', resolved_at = now(), charged = '{}',
         released = held, units_charged = 0
   WHERE id = p_id AND chat_id = p_chat AND outcome IS NULL
     AND uncertain_at < now() - p_timeout_ms * interval '1 millisecond'
  RETURNING * INTO u;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  PERFORM chargeonce_settle_hold(p_chat, u.held_grants, u.held_grant_credits,
                                 0, p_id);
  PERFORM chargeonce_remember_uncertain_end(u, 'released');
  RETURN 'unresolved';
END $$;


--
-- Name: reservations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.reservations (
    id bigint NOT NULL,
    chat_id bigint NOT NULL,
    kind text NOT NULL,
    status text DEFAULT 'queued'::text NOT NULL,
    queue text NOT NULL,
    request_id text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    started_at timestamp with time zone,
    lease_expires_at timestamp with time zone,
    slot integer DEFAULT 0 NOT NULL,
    held integer[] DEFAULT '{}'::integer[] NOT NULL,
    units integer DEFAULT 1 NOT NULL,
    held_units integer[] DEFAULT '{}'::integer[] NOT NULL,
    cancel_requested boolean DEFAULT false NOT NULL,
    window_number bigint DEFAULT 0 NOT NULL,
    worker text DEFAULT ''::text NOT NULL,
    held_grants bigint[] DEFAULT '{}'::bigint[] NOT NULL,
    held_grant_credits integer[] DEFAULT '{}'::integer[] NOT NULL,
    CONSTRAINT reservations_held CHECK (((array_ndims(held) = 1) AND (array_lower(held, 1) = 1) AND (array_ndims(held_units) = 1) AND (array_lower(held_units, 1) = 1))),
    CONSTRAINT reservations_slot_check CHECK (((slot >= 0) AND (slot <= 63))),
    CONSTRAINT reservations_status_check CHECK ((status = ANY (ARRAY['queued'::text, 'in_progress'::text])))
);


--
-- Name: chargeonce_remember_end(public.reservations, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_remember_end(r public.reservations, how text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
  IF r.request_id = '' THEN
    RETURN;
  END IF;
  INSERT INTO ended_reservations (id, chat_id, kind, status, queue, held,
                                  request_id, slot, created_at,
                                  lease_expires_at, units, held_units,
                                  window_number)
    VALUES (r.id, r.chat_id, r.kind, how, r.queue, r.held, r.request_id,
            r.slot, r.created_at, r.lease_expires_at, r.units, r.held_units,
            r.window_number);
END $$;


--
-- Name: uncertain_reservations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.uncertain_reservations (
    id bigint NOT NULL,
    chat_id bigint NOT NULL,
    kind text NOT NULL,
    queue text NOT NULL,
    held integer[] NOT NULL,
    held_units integer[] NOT NULL,
    units integer NOT NULL,
    request_id text NOT NULL,
    slot integer NOT NULL,
    created_at timestamp with time zone NOT NULL,
    cancel_requested boolean NOT NULL,
    provider_ref text NOT NULL,
    uncertain_at timestamp with time zone DEFAULT now() NOT NULL,
    outcome text,
    resolved_at timestamp with time zone,
    charged integer[],
    released integer[],
    units_charged integer,
    window_number bigint DEFAULT 0 NOT NULL,
    held_grants bigint[] DEFAULT '{}'::bigint[] NOT NULL,
    held_grant_credits integer[] DEFAULT '{}'::integer[] NOT NULL,
    CONSTRAINT uncertain_reservations_outcome_check CHECK ((outcome = ANY (ARRAY['succeeded'::text, 'failed'::text, 'released'::text])))
);


--
-- Name: chargeonce_remember_uncertain_end(public.uncertain_reservations, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_remember_uncertain_end(u public.uncertain_reservations, how text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
  IF u.request_id = '' THEN
    RETURN;
  END IF;
  INSERT INTO ended_reservations (id, chat_id, kind, status, queue, held,
                                  request_id, slot, created_at,
                                  lease_expires_at, units, held_units,
                                  window_number)
    VALUES (u.id, u.chat_id, u.kind, how, u.queue, u.held, u.request_id,
            u.slot, u.created_at, NULL, u.units, u.held_units,
            u.window_number);
END $$;


--
-- Name: chargeonce_reservation_at(integer, public.reservations); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_reservation_at(i integer, r public.reservations) RETURNS public.chargeonce_outcome
    LANGUAGE sql STABLE
    AS $$
  SELECT ROW(i, 'ok', NULL, r.id, r.chat_id, r.kind, r.status, r.queue,
             r.held, r.request_id, chargeonce_us(r.created_at),
             chargeonce_us(r.lease_expires_at), r.slot, NULL,
             NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, r.units, r.held_units, NULL, NULL,
             r.cancel_requested, r.window_number, NULL, NULL)::chargeonce_outcome
$$;


--
-- Name: chargeonce_reservations_json(bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_reservations_json(p_chat bigint) RETURNS text
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
  RETURN (SELECT coalesce(json_agg(json_build_object(
           'id', id, 'chat', chat_id, 'kind', kind, 'status', status,
           'queue', queue, 'held', held, 'request_id', request_id,
           'created_us', chargeonce_us(created_at),
           'lease_us', chargeonce_us(lease_expires_at), 'slot', slot,
           'units', units, 'held_units', held_units,
           'cancel_requested', cancel_requested,
           'provider_ref', provider_ref,
           'uncertain_us', chargeonce_us(uncertain_at),
           'window', window_number)
           ORDER BY uncertain_at NULLS FIRST, created_at, id)::text, '[]')
    FROM (SELECT id, chat_id, kind, status, queue, held, request_id,
                 created_at, lease_expires_at, slot, units, held_units,
                 cancel_requested, NULL::text AS provider_ref,
                 NULL::timestamptz AS uncertain_at, window_number
            FROM reservations WHERE chat_id = p_chat
          UNION ALL
          SELECT id, chat_id, kind, 'outcome_unknown', queue, held,
                 request_id, created_at, NULL, -1, units, held_units,
                 cancel_requested, provider_ref, uncertain_at, window_number
            FROM uncertain_reservations
           WHERE chat_id = p_chat AND outcome IS NULL) x);
END $$;


--
-- Name: chargeonce_reserve(bigint, text, text, integer, integer, integer, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_reserve(p_chat bigint, p_kind text, p_request_id text, p_units integer, p_free_max integer, p_premium_max integer, p_products jsonb) RETURNS public.chargeonce_outcome
    LANGUAGE plpgsql
    AS $$
DECLARE
  spec jsonb := p_products -> p_kind;
  c record;
  a record;
  r reservations;
  o chargeonce_outcome;
  job_limit integer;
  free_slot integer;
  choice chargeonce_choice;
  hold chargeonce_grant_hold := ROW('{}', '{}');
  v_units integer := coalesce(nullif(p_units, 0), 1);
  low integer;
  available integer;
BEGIN
  IF spec IS NULL THEN
    RETURN chargeonce_refusal('invalid_argument', 'unknown kind ' || p_kind);
  END IF;
  IF v_units NOT BETWEEN 1 AND 1000000 THEN
    RETURN chargeonce_refusal('invalid_argument',
      'units must be 1 to 1000000, not ' || v_units);
  END IF;
  SELECT pockets, max_active_jobs,
         coalesce(premium_until > now(), false) AS premium, blocked, banned,
         window_number, next_expiry, sole_grant, balance_low_threshold
    INTO c FROM chats WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  -- An expired grant pays nothing new: its credits leave the balance
  -- before the decision reads it.
  IF c.next_expiry <= now() THEN
    PERFORM chargeonce_expire_grants(p_chat);
    SELECT pockets, max_active_jobs,
           coalesce(premium_until > now(), false) AS premium, blocked,
           banned, window_number, next_expiry, sole_grant,
           balance_low_threshold
      INTO c FROM chats WHERE chat_id = p_chat;
  END IF;
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
  -- An id a client made up (auto:) replays, but does not tell a double
  -- tap from a second job: beyond one job at once it counts as none.
  IF job_limit > 1 AND (p_request_id = '' OR p_request_id LIKE 'auto:%') THEN
    RETURN chargeonce_refusal('invalid_argument',
      'chat ' || p_chat || ' runs up to ' || job_limit
      || ' jobs at once: reserve needs a request_id'
      || CASE WHEN p_request_id <> '' THEN ' of the caller''s own, not an '
              || 'auto: one' ELSE '' END);
  END IF;
  -- What the holds take from the pockets of this window: a past
  -- window's only their balance part.
  SELECT count(slot) AS n,
         chargeonce_pockets_sum(chargeonce_in_window(held, w,
                                                     c.window_number))
           AS held,
         coalesce(array_agg(slot) FILTER (WHERE slot IS NOT NULL), '{}')
           AS slots
    INTO a
    FROM (SELECT held, slot, window_number AS w FROM reservations
           WHERE chat_id = p_chat
          UNION ALL
          SELECT held, NULL, window_number FROM uncertain_reservations
           WHERE chat_id = p_chat AND outcome IS NULL) x;
  -- The refusal order of 0.1.0, where one job at a time made busy and
  -- cannot-pay exclusive: pockets that cannot pay even with nothing held
  -- first (insufficient_*), then no free slot (busy), then pockets the
  -- other jobs' holds leave short (insufficient_*).
  IF chargeonce_choose(spec, c.premium, c.pockets, '{}', v_units) IS NULL THEN
    RETURN chargeonce_refusal(spec ->> 'refusal',
      'chat ' || p_chat || ' cannot pay for ' || p_kind || (spec ->> 'why'));
  END IF;
  SELECT min(s) INTO free_slot FROM generate_series(0, job_limit - 1) AS s
   WHERE s <> ALL (a.slots) AND a.n < job_limit;
  IF free_slot IS NULL THEN
    RETURN chargeonce_refusal('busy',
      chargeonce_busy_message(p_chat, a.n, job_limit));
  END IF;
  choice := chargeonce_choose(spec, c.premium, c.pockets, a.held, v_units);
  IF choice IS NULL THEN
    RETURN chargeonce_refusal(spec ->> 'refusal',
      'chat ' || p_chat || ' cannot pay for ' || p_kind || (spec ->> 'why'));
  END IF;
  -- Balance is the one pocket that spans grants: the hold records which.
  IF choice.held[3] > 0 THEN
    hold := chargeonce_hold_grants(p_chat, choice.held[3], c.sole_grant);
  END IF;
  INSERT INTO reservations (chat_id, kind, queue, held, request_id, slot,
                            units, held_units, window_number, held_grants,
                            held_grant_credits)
    VALUES (p_chat, p_kind, chargeonce_queue(spec, c.premium),
            choice.held, p_request_id, free_slot, v_units, choice.held_units,
            c.window_number, hold.grant_ids, hold.credits)
    ON CONFLICT (chat_id, slot) DO NOTHING
    RETURNING * INTO r;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('busy',
      chargeonce_busy_message(p_chat, a.n + 1, job_limit));
  END IF;
  -- balance_low when this hold takes the available balance below the
  -- threshold (chargeonce_note_balance). The hot path: with no threshold
  -- (0, the default) a hold on balance costs one expression more, and one
  -- that holds no balance nothing; the threshold as chargeonce_low_threshold
  -- has it, inline.
  IF choice.held[3] > 0 THEN
    low := coalesce(c.balance_low_threshold,
                    nullif(current_setting('chargeonce.balance_low_threshold',
                                           true), '')::integer,
                    0);
    IF low > 0 THEN
      available := coalesce(c.pockets[3], 0) - coalesce(a.held[3], 0);
      PERFORM chargeonce_note_balance(p_chat, available,
                                      available - choice.held[3], low,
                                      'reserve', r.id);
    END IF;
  END IF;
  RETURN chargeonce_with_reservation(r);
END $$;


--
-- Name: chargeonce_resolution_of(public.uncertain_reservations); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_resolution_of(u public.uncertain_reservations) RETURNS public.chargeonce_resolution
    LANGUAGE sql STABLE
    AS $$
  SELECT ROW('ok', NULL, u.kind, u.outcome, u.charged, u.released,
             u.units_charged, chargeonce_us(u.resolved_at),
             u.provider_ref, u.window_number)::chargeonce_resolution
$$;


--
-- Name: chargeonce_resolution_refusal(text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_resolution_refusal(code text, msg text) RETURNS public.chargeonce_resolution
    LANGUAGE sql IMMUTABLE
    AS $$
  SELECT ROW(code, msg, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL)::chargeonce_resolution
$$;


--
-- Name: chargeonce_resolve(bigint, bigint, text, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_resolve(p_chat bigint, p_id bigint, p_outcome text, p_units integer) RETURNS public.chargeonce_resolution
    LANGUAGE plpgsql
    AS $$
DECLARE
  c record;
  u uncertain_reservations;
  o chargeonce_outcome;
  nominal integer[];
  taken integer[];
  v_charged integer[];
  after integer[];
BEGIN
  IF p_outcome NOT IN ('succeeded', 'failed') THEN
    RETURN chargeonce_resolution_refusal('invalid_argument',
      'outcome must be succeeded or failed, not ' || p_outcome);
  END IF;
  SELECT pockets, window_number, next_expiry INTO c FROM chats
   WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_resolution_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  -- Expired first, while the hold still counts as held (as commit).
  IF chargeonce_expire_if_due(p_chat, c.next_expiry) THEN
    SELECT pockets, window_number, next_expiry INTO c FROM chats
     WHERE chat_id = p_chat;
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
    PERFORM chargeonce_settle_hold(p_chat, u.held_grants,
                                   u.held_grant_credits, 0, p_id);
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
  -- As commit: a hold of a past window takes nothing more of the daily
  -- pockets.
  nominal := chargeonce_captured(u.held, u.held_units, u.units, p_units);
  v_charged := chargeonce_charged_in(nominal, u.window_number, c.window_number,
                                   c.pockets);
  -- As commit: the balance part from the hold's grants.
  IF cardinality(u.held_grants) > 0 THEN
    taken := chargeonce_settle_hold(p_chat, u.held_grants,
                                    u.held_grant_credits, v_charged[3], p_id);
    IF nominal[3] IS NOT NULL THEN
      v_charged := chargeonce_pockets_set(v_charged, 3,
        (SELECT sum(t)::integer FROM unnest(taken) AS t));
    END IF;
    SELECT pockets INTO c.pockets FROM chats WHERE chat_id = p_chat;
  END IF;
  UPDATE chats SET pockets = chargeonce_pockets_take(pockets,
                     chargeonce_pockets_charged(
                       chargeonce_in_window(nominal, u.window_number,
                                            c.window_number),
                       v_charged))
   WHERE chat_id = p_chat RETURNING pockets INTO after;
  INSERT INTO ledger (reservation_id, chat_id, kind, charged, units, released,
                      pockets, changed, window_number, grant_ids,
                      grant_credits)
    VALUES (p_id, p_chat, u.kind, v_charged,
            coalesce(nullif(p_units, 0), u.units),
            chargeonce_pockets_less(u.held, nominal), after,
            chargeonce_pockets_change(c.pockets, after), u.window_number,
            u.held_grants, coalesce(taken, '{}'));
  UPDATE uncertain_reservations
     SET outcome = 'succeeded', resolved_at = now(),
         charged = v_charged,
         released = chargeonce_pockets_less(u.held, nominal),
         units_charged = coalesce(nullif(p_units, 0), u.units)
   WHERE id = p_id RETURNING * INTO u;
  PERFORM chargeonce_remember_uncertain_end(u, 'committed');
  RETURN chargeonce_resolution_of(u);
END $$;


--
-- Name: chargeonce_settle_hold(bigint, bigint[], integer[], integer, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_settle_hold(p_chat bigint, p_grants bigint[], p_credits integer[], p_charge integer, p_reservation bigint) RETURNS integer[]
    LANGUAGE plpgsql
    AS $$
DECLARE
  need integer := GREATEST(0, coalesce(p_charge, 0));
  taken integer[] := '{}';
  g grants;
  take integer;
  rest integer;
  how text;
BEGIN
  FOR i IN 1 .. coalesce(cardinality(p_grants), 0) LOOP
    SELECT * INTO g FROM grants
     WHERE grant_id = p_grants[i] AND chat_id = p_chat FOR UPDATE;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'reservation % holds grant % that chat % does not '
        'have (a bug)', p_reservation, p_grants[i], p_chat;
    END IF;
    take := GREATEST(0, LEAST(need, p_credits[i], chargeonce_grant_left(g)));
    rest := GREATEST(0, LEAST(p_credits[i], chargeonce_grant_left(g)) - take);
    need := need - take;
    how := CASE WHEN rest > 0 THEN chargeonce_grant_end(g) END;
    IF take > 0 OR how IS NOT NULL THEN
      UPDATE grants
         SET charged = charged + take,
             voided = voided + CASE WHEN how = 'void' THEN rest ELSE 0 END,
             expired = expired + CASE WHEN how = 'expire' THEN rest ELSE 0 END,
             expired_at = CASE WHEN how = 'expire'
                               THEN coalesce(expired_at, now())
                               ELSE expired_at END
       WHERE grant_id = g.grant_id;
    END IF;
    IF how IS NOT NULL THEN
      PERFORM chargeonce_grant_leaves(p_chat, g.grant_id, rest, how,
        'grant ' || g.grant_id || CASE how WHEN 'void' THEN ' voided'
                                           ELSE ' expired' END
        || ': released by reservation ' || p_reservation);
    END IF;
    taken := taken || take;
  END LOOP;
  RETURN taken;
END $$;


--
-- Name: chargeonce_sole_grant(bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_sole_grant(p_chat bigint) RETURNS bigint
    LANGUAGE sql STABLE
    AS $$
  SELECT CASE WHEN count(*) = 1 THEN min(g.grant_id) END
    FROM grants g
   WHERE g.chat_id = p_chat AND g.expired_at IS NULL AND g.voided_at IS NULL
     AND chargeonce_grant_left(g) > 0
$$;


--
-- Name: chargeonce_spending_order(public.grants); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_spending_order(g public.grants) RETURNS public.chargeonce_spending_key
    LANGUAGE sql IMMUTABLE
    AS $$
  SELECT ROW(g.priority, g.expires_at IS NULL, g.expires_at,
             CASE g.source WHEN 'promo' THEN 0 WHEN 'admin' THEN 1 ELSE 2 END,
             g.created_at, g.grant_id)::chargeonce_spending_key
$$;


--
-- Name: chargeonce_start(bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_start(p_chat bigint, p_id bigint) RETURNS public.chargeonce_outcome
    LANGUAGE plpgsql
    AS $$
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


--
-- Name: chargeonce_status(bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_status(p_chat bigint) RETURNS public.chargeonce_outcome
    LANGUAGE plpgsql STABLE
    AS $$
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
  IF c.next_expiry <= now() THEN
    o.s_pockets[3] := o.s_pockets[3] - chargeonce_expiring_unheld(p_chat);
  END IF;
  o.s_premium_us := chargeonce_us(c.premium_until);
  o.s_premium := coalesce(c.premium_until > now(), false);
  o.s_started := c.started;
  o.s_blocked := c.blocked;
  o.s_banned := c.banned;
  o.s_window_us := chargeonce_us(c.window_started_at);
  o.s_activity_us := chargeonce_us(c.last_activity_at);
  o.s_max_jobs := c.max_active_jobs;
  o.s_low_threshold := c.balance_low_threshold;
  o.s_reservations := chargeonce_reservations_json(p_chat);
  o.s_grants := chargeonce_grants_json(p_chat);
  -- A status answer's window is the chat's.
  o.window_number := c.window_number;
  RETURN o;
END $$;


--
-- Name: chargeonce_top_up(bigint, integer, text, timestamp with time zone, bigint, integer, text, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_top_up(p_chat bigint, p_credits integer, p_payment_id text, p_expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_expires_in_ms bigint DEFAULT NULL::bigint, p_priority integer DEFAULT NULL::integer, p_source text DEFAULT NULL::text, p_notice_ms bigint DEFAULT NULL::bigint) RETURNS public.chargeonce_grant_answer
    LANGUAGE plpgsql
    AS $$
DECLARE
  v_priority integer := coalesce(p_priority, 100);
  v_source text := coalesce(p_source, 'purchase');
  why text := chargeonce_top_up_invalid(p_credits, p_expires_at,
                                        p_expires_in_ms, p_priority, p_source);
  v_expires_at timestamptz;
  c record;
  g grants;
  l record;
  o chargeonce_grant_answer;
BEGIN
  IF why IS NOT NULL THEN
    RETURN chargeonce_grant_refusal('invalid_argument', why);
  END IF;
  SELECT pockets, next_expiry INTO c FROM chats
   WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_grant_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  -- Under the chat lock, a retry of the same purchase sees the first.
  SELECT * INTO g FROM grants WHERE payment_id = p_payment_id;
  IF FOUND THEN
    IF g.chat_id <> p_chat OR g.credits <> p_credits THEN
      RETURN chargeonce_grant_refusal('invalid_argument',
        'payment_id ' || p_payment_id || ' was already used for '
        || g.credits || ' credits of chat ' || g.chat_id);
    END IF;
    IF g.priority <> v_priority OR g.source <> v_source
       OR g.expires_in_ms IS DISTINCT FROM p_expires_in_ms
       OR (p_expires_in_ms IS NULL
           AND g.expires_at IS DISTINCT FROM p_expires_at) THEN
      RETURN chargeonce_grant_refusal('invalid_argument',
        'payment_id ' || p_payment_id || ' was already used for a grant '
        || 'with priority ' || g.priority || ', source ' || g.source
        || CASE WHEN g.expires_in_ms IS NOT NULL
                THEN ', expires_in ' || g.expires_in_ms || ' ms'
                WHEN g.expires_at IS NOT NULL
                THEN ', expires_at ' || g.expires_at
                ELSE ', no expiry' END);
    END IF;
    RETURN chargeonce_grant_answer_of(g);
  END IF;
  -- A top-up of 0.2 (before grants) names no grant: its ledger row answers.
  SELECT chat_id, credited_balance, committed_at INTO l
    FROM ledger WHERE payment_id = p_payment_id;
  IF FOUND THEN
    IF l.chat_id <> p_chat OR l.credited_balance <> p_credits THEN
      RETURN chargeonce_grant_refusal('invalid_argument',
        'payment_id ' || p_payment_id || ' was already used for '
        || l.credited_balance || ' credits of chat ' || l.chat_id);
    END IF;
    o.outcome := 'ok';
    o.chat_id := l.chat_id;
    o.credits := l.credited_balance;
    o.payment_id := p_payment_id;
    o.committed_us := chargeonce_us(l.committed_at);
    RETURN o;
  END IF;
  IF p_expires_at <= now() THEN
    RETURN chargeonce_grant_refusal('invalid_argument',
      'expires_at ' || p_expires_at || ' is not in the future');
  END IF;
  IF chargeonce_expire_if_due(p_chat, c.next_expiry) THEN
    SELECT pockets, next_expiry INTO c FROM chats WHERE chat_id = p_chat;
  END IF;
  IF coalesce(c.pockets[3], 0)::bigint + p_credits > 2147483647 THEN
    RETURN chargeonce_grant_refusal('invalid_argument',
      'balance of chat ' || p_chat || ' would overflow');
  END IF;
  v_expires_at := coalesce(p_expires_at,
                           now() + p_expires_in_ms * interval '1 millisecond');
  -- Inside the notice window: noticed as it is made, so that the scan
  -- never writes a second credits_expiring for it.
  INSERT INTO grants (chat_id, source, credits, priority, expires_at,
                      expires_in_ms, payment_id, expiring_noticed_at)
    VALUES (p_chat, v_source, p_credits, v_priority, v_expires_at,
            p_expires_in_ms, p_payment_id,
            CASE WHEN v_expires_at
                      <= now() + p_notice_ms * interval '1 millisecond'
                 THEN now() END)
    ON CONFLICT (payment_id) WHERE payment_id IS NOT NULL DO NOTHING
    RETURNING * INTO g;
  IF NOT FOUND THEN
    -- The same payment_id committed for another chat in the meantime.
    RETURN chargeonce_grant_refusal('invalid_argument',
      'payment_id ' || p_payment_id || ' was already used for another chat');
  END IF;
  IF g.expiring_noticed_at IS NOT NULL THEN
    INSERT INTO events (event, chat_id, detail, grant_id, credits,
                        expires_at)
      VALUES ('credits_expiring', p_chat, chargeonce_expiring_detail(g),
              g.grant_id, g.credits, g.expires_at);
  END IF;
  UPDATE chats
     SET pockets = chargeonce_pockets_set(pockets, 3,
                     coalesce(pockets[3], 0) + p_credits),
         next_expiry = LEAST(next_expiry, g.expires_at)
   WHERE chat_id = p_chat RETURNING pockets INTO c.pockets;
  INSERT INTO ledger (entry, chat_id, payment_id, credited_balance, pockets,
                      grant_ids, grant_credits)
    VALUES ('top_up', p_chat, p_payment_id, p_credits, c.pockets,
            ARRAY[g.grant_id], ARRAY[p_credits]);
  RETURN chargeonce_grant_answer_of(g);
END $$;


--
-- Name: chargeonce_top_up_invalid(integer, timestamp with time zone, bigint, integer, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_top_up_invalid(p_credits integer, p_expires_at timestamp with time zone, p_expires_in_ms bigint, p_priority integer, p_source text) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $$
  SELECT CASE
    WHEN coalesce(p_credits, 0) <= 0
      THEN 'credits must be positive, not ' || coalesce(p_credits::text, 'none')
    WHEN p_expires_at IS NOT NULL AND p_expires_in_ms IS NOT NULL
      THEN 'a top-up gives expires_at or expires_in, not both'
    WHEN p_expires_in_ms <= 0
      THEN 'expires_in must be positive, not ' || p_expires_in_ms || ' ms'
    WHEN p_priority NOT BETWEEN 0 AND 1000
      THEN 'priority must be 0 to 1000, not ' || p_priority
    WHEN p_source NOT IN ('purchase', 'promo', 'admin')
      THEN 'source must be purchase, promo or admin, not ' || p_source
  END
$$;


--
-- Name: chargeonce_uncertain(bigint, bigint, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_uncertain(p_chat bigint, p_id bigint, p_ref text) RETURNS public.chargeonce_outcome
    LANGUAGE plpgsql
    AS $$
DECLARE
  r reservations;
  u uncertain_reservations;
BEGIN
  DELETE FROM reservations
   WHERE id = p_id AND chat_id = p_chat AND status = 'in_progress'
  RETURNING * INTO r;
  IF FOUND THEN
    INSERT INTO uncertain_reservations (id, chat_id, kind, queue, held,
                                        held_units, units, request_id, slot,
                                        created_at, cancel_requested,
                                        provider_ref, window_number,
                                        held_grants, held_grant_credits)
      VALUES (r.id, r.chat_id, r.kind, r.queue, r.held, r.held_units,
              r.units, r.request_id, r.slot, r.created_at,
              r.cancel_requested, p_ref, r.window_number, r.held_grants,
              r.held_grant_credits)
      RETURNING * INTO u;
    RETURN chargeonce_with_uncertain(u);
  END IF;
  -- Read after the delete: a concurrent first call has committed by now.
  SELECT * INTO u FROM uncertain_reservations WHERE id = p_id;
  IF FOUND AND u.chat_id = p_chat THEN
    IF u.outcome IS NOT NULL THEN
      RETURN chargeonce_explain_missing(p_chat, p_id);
    END IF;
    IF u.provider_ref <> p_ref THEN
      RETURN chargeonce_refusal('invalid_argument',
        chargeonce_describe(p_chat, p_id) || ' is already uncertain with '
        || 'provider_ref ' || u.provider_ref);
    END IF;
    RETURN chargeonce_with_uncertain(u);
  END IF;
  IF EXISTS (SELECT 1 FROM reservations WHERE id = p_id AND chat_id = p_chat) THEN
    RETURN chargeonce_refusal('invalid_state',
      chargeonce_describe(p_chat, p_id) || ' was never started');
  END IF;
  RETURN chargeonce_explain_missing(p_chat, p_id);
END $$;


--
-- Name: chargeonce_us(timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_us(t timestamp with time zone) RETURNS bigint
    LANGUAGE sql STABLE
    AS $$ SELECT (extract(epoch FROM t) * 1000000)::bigint $$;


--
-- Name: chargeonce_void_grant(bigint, bigint, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_void_grant(p_chat bigint, p_grant bigint, p_payment_id text DEFAULT NULL::text) RETURNS public.chargeonce_grant_answer
    LANGUAGE plpgsql
    AS $$
DECLARE
  due timestamptz;
  g grants;
  held integer;
  gone integer;
  low integer;
  balance_before integer;
  held_balance integer;
BEGIN
  IF (p_grant IS NULL) = (p_payment_id IS NULL) THEN
    RETURN chargeonce_grant_refusal('invalid_argument',
      'void-grant names a grant or a payment_id, one of them');
  END IF;
  SELECT next_expiry INTO due FROM chats WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_grant_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  -- Expired first if it was due: credits expire or are voided, not both.
  PERFORM chargeonce_expire_if_due(p_chat, due);
  SELECT * INTO g FROM grants
   WHERE chat_id = p_chat
     AND (grant_id = p_grant OR payment_id = p_payment_id)
   FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_grant_refusal('not_found',
      'chat ' || p_chat || ' has no grant '
      || coalesce(p_grant::text, 'of payment_id ' || p_payment_id));
  END IF;
  IF g.voided_at IS NOT NULL THEN
    RETURN chargeonce_grant_answer_of(g);
  END IF;
  held := coalesce((SELECT h.held FROM chargeonce_grants_held(p_chat) h
                     WHERE h.grant_id = g.grant_id), 0);
  gone := GREATEST(0, chargeonce_grant_left(g) - held);
  SELECT chargeonce_low_threshold(balance_low_threshold),
         coalesce(pockets[3], 0)
    INTO low, balance_before FROM chats WHERE chat_id = p_chat;
  UPDATE grants SET voided = voided + gone, voided_at = now()
   WHERE grant_id = g.grant_id RETURNING * INTO g;
  PERFORM chargeonce_grant_leaves(p_chat, g.grant_id, gone, 'void',
    'grant ' || g.grant_id || ' voided'
    || CASE WHEN held > 0 THEN ' (' || held || ' credits still held)'
            ELSE '' END);
  IF low > 0 AND gone > 0 THEN
    held_balance := chargeonce_balance_held(p_chat);
    PERFORM chargeonce_note_balance(p_chat, balance_before - held_balance,
      (SELECT coalesce(pockets[3], 0) FROM chats WHERE chat_id = p_chat)
        - held_balance,
      low, 'void');
  END IF;
  UPDATE chats SET next_expiry = chargeonce_next_expiry(p_chat)
   WHERE chat_id = p_chat;
  RETURN chargeonce_grant_answer_of(g);
END $$;


--
-- Name: chargeonce_with_reservation(public.reservations); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_with_reservation(r public.reservations) RETURNS public.chargeonce_outcome
    LANGUAGE plpgsql STABLE
    AS $$
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
  o.r_units := r.units;
  o.r_held_units := r.held_units;
  o.r_cancel_requested := r.cancel_requested;
  o.window_number := r.window_number;
  RETURN o;
END $$;


--
-- Name: chargeonce_with_uncertain(public.uncertain_reservations); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.chargeonce_with_uncertain(u public.uncertain_reservations) RETURNS public.chargeonce_outcome
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
  o chargeonce_outcome;
BEGIN
  o.outcome := 'ok';
  o.r_id := u.id;
  o.r_chat := u.chat_id;
  o.r_kind := u.kind;
  o.r_status := 'outcome_unknown';
  o.r_queue := u.queue;
  o.r_held := u.held;
  o.r_request_id := u.request_id;
  o.r_created_us := chargeonce_us(u.created_at);
  o.r_slot := -1;
  o.r_units := u.units;
  o.r_held_units := u.held_units;
  o.r_cancel_requested := u.cancel_requested;
  o.window_number := u.window_number;
  RETURN o;
END $$;


--
-- Name: chargeonce_pockets_sum(integer[]); Type: AGGREGATE; Schema: public; Owner: -
--

CREATE AGGREGATE public.chargeonce_pockets_sum(integer[]) (
    SFUNC = public.chargeonce_pockets_add,
    STYPE = integer[],
    INITCOND = '{}'
);


--
-- Name: catalog_kinds; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.catalog_kinds (
    kind text NOT NULL,
    added_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT catalog_kinds_kind_check CHECK ((kind ~ '^[a-z][a-z0-9_]{0,31}$'::text))
);


--
-- Name: catalog_pockets; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.catalog_pockets (
    pocket text NOT NULL,
    ordinal integer NOT NULL,
    added_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT catalog_pockets_ordinal_check CHECK (((ordinal >= 1) AND (ordinal <= 1000))),
    CONSTRAINT catalog_pockets_pocket_check CHECK ((pocket ~ '^[a-z][a-z0-9_]{0,31}$'::text))
);


--
-- Name: chats; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.chats (
    chat_id bigint NOT NULL,
    premium_until timestamp with time zone,
    window_started_at timestamp with time zone,
    last_activity_at timestamp with time zone,
    started boolean DEFAULT false NOT NULL,
    blocked boolean DEFAULT false NOT NULL,
    banned boolean DEFAULT false NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    reactivated_at timestamp with time zone,
    max_active_jobs integer,
    pockets integer[] DEFAULT '{}'::integer[] NOT NULL,
    window_number bigint DEFAULT 0 NOT NULL,
    next_expiry timestamp with time zone,
    sole_grant bigint,
    balance_low_threshold integer,
    CONSTRAINT chats_balance_low_threshold_check CHECK ((balance_low_threshold >= 0)),
    CONSTRAINT chats_max_active_jobs_check CHECK (((max_active_jobs >= 1) AND (max_active_jobs <= 64))),
    CONSTRAINT chats_pockets CHECK (((array_ndims(pockets) = 1) AND (array_lower(pockets, 1) = 1) AND (0 <= ALL (pockets))))
);


--
-- Name: ended_reservations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ended_reservations (
    id bigint NOT NULL,
    chat_id bigint NOT NULL,
    kind text NOT NULL,
    status text NOT NULL,
    queue text NOT NULL,
    request_id text NOT NULL,
    slot integer NOT NULL,
    created_at timestamp with time zone NOT NULL,
    lease_expires_at timestamp with time zone,
    ended_at timestamp with time zone DEFAULT now() NOT NULL,
    held integer[] DEFAULT '{}'::integer[] NOT NULL,
    units integer DEFAULT 1 NOT NULL,
    held_units integer[] DEFAULT '{}'::integer[] NOT NULL,
    window_number bigint DEFAULT 0 NOT NULL,
    CONSTRAINT ended_reservations_request_id_check CHECK ((request_id <> ''::text)),
    CONSTRAINT ended_reservations_status_check CHECK ((status = ANY (ARRAY['committed'::text, 'failed'::text, 'cancelled'::text, 'released'::text])))
);


--
-- Name: event_clock; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.event_clock (
    only_row boolean DEFAULT true NOT NULL,
    last_id bigint NOT NULL,
    CONSTRAINT event_clock_only_row_check CHECK (only_row)
);


--
-- Name: events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.events (
    seq bigint NOT NULL,
    id bigint,
    event text NOT NULL,
    chat_id bigint NOT NULL,
    reservation_id bigint,
    detail text,
    at timestamp with time zone DEFAULT now() NOT NULL,
    grant_id bigint,
    credits integer,
    expires_at timestamp with time zone,
    threshold integer,
    CONSTRAINT events_event_check CHECK ((event = ANY (ARRAY['reservation_released'::text, 'limits_refilled'::text, 'cancel_requested'::text, 'reconcile_needed'::text, 'credits_expired'::text, 'credits_expiring'::text, 'balance_low'::text])))
);


--
-- Name: events_seq_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.events ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.events_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: grants_grant_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.grants ALTER COLUMN grant_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.grants_grant_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: ledger; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ledger (
    id bigint NOT NULL,
    reservation_id bigint,
    chat_id bigint NOT NULL,
    kind text,
    committed_at timestamp with time zone DEFAULT now() NOT NULL,
    entry text DEFAULT 'charge'::text NOT NULL,
    payment_id text,
    credited_balance integer DEFAULT 0 NOT NULL,
    charged integer[] DEFAULT '{}'::integer[] NOT NULL,
    units integer DEFAULT 1 NOT NULL,
    released integer[] DEFAULT '{}'::integer[] NOT NULL,
    window_number bigint,
    pockets integer[],
    changed integer[] DEFAULT '{}'::integer[] NOT NULL,
    detail text,
    grant_ids bigint[] DEFAULT '{}'::bigint[] NOT NULL,
    grant_credits integer[] DEFAULT '{}'::integer[] NOT NULL,
    CONSTRAINT ledger_changed CHECK (((array_ndims(changed) = 1) AND (array_lower(changed, 1) = 1))),
    CONSTRAINT ledger_charged CHECK (((array_ndims(charged) = 1) AND (array_lower(charged, 1) = 1))),
    CONSTRAINT ledger_credited_balance_check CHECK ((credited_balance >= 0)),
    CONSTRAINT ledger_entry_check CHECK ((entry = ANY (ARRAY['charge'::text, 'top_up'::text, 'refill'::text, 'admin'::text, 'expire'::text, 'void'::text]))),
    CONSTRAINT ledger_entry_shape CHECK ((((entry = 'charge'::text) AND (reservation_id IS NOT NULL) AND (kind IS NOT NULL) AND (payment_id IS NULL) AND (detail IS NULL)) OR ((entry = 'top_up'::text) AND (reservation_id IS NULL) AND (payment_id IS NOT NULL) AND (credited_balance > 0) AND (detail IS NULL)) OR ((entry = ANY (ARRAY['refill'::text, 'admin'::text])) AND (reservation_id IS NULL) AND (payment_id IS NULL) AND (kind IS NULL) AND (credited_balance = 0) AND (detail IS NOT NULL) AND (pockets IS NOT NULL)) OR ((entry = ANY (ARRAY['expire'::text, 'void'::text])) AND (reservation_id IS NULL) AND (payment_id IS NULL) AND (kind IS NULL) AND (credited_balance = 0) AND (cardinality(grant_ids) = 1) AND (detail IS NOT NULL) AND (pockets IS NOT NULL)))),
    CONSTRAINT ledger_pockets CHECK (((array_ndims(pockets) = 1) AND (array_lower(pockets, 1) = 1)))
);


--
-- Name: ledger_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.ledger ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.ledger_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: released_reservations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.released_reservations (
    id bigint NOT NULL,
    chat_id bigint NOT NULL,
    reason text NOT NULL,
    released_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT released_reservations_reason_check CHECK ((reason = ANY (ARRAY['lease_expired'::text, 'sweep_timeout'::text])))
);


--
-- Name: reservations_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.reservations ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.reservations_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: catalog_kinds catalog_kinds_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.catalog_kinds
    ADD CONSTRAINT catalog_kinds_pkey PRIMARY KEY (kind);


--
-- Name: catalog_pockets catalog_pockets_ordinal_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.catalog_pockets
    ADD CONSTRAINT catalog_pockets_ordinal_key UNIQUE (ordinal);


--
-- Name: catalog_pockets catalog_pockets_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.catalog_pockets
    ADD CONSTRAINT catalog_pockets_pkey PRIMARY KEY (pocket);


--
-- Name: chats chats_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.chats
    ADD CONSTRAINT chats_pkey PRIMARY KEY (chat_id);


--
-- Name: ended_reservations ended_reservations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ended_reservations
    ADD CONSTRAINT ended_reservations_pkey PRIMARY KEY (id);


--
-- Name: ended_reservations ended_reservations_request_id; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ended_reservations
    ADD CONSTRAINT ended_reservations_request_id UNIQUE (chat_id, request_id);


--
-- Name: event_clock event_clock_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.event_clock
    ADD CONSTRAINT event_clock_pkey PRIMARY KEY (only_row);


--
-- Name: events events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (seq);


--
-- Name: grants grants_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.grants
    ADD CONSTRAINT grants_pkey PRIMARY KEY (grant_id);


--
-- Name: ledger ledger_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ledger
    ADD CONSTRAINT ledger_pkey PRIMARY KEY (id);


--
-- Name: ledger ledger_reservation_id_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ledger
    ADD CONSTRAINT ledger_reservation_id_key UNIQUE (reservation_id);


--
-- Name: released_reservations released_reservations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.released_reservations
    ADD CONSTRAINT released_reservations_pkey PRIMARY KEY (id);


--
-- Name: reservations reservations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reservations
    ADD CONSTRAINT reservations_pkey PRIMARY KEY (id);


--
-- Name: reservations reservations_slot; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.reservations
    ADD CONSTRAINT reservations_slot UNIQUE (chat_id, slot);


--
-- Name: uncertain_reservations uncertain_reservations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.uncertain_reservations
    ADD CONSTRAINT uncertain_reservations_pkey PRIMARY KEY (id);


--
-- Name: chats_reactivation; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX chats_reactivation ON public.chats USING btree (last_activity_at, chat_id) WHERE (started AND (NOT blocked) AND (NOT banned) AND (last_activity_at IS NOT NULL) AND ((reactivated_at IS NULL) OR (reactivated_at < last_activity_at)));


--
-- Name: ended_reservations_chat_not_committed; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ended_reservations_chat_not_committed ON public.ended_reservations USING btree (chat_id, ended_at) WHERE (status <> 'committed'::text);


--
-- Name: ended_reservations_ended_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ended_reservations_ended_at ON public.ended_reservations USING btree (ended_at);


--
-- Name: events_id; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX events_id ON public.events USING btree (id) WHERE (id IS NOT NULL);


--
-- Name: events_unnumbered; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX events_unnumbered ON public.events USING btree (seq) WHERE (id IS NULL);


--
-- Name: grants_chat_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX grants_chat_id ON public.grants USING btree (chat_id, grant_id);


--
-- Name: grants_due; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX grants_due ON public.grants USING btree (expires_at) WHERE ((expired_at IS NULL) AND (voided_at IS NULL) AND (expires_at IS NOT NULL));


--
-- Name: grants_payment_id; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX grants_payment_id ON public.grants USING btree (payment_id) WHERE (payment_id IS NOT NULL);


--
-- Name: ledger_chat_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ledger_chat_id ON public.ledger USING btree (chat_id, id);


--
-- Name: ledger_payment_id; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX ledger_payment_id ON public.ledger USING btree (payment_id) WHERE (payment_id IS NOT NULL);


--
-- Name: released_reservations_chat_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX released_reservations_chat_id ON public.released_reservations USING btree (chat_id, released_at);


--
-- Name: released_reservations_released_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX released_reservations_released_at ON public.released_reservations USING btree (released_at);


--
-- Name: reservations_created_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX reservations_created_at ON public.reservations USING btree (created_at);


--
-- Name: reservations_lease_expires_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX reservations_lease_expires_at ON public.reservations USING btree (lease_expires_at) WHERE (lease_expires_at IS NOT NULL);


--
-- Name: reservations_request_id; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX reservations_request_id ON public.reservations USING btree (chat_id, request_id) WHERE (request_id <> ''::text);


--
-- Name: uncertain_reservations_chat_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX uncertain_reservations_chat_id ON public.uncertain_reservations USING btree (chat_id, uncertain_at);


--
-- Name: uncertain_reservations_open; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX uncertain_reservations_open ON public.uncertain_reservations USING btree (chat_id) WHERE (outcome IS NULL);


--
-- Name: uncertain_reservations_request_id; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX uncertain_reservations_request_id ON public.uncertain_reservations USING btree (chat_id, request_id) WHERE ((outcome IS NULL) AND (request_id <> ''::text));


--
-- Name: uncertain_reservations_resolved_at; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX uncertain_reservations_resolved_at ON public.uncertain_reservations USING btree (resolved_at) WHERE (outcome IS NOT NULL);


--
-- Name: uncertain_reservations_since; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX uncertain_reservations_since ON public.uncertain_reservations USING btree (uncertain_at, id) WHERE (outcome IS NULL);


--
-- Name: uncertain_reservations_unresolved; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX uncertain_reservations_unresolved ON public.uncertain_reservations USING btree (id) WHERE (outcome IS NULL);


--
-- Name: chats chats_chat_id_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER chats_chat_id_changed AFTER UPDATE OF chat_id ON public.chats FOR EACH ROW WHEN ((old.chat_id IS DISTINCT FROM new.chat_id)) EXECUTE FUNCTION public.chargeonce_chat_id_changed();


--
-- Name: chats chats_deleted; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER chats_deleted AFTER DELETE ON public.chats REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION public.chargeonce_chats_deleted();


--
-- Name: chats chats_truncated; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER chats_truncated BEFORE TRUNCATE ON public.chats FOR EACH STATEMENT EXECUTE FUNCTION public.chargeonce_chats_truncated();


--
-- Name: grants grants_chat_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER grants_chat_changed AFTER UPDATE OF chat_id ON public.grants FOR EACH ROW WHEN ((old.chat_id IS DISTINCT FROM new.chat_id)) EXECUTE FUNCTION public.chargeonce_check_chat_reference();


--
-- Name: grants grants_chat_reference; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER grants_chat_reference BEFORE INSERT ON public.grants FOR EACH ROW WHEN ((current_setting('chargeonce.references_checked'::text, true) IS DISTINCT FROM 'on'::text)) EXECUTE FUNCTION public.chargeonce_check_chat_reference();


--
-- Name: grants grants_sole_grant_added; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER grants_sole_grant_added AFTER INSERT ON public.grants REFERENCING NEW TABLE AS added_grants FOR EACH STATEMENT EXECUTE FUNCTION public.chargeonce_grants_added();


--
-- Name: grants grants_sole_grant_ended; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER grants_sole_grant_ended AFTER UPDATE OF expired_at, voided_at ON public.grants FOR EACH ROW WHEN (((old.expired_at IS DISTINCT FROM new.expired_at) OR (old.voided_at IS DISTINCT FROM new.voided_at))) EXECUTE FUNCTION public.chargeonce_grant_ended();


--
-- Name: ledger ledger_chat_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ledger_chat_changed AFTER UPDATE OF chat_id ON public.ledger FOR EACH ROW WHEN ((old.chat_id IS DISTINCT FROM new.chat_id)) EXECUTE FUNCTION public.chargeonce_check_chat_reference();


--
-- Name: ledger ledger_chat_reference; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER ledger_chat_reference BEFORE INSERT ON public.ledger FOR EACH ROW WHEN ((current_setting('chargeonce.references_checked'::text, true) IS DISTINCT FROM 'on'::text)) EXECUTE FUNCTION public.chargeonce_check_chat_reference();


--
-- Name: released_reservations released_reservations_event; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER released_reservations_event AFTER INSERT ON public.released_reservations FOR EACH ROW EXECUTE FUNCTION public.chargeonce_event_released();


--
-- Name: reservations reservations_cancel_requested_event; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER reservations_cancel_requested_event AFTER UPDATE OF cancel_requested ON public.reservations FOR EACH ROW WHEN ((new.cancel_requested AND (NOT old.cancel_requested))) EXECUTE FUNCTION public.chargeonce_event_cancel_requested();


--
-- Name: reservations reservations_chat_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER reservations_chat_changed AFTER UPDATE OF chat_id ON public.reservations FOR EACH ROW WHEN ((old.chat_id IS DISTINCT FROM new.chat_id)) EXECUTE FUNCTION public.chargeonce_check_chat_reference();


--
-- Name: reservations reservations_chat_reference; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER reservations_chat_reference BEFORE INSERT ON public.reservations FOR EACH ROW WHEN ((current_setting('chargeonce.references_checked'::text, true) IS DISTINCT FROM 'on'::text)) EXECUTE FUNCTION public.chargeonce_check_chat_reference();


--
-- Name: uncertain_reservations uncertain_reservations_event; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER uncertain_reservations_event AFTER INSERT ON public.uncertain_reservations FOR EACH ROW EXECUTE FUNCTION public.chargeonce_event_reconcile_needed();


--
-- Name: uncertain_reservations uncertain_reservations_released_event; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER uncertain_reservations_released_event AFTER UPDATE OF outcome ON public.uncertain_reservations FOR EACH ROW WHEN (((old.outcome IS NULL) AND (new.outcome = 'released'::text))) EXECUTE FUNCTION public.chargeonce_event_unresolved();


--
-- PostgreSQL database dump complete
--


