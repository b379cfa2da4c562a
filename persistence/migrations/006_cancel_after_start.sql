-- Cancel after start, by policy per kind (the catalog's cancel_after_start,
-- passed in the products as "cancel"): `refuse` answers too_late, as the
-- original design does; `request` marks the started job cancel_requested
-- and answers it, and every later heartbeat answer carries the flag, so
-- the worker learns within one heartbeat that the user wants it stopped.
-- The worker decides what is honest: fail (nothing charged), commit (the
-- provider did the work) or commit fewer units. A cancel of a queued job
-- still deletes it. A cancel-requested job keeps its lease and sweep
-- deadline.

ALTER TABLE reservations
  ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;

-- A hold on a daily pocket belongs to the window it was taken in. Each
-- chat numbers its windows (one more at every refill; window_started_at
-- cannot tell them apart, since reactivation clears it and the next
-- activity opens a window without a refill), each job records the number
-- it was reserved in, and each charge row the window that paid. A hold of
-- a past window no longer counts against the chat's pockets, except its
-- balance part: the daily unit of its own window paid for it.
ALTER TABLE chats ADD COLUMN window_number bigint NOT NULL DEFAULT 0;
ALTER TABLE reservations ADD COLUMN window_number bigint NOT NULL DEFAULT 0;
ALTER TABLE ended_reservations
  ADD COLUMN window_number bigint NOT NULL DEFAULT 0;
-- charge: the window that paid; refill: the window it opened; else NULL.
ALTER TABLE ledger ADD COLUMN window_number bigint NULL;

-- The answer row: the flag and the window, last (the positional helpers
-- below list them so). window_number: a reservation's (r_ columns) or the
-- window that paid a receipt (c_ columns).
ALTER TYPE chargeonce_outcome ADD ATTRIBUTE r_cancel_requested boolean,
  ADD ATTRIBUTE window_number bigint;

-- An ended job keeps its window: a retried reserve answers with it.
CREATE OR REPLACE FUNCTION chargeonce_remember_end(r reservations, how text)
  RETURNS void LANGUAGE plpgsql AS $$
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

-- The answer row's helpers, with the flag -----------------------------------

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
  o.r_cancel_requested := r.cancel_requested;
  o.window_number := r.window_number;
  RETURN o;
END $$;

-- Positional (005_units.sql): 14 r_ columns, 4 c_, 10 s_, 2 r_ and 2 c_ of
-- units, then the flag and the window.
CREATE OR REPLACE FUNCTION chargeonce_reservation_at(i integer, r reservations)
  RETURNS chargeonce_outcome LANGUAGE sql STABLE AS $$
  SELECT ROW(i, 'ok', NULL, r.id, r.chat_id, r.kind, r.status, r.queue,
             r.held, r.request_id, chargeonce_us(r.created_at),
             chargeonce_us(r.lease_expires_at), r.slot, NULL,
             NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, r.units, r.held_units, NULL, NULL,
             r.cancel_requested, r.window_number)::chargeonce_outcome
$$;

CREATE OR REPLACE FUNCTION chargeonce_refusal_at(i integer, code text, msg text)
  RETURNS chargeonce_outcome LANGUAGE sql IMMUTABLE AS $$
  SELECT ROW(i, code, msg,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL)::chargeonce_outcome
$$;

CREATE OR REPLACE FUNCTION chargeonce_receipt_at(i integer, chat bigint, k text,
                                                 charged jsonb, at timestamptz,
                                                 units integer, released jsonb)
  RETURNS chargeonce_outcome LANGUAGE sql STABLE AS $$
  SELECT ROW(i, 'ok', NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             chat, k, charged, chargeonce_us(at),
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, units, released, NULL, NULL)::chargeonce_outcome
$$;

-- An ended job answers cancel_requested false: what it asked for no longer
-- matters once it ended.
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
         x.units, x.held_units, NULL, NULL, x.cancel_requested
    INTO o
    FROM (SELECT id, chat_id, kind, status, queue, held, request_id,
                 created_at, lease_expires_at, slot,
                 NULL::timestamptz AS ended_at, units, held_units,
                 cancel_requested
            FROM reservations
           WHERE chat_id = p_chat AND request_id = p_request_id
          UNION ALL
          SELECT id, chat_id, kind, status, queue, held, request_id,
                 created_at, lease_expires_at, slot, ended_at, units,
                 held_units, false
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
           'units', units, 'held_units', held_units,
           'cancel_requested', cancel_requested)
           ORDER BY created_at, id)::text, '[]')
    FROM reservations WHERE chat_id = p_chat);
END $$;

-- Cancel ---------------------------------------------------------------------

DROP FUNCTION chargeonce_cancel(bigint, bigint, text);
-- Which job a cancel names: p_id, else the job of p_request_id, else the
-- chat's only active one. A queued job is deleted. A started one is marked
-- cancel_requested when its kind's policy (p_products -> kind ->> 'cancel')
-- is `request`, and refused too_late otherwise. Both statements are
-- conditional on status: a start that won the row first leaves nothing to
-- delete, and the cancel then sees in_progress.
CREATE FUNCTION chargeonce_cancel(p_chat bigint, p_id bigint,
                                  p_request_id text, p_products jsonb)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
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
  DELETE FROM reservations
   WHERE id = target AND chat_id = p_chat AND status = 'queued'
  RETURNING * INTO r;
  IF FOUND THEN
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
  -- a cancel carries its request id (013_worker_identity.sql).
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
