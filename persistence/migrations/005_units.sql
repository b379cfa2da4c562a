-- Units: what a job may cost at most (reserve's `units`, 1 to 1,000,000)
-- and what it cost (commit's `units`, at most those). The hold is split
-- over the kind's pockets in the catalog's order, each paying as many units
-- as it covers at its price; a commit of fewer units charges them from the
-- pockets that expire first (the daily ones, by name, before balance) and
-- releases the rest. protocol/pockets.cpp's choose_pockets and captured
-- are the same rules in C++.
--
-- A reservation keeps its units and, per pocket, the units its hold there
-- pays for (held_units): commit never re-prices. The ledger keeps the units
-- charged and what was released. Existing rows held one unit each.
-- No CHECK on units: the functions below and the server refuse a bad
-- count, and a CHECK costs every statement that writes the row (see
-- 004_catalog.sql).

-- An existing hold paid for one unit from each pocket it lists.
CREATE FUNCTION pg_temp.chargeonce_one_unit_each(held jsonb) RETURNS jsonb
  LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(jsonb_object_agg(key, 1), '{}') FROM jsonb_each(held)
$$;

ALTER TABLE reservations
  ADD COLUMN units integer NOT NULL DEFAULT 1,
  ADD COLUMN held_units jsonb NOT NULL DEFAULT '{}';
UPDATE reservations SET held_units = pg_temp.chargeonce_one_unit_each(held)
 WHERE held <> '{}';

ALTER TABLE ended_reservations
  ADD COLUMN units integer NOT NULL DEFAULT 1,
  ADD COLUMN held_units jsonb NOT NULL DEFAULT '{}';
UPDATE ended_reservations
   SET held_units = pg_temp.chargeonce_one_unit_each(held)
 WHERE held <> '{}';

-- A top-up's row has units 1 and nothing released: neither means anything
-- there (a constant default adds the columns without rewriting the ledger).
ALTER TABLE ledger
  ADD COLUMN units integer NOT NULL DEFAULT 1,
  ADD COLUMN released jsonb NOT NULL DEFAULT '{}';

-- The answer row: the reservation's units, the receipt's units and what it
-- released, at the end (the positional helpers below list them last).
ALTER TYPE chargeonce_outcome
  ADD ATTRIBUTE r_units integer,
  ADD ATTRIBUTE r_held_units jsonb,
  ADD ATTRIBUTE c_units integer,
  ADD ATTRIBUTE c_released jsonb;

-- Amounts ---------------------------------------------------------------------

-- protocol/pockets.cpp's choose_pockets: the kind's "pay" list in order,
-- each pocket paying as many of the units left as what it has after `held`
-- (the chat's other active holds) covers at its price, until all are paid.
-- {"held": amounts, "units": units per pocket}; both empty for a premium
-- chat and a premium-free kind; NULL when the pockets cannot pay them all.
DROP FUNCTION chargeonce_choose(jsonb, boolean, jsonb, jsonb);
CREATE FUNCTION chargeonce_choose(spec jsonb, premium boolean, amounts jsonb,
                                  held jsonb, units integer)
  RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  i integer;
  pocket text;
  price integer;
  take integer;
  left_units integer := GREATEST(units, 1);
  h jsonb := '{}';
  u jsonb := '{}';
BEGIN
  IF premium AND (spec ->> 'free')::boolean THEN
    RETURN '{"held": {}, "units": {}}';
  END IF;
  -- One unit, the common case: the first pocket with its price left pays,
  -- and the answer is built once (each jsonb built costs; measured with
  -- scripts/bench at 64 clients).
  IF left_units = 1 THEN
    FOR i IN 0 .. jsonb_array_length(spec -> 'pay') - 1 LOOP
      pocket := spec -> 'pay' -> i ->> 0;
      price := (spec -> 'pay' -> i ->> 1)::integer;
      IF chargeonce_amount(amounts, pocket) - chargeonce_amount(held, pocket)
         >= price THEN
        RETURN jsonb_build_object('held', jsonb_build_object(pocket, price),
                                  'units', jsonb_build_object(pocket, 1));
      END IF;
    END LOOP;
    RETURN NULL;
  END IF;
  FOR i IN 0 .. jsonb_array_length(spec -> 'pay') - 1 LOOP
    EXIT WHEN left_units = 0;
    pocket := spec -> 'pay' -> i ->> 0;
    price := (spec -> 'pay' -> i ->> 1)::integer;
    -- A kind lists each pocket once (the server checks its catalog).
    take := LEAST(left_units,
                  GREATEST(0, chargeonce_amount(amounts, pocket)
                              - chargeonce_amount(held, pocket)) / price);
    IF take > 0 THEN
      h := h || jsonb_build_object(pocket, take * price);
      u := u || jsonb_build_object(pocket, take);
      left_units := left_units - take;
    END IF;
  END LOOP;
  IF left_units > 0 THEN
    RETURN NULL;
  END IF;
  RETURN jsonb_build_object('held', h, 'units', u);
END $$;

-- protocol/pockets.cpp's captured: the part of a hold of held_total units
-- that a commit of `units` charges before the clamp, the daily pockets (by
-- name, bytewise as C++ sorts them) before balance, at the hold's own
-- price per pocket. NULL, 0 or at least held_total: the whole hold.
CREATE FUNCTION chargeonce_captured(held jsonb, held_units jsonb,
                                    held_total integer, units integer)
  RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  k text;
  n integer;
  take integer;
  left_units integer := units;
  out jsonb := '{}';
BEGIN
  IF coalesce(units, 0) <= 0 OR units >= held_total THEN
    RETURN held;
  END IF;
  FOR k, n IN
    SELECT key, value::integer FROM jsonb_each_text(held_units)
     ORDER BY key = 'balance', key COLLATE "C"
  LOOP
    take := LEAST(left_units, n);
    IF n > 0 AND take > 0 THEN
      out := out || jsonb_build_object(k, chargeonce_amount(held, k) / n * take);
    END IF;
    left_units := left_units - take;
  END LOOP;
  RETURN out;
END $$;

-- a - b for the pockets of a, those left at 0 not listed: what a commit of
-- part of a hold released.
CREATE FUNCTION chargeonce_pockets_less(a jsonb, b jsonb)
  RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  k text;
  v integer;
  out jsonb := '{}';
BEGIN
  FOR k, v IN SELECT key, value::integer FROM jsonb_each_text(a) LOOP
    IF v - chargeonce_amount(b, k) <> 0 THEN
      out := out || jsonb_build_object(k, v - chargeonce_amount(b, k));
    END IF;
  END LOOP;
  RETURN out;
END $$;

-- The answer row's helpers, with the units --------------------------------------

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
  o.r_held := r.held;
  o.r_request_id := r.request_id;
  o.r_created_us := chargeonce_us(r.created_at);
  o.r_lease_us := chargeonce_us(r.lease_expires_at);
  o.r_slot := r.slot;
  o.r_units := r.units;
  o.r_held_units := r.held_units;
  RETURN o;
END $$;

-- Positional, for the set-based statements (inlined, no call per row): 14
-- r_ columns, 4 c_, 10 s_, then 2 r_ and 2 c_ of units.
CREATE OR REPLACE FUNCTION chargeonce_reservation_at(i integer, r reservations)
  RETURNS chargeonce_outcome LANGUAGE sql STABLE AS $$
  SELECT ROW(i, 'ok', NULL, r.id, r.chat_id, r.kind, r.status, r.queue,
             r.held, r.request_id, chargeonce_us(r.created_at),
             chargeonce_us(r.lease_expires_at), r.slot, NULL,
             NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, r.units, r.held_units, NULL, NULL)::chargeonce_outcome
$$;

CREATE OR REPLACE FUNCTION chargeonce_refusal_at(i integer, code text, msg text)
  RETURNS chargeonce_outcome LANGUAGE sql IMMUTABLE AS $$
  SELECT ROW(i, code, msg,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL)::chargeonce_outcome
$$;

DROP FUNCTION chargeonce_receipt_at(integer, bigint, text, jsonb, timestamptz);
CREATE FUNCTION chargeonce_receipt_at(i integer, chat bigint, k text,
                                      charged jsonb, at timestamptz,
                                      units integer, released jsonb)
  RETURNS chargeonce_outcome LANGUAGE sql STABLE AS $$
  SELECT ROW(i, 'ok', NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             chat, k, charged, chargeonce_us(at),
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, units, released)::chargeonce_outcome
$$;

-- Ending a reservation, finding one --------------------------------------------

CREATE OR REPLACE FUNCTION chargeonce_remember_end(r reservations, how text)
  RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF r.request_id = '' THEN
    RETURN;
  END IF;
  INSERT INTO ended_reservations (id, chat_id, kind, status, queue, held,
                                  request_id, slot, created_at,
                                  lease_expires_at, units, held_units)
    VALUES (r.id, r.chat_id, r.kind, how, r.queue, r.held, r.request_id,
            r.slot, r.created_at, r.lease_expires_at, r.units, r.held_units);
END $$;

-- The job request_id names in p_chat, active or ended, in one statement
-- (003_parallel_jobs.sql). NULL when none.
CREATE OR REPLACE FUNCTION chargeonce_find_request(p_chat bigint, p_request_id text)
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
         NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
         x.units, x.held_units, NULL, NULL
    INTO o
    FROM (SELECT id, chat_id, kind, status, queue, held, request_id,
                 created_at, lease_expires_at, slot,
                 NULL::timestamptz AS ended_at, units, held_units
            FROM reservations
           WHERE chat_id = p_chat AND request_id = p_request_id
          UNION ALL
          SELECT id, chat_id, kind, status, queue, held, request_id,
                 created_at, lease_expires_at, slot, ended_at, units,
                 held_units
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
           'lease_us', chargeonce_us(lease_expires_at), 'slot', slot,
           'units', units, 'held_units', held_units)
           ORDER BY created_at, id)::text, '[]')
    FROM reservations WHERE chat_id = p_chat);
