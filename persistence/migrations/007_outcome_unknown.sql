-- Outcome unknown, and reconciliation. A worker whose provider call timed
-- out calls `uncertain` with the idempotency key it gave the provider: the
-- reservation leaves `reservations` (its slot is free at once: the user is
-- not locked out by the provider's timeout) for `uncertain_reservations`,
-- where its hold keeps counting in what the chat may spend (nobody knows
-- yet whether it was paid). Lease and sweep do not apply there;
-- reconcile-timeout does. `resolve` records the outcome once: succeeded
-- commits (a ledger row, as commit does, optional units), failed releases
-- the hold. A row stays, resolved, for release-retention, so that a retried
-- resolve gets its first answer and the other outcome is refused.

CREATE TABLE uncertain_reservations (
  id               bigint PRIMARY KEY,   -- the reservation's id
  chat_id          bigint NOT NULL,
  kind             text NOT NULL,
  queue            text NOT NULL,
  held             jsonb NOT NULL,
  held_units       jsonb NOT NULL,
  units            integer NOT NULL,
  request_id       text NOT NULL,
  slot             integer NOT NULL,     -- the slot it had, freed
  created_at       timestamptz NOT NULL,
  cancel_requested boolean NOT NULL,
  provider_ref     text NOT NULL,
  uncertain_at     timestamptz NOT NULL DEFAULT now(),
  -- NULL while unresolved
  outcome          text NULL
                     CHECK (outcome IN ('succeeded', 'failed', 'released')),
  resolved_at      timestamptz NULL,
  charged          jsonb NULL,
  released         jsonb NULL,
  units_charged    integer NULL,
  window_number    bigint NOT NULL DEFAULT 0  -- the hold's window
);

-- A chat's open holds (every reserve reads them).
CREATE INDEX uncertain_reservations_open ON uncertain_reservations (chat_id)
  WHERE outcome IS NULL;
-- One job per request id, while its outcome is unknown (after it:
-- ended_reservations).
CREATE UNIQUE INDEX uncertain_reservations_request_id
  ON uncertain_reservations (chat_id, request_id)
  WHERE outcome IS NULL AND request_id <> '';
-- The reconcile-timeout scan, oldest first.
CREATE INDEX uncertain_reservations_since
  ON uncertain_reservations (uncertain_at, id) WHERE outcome IS NULL;
-- `unresolved` pages, by id.
CREATE INDEX uncertain_reservations_unresolved ON uncertain_reservations (id)
  WHERE outcome IS NULL;
-- Pruning after release-retention.
CREATE INDEX uncertain_reservations_resolved_at
  ON uncertain_reservations (resolved_at) WHERE outcome IS NOT NULL;

-- Answers ---------------------------------------------------------------------

-- An uncertain job as a reservation answer: status outcome_unknown, no slot
-- (-1), no lease.
CREATE FUNCTION chargeonce_with_uncertain(u uncertain_reservations)
  RETURNS chargeonce_outcome LANGUAGE plpgsql STABLE AS $$
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

-- The job request_id names in p_chat: active, uncertain, or ended.
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

-- Every active reservation of the chat, then every uncertain one, oldest
-- first: status lists both and sums their holds.
CREATE OR REPLACE FUNCTION chargeonce_reservations_json(p_chat bigint)
  RETURNS text LANGUAGE plpgsql STABLE AS $$
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

-- Why an operation finds no active reservation p_id of p_chat; an
-- uncertain one answers invalid_state (resolve it), one released at
-- reconcile-timeout expired.
CREATE OR REPLACE FUNCTION chargeonce_explain_missing(p_chat bigint, p_id bigint)
  RETURNS chargeonce_outcome LANGUAGE plpgsql STABLE AS $$
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

-- Remembers an uncertain job with a request id as ended `how`, so that a
-- retried reserve finds it (chargeonce_remember_end's form).
CREATE FUNCTION chargeonce_remember_uncertain_end(u uncertain_reservations,
                                                  how text)
  RETURNS void LANGUAGE plpgsql AS $$
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

-- Uncertain, resolve, release ----------------------------------------------------

-- A started job whose outcome nobody knows: moved out of reservations (the
-- slot is free) with its hold. Repeated with the same provider_ref, it
-- answers the same; with another, invalid_argument.
CREATE FUNCTION chargeonce_uncertain(p_chat bigint, p_id bigint, p_ref text)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
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
                                        provider_ref, window_number)
      VALUES (r.id, r.chat_id, r.kind, r.queue, r.held, r.held_units,
              r.units, r.request_id, r.slot, r.created_at,
              r.cancel_requested, p_ref, r.window_number)
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

-- The answer of resolve: the outcome recorded, what it charged and released.
CREATE TYPE chargeonce_resolution AS (
  outcome     text,   -- 'ok' or an error name
  message     text,
  kind        text,
  resolution  text,   -- succeeded or failed
  charged     jsonb,
  released    jsonb,
  units       integer,
  resolved_us bigint,
  provider_ref text,
  window_number bigint  -- the window that paid (the hold's)
);

CREATE FUNCTION chargeonce_resolution_of(u uncertain_reservations)
  RETURNS chargeonce_resolution LANGUAGE sql STABLE AS $$
  SELECT ROW('ok', NULL, u.kind, u.outcome, u.charged, u.released,
             u.units_charged, chargeonce_us(u.resolved_at),
             u.provider_ref, u.window_number)::chargeonce_resolution
$$;

CREATE FUNCTION chargeonce_resolution_refusal(code text, msg text)
  RETURNS chargeonce_resolution LANGUAGE sql IMMUTABLE AS $$
  SELECT ROW(code, msg, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL)::chargeonce_resolution
$$;

-- Records what the provider says, once, under the chat's lock: succeeded
-- charges the hold (of p_units: fewer release the rest, as commit does) in
-- one ledger row; failed releases it. A retry answers the first
-- resolution; the other outcome is invalid_state; after reconcile-timeout
-- released it, expired.
CREATE FUNCTION chargeonce_resolve(p_chat bigint, p_id bigint,
                                   p_outcome text, p_units integer)
  RETURNS chargeonce_resolution LANGUAGE plpgsql AS $$
DECLARE
  c record;
  u uncertain_reservations;
  o chargeonce_outcome;
  nominal jsonb;
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
   WHERE chat_id = p_chat;
  -- The ledger's unique reservation_id guards against a second charge.
  INSERT INTO ledger (reservation_id, chat_id, kind, charged, units, released)
    VALUES (p_id, p_chat, u.kind,
            chargeonce_pockets_charged(nominal, c.pockets),
            coalesce(nullif(p_units, 0), u.units),
            chargeonce_pockets_less(u.held, nominal));
  UPDATE uncertain_reservations
     SET outcome = 'succeeded', resolved_at = now(),
         charged = chargeonce_pockets_charged(nominal, c.pockets),
         released = chargeonce_pockets_less(u.held, nominal),
         units_charged = coalesce(nullif(p_units, 0), u.units)
   WHERE id = p_id RETURNING * INTO u;
  PERFORM chargeonce_remember_uncertain_end(u, 'committed');
  RETURN chargeonce_resolution_of(u);
END $$;

-- At reconcile-timeout (re-checked here): the hold is released in the
-- user's favour, nothing charged. The reason, or NULL when the job was
-- resolved meanwhile or is not that old.
CREATE FUNCTION chargeonce_release_unresolved(p_chat bigint, p_id bigint,
                                              p_timeout_ms bigint)
  RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  u uncertain_reservations;
BEGIN
  UPDATE uncertain_reservations
     SET outcome = 'released', resolved_at = now(), charged = '{}',
         released = held, units_charged = 0
   WHERE id = p_id AND chat_id = p_chat AND outcome IS NULL
     AND uncertain_at < now() - p_timeout_ms * interval '1 millisecond'
  RETURNING * INTO u;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  PERFORM chargeonce_remember_uncertain_end(u, 'released');
  RETURN 'unresolved';
END $$;

-- Reserve counts the uncertain holds --------------------------------------------

CREATE OR REPLACE FUNCTION chargeonce_reserve(p_chat bigint, p_kind text,
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
  -- The holds of jobs whose outcome is unknown count too; they have no slot.
  SELECT count(slot) AS n, chargeonce_pockets_sum(held) AS held,
         coalesce(array_agg(slot) FILTER (WHERE slot IS NOT NULL), '{}')
           AS slots
    INTO a
    FROM (SELECT held, slot FROM reservations WHERE chat_id = p_chat
          UNION ALL
          SELECT held, NULL FROM uncertain_reservations
           WHERE chat_id = p_chat AND outcome IS NULL) x;
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