END $$;

-- One operation at a time ----------------------------------------------------

DROP FUNCTION chargeonce_reserve(bigint, text, text, integer, integer, jsonb);
-- Lock, decide, hold: chargeonce_choose on what the pockets have left after
-- the other active holds, under the row lock; the lowest free slot below
-- the chat's limit, with the UNIQUE (chat_id, slot) index as the lock.
CREATE FUNCTION chargeonce_reserve(p_chat bigint, p_kind text,
                                   p_request_id text, p_units integer,
                                   p_free_max integer,
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
  choice jsonb;
  v_units integer := coalesce(nullif(p_units, 0), 1);
BEGIN
  -- The server checks the kind before it asks; a caller that did not is
  -- told the same.
  IF spec IS NULL THEN
    RETURN chargeonce_refusal('invalid_argument', 'unknown kind ' || p_kind);
  END IF;
  IF v_units NOT BETWEEN 1 AND 1000000 THEN
    RETURN chargeonce_refusal('invalid_argument',
      'units must be 1 to 1000000, not ' || v_units);
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
  choice := chargeonce_choose(spec, c.premium, c.pockets, a.held, v_units);
  IF choice IS NULL THEN
    RETURN chargeonce_refusal(spec ->> 'refusal',
      'chat ' || p_chat || ' cannot pay for ' || p_kind || (spec ->> 'why'));
  END IF;
  INSERT INTO reservations (chat_id, kind, queue, held, request_id, slot,
                            units, held_units)
    VALUES (p_chat, p_kind, chargeonce_queue(spec, c.premium),
            choice -> 'held', p_request_id, free_slot, v_units,
            choice -> 'units')
    ON CONFLICT (chat_id, slot) DO NOTHING
    RETURNING * INTO r;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('busy',
      chargeonce_busy_message(p_chat, a.n + 1, job_limit));
  END IF;
  RETURN chargeonce_with_reservation(r);
END $$;

DROP FUNCTION chargeonce_commit(bigint, bigint);
-- Exactly the held amounts for the units it cost (p_units; NULL or 0: all
-- of them), never re-priced, clamped at zero; the rest of the hold is
-- released. The ledger's unique reservation_id makes a repeated commit
-- return the first receipt, whatever units it names.
CREATE FUNCTION chargeonce_commit(p_chat bigint, p_id bigint, p_units integer)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  c record;
  r reservations;
  l record;
  o chargeonce_outcome;
  nominal jsonb;
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
      WHERE chat_id = p_chat;
    INSERT INTO ledger (reservation_id, chat_id, kind, charged, units,
                        released)
      VALUES (p_id, p_chat, r.kind,
              chargeonce_pockets_charged(nominal, c.pockets),
              coalesce(nullif(p_units, 0), r.units),
              chargeonce_pockets_less(r.held, nominal))
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

-- A batch --------------------------------------------------------------------

DROP FUNCTION chargeonce_apply_one(text, bigint, bigint, text, text, bigint,
                                   integer, integer, jsonb);
CREATE FUNCTION chargeonce_apply_one(op text, chat bigint, id bigint,
                                     k text, request_id text, units integer,
                                     lease_ms bigint,
                                     free_max integer, premium_max integer,
                                     products jsonb)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
BEGIN
  CASE op
    WHEN 'reserve' THEN
      RETURN chargeonce_reserve(chat, k, request_id, units, free_max,
                                premium_max, products);
    WHEN 'start' THEN RETURN chargeonce_start(chat, id);
    WHEN 'heartbeat' THEN RETURN chargeonce_heartbeat(chat, id, lease_ms);
    WHEN 'commit' THEN RETURN chargeonce_commit(chat, id, units);
    WHEN 'fail' THEN RETURN chargeonce_fail(chat, id);
    WHEN 'cancel' THEN RETURN chargeonce_cancel(chat, id, request_id);
    WHEN 'status' THEN RETURN chargeonce_status(chat);
    ELSE RAISE EXCEPTION 'chargeonce_apply: unknown operation %', op;
  END CASE;
END $$;

DROP FUNCTION chargeonce_apply_batch(text[], bigint[], bigint[], text[], text[],
                                     bigint, integer, integer, jsonb);
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
                 coalesce(array_agg(r.slot), '{}') AS slots
            FROM reservations r WHERE r.chat_id = req.chat) a
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
  -- units named, at most the hold's), clamped at zero, one ledger row each (its unique reservation_id stays the guard),
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
                          released)
      SELECT id, chat_id, kind, charged, units_charged, released
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
