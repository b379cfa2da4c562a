-- SPDX-License-Identifier: Apache-2.0
-- Rows and refusals: the outcome rows every operation answers with, the
-- refusals by SQLSTATE-free name, and the lookups they share.
--
-- The live body of every function here: migrate() applies the function
-- files after the versioned migrations, in one transaction, when they
-- changed (persistence/migrations.hpp).

CREATE OR REPLACE FUNCTION chargeonce_us(t timestamptz) RETURNS bigint
  LANGUAGE sql STABLE AS $$ SELECT (extract(epoch FROM t) * 1000000)::bigint $$;

CREATE OR REPLACE FUNCTION chargeonce_describe(
  p_chat bigint, p_id bigint) RETURNS text
  LANGUAGE sql IMMUTABLE AS $$ SELECT 'reservation ' || p_id || ' of chat ' || p_chat $$;

CREATE OR REPLACE FUNCTION chargeonce_queue(
  spec jsonb, premium boolean) RETURNS text
  LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN premium THEN spec ->> 'pq' ELSE spec ->> 'q' END
$$;

-- The limit of a chat: its own, else its plan's.
CREATE OR REPLACE FUNCTION chargeonce_job_limit(
  own integer, premium boolean, free_max integer, premium_max integer)
  RETURNS integer LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(own, CASE WHEN premium THEN premium_max ELSE free_max END)
$$;

CREATE OR REPLACE FUNCTION chargeonce_busy_message(p_chat bigint, active bigint,
                                                   job_limit integer)
  RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT 'chat ' || p_chat || ' has ' || active || ' of ' || job_limit
         || ' jobs active'
$$;

CREATE OR REPLACE FUNCTION chargeonce_refusal(code text, msg text)
  RETURNS chargeonce_outcome LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  o chargeonce_outcome;
BEGIN
  o.outcome := code;
  o.message := msg;
  RETURN o;
END $$;

CREATE OR REPLACE FUNCTION chargeonce_refusal_at(i integer, code text, msg text)
  RETURNS chargeonce_outcome LANGUAGE sql IMMUTABLE AS $$
  SELECT ROW(i, code, msg,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL)::chargeonce_outcome
$$;

-- Positional, in the order of chargeonce_outcome (migrations/
-- 003_release_0_2.sql): 14 r_ columns, 4 c_, 10 s_, 2 r_ and 2 c_ of units,
-- then the flag and the window; then the status's s_grants and
-- s_low_threshold (004_grants.sql).
CREATE OR REPLACE FUNCTION chargeonce_reservation_at(i integer, r reservations)
  RETURNS chargeonce_outcome LANGUAGE sql STABLE AS $$
  SELECT ROW(i, 'ok', NULL, r.id, r.chat_id, r.kind, r.status, r.queue,
             r.held, r.request_id, chargeonce_us(r.created_at),
             chargeonce_us(r.lease_expires_at), r.slot, NULL,
             NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, r.units, r.held_units, NULL, NULL,
             r.cancel_requested, r.window_number, NULL, NULL)::chargeonce_outcome
$$;

CREATE OR REPLACE FUNCTION chargeonce_receipt_at(
  i integer, chat bigint, k text, charged integer[], at timestamptz, units
  integer, released integer[], paid_by bigint)
  RETURNS chargeonce_outcome LANGUAGE sql STABLE AS $$
  SELECT ROW(i, 'ok', NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             chat, k, charged, chargeonce_us(at),
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, units, released, NULL,
             paid_by, NULL, NULL)::chargeonce_outcome
$$;

CREATE OR REPLACE FUNCTION chargeonce_resolution_refusal(code text, msg text)
  RETURNS chargeonce_resolution LANGUAGE sql IMMUTABLE AS $$
  SELECT ROW(code, msg, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL)::chargeonce_resolution
$$;

CREATE OR REPLACE FUNCTION chargeonce_resolution_of(u uncertain_reservations)
  RETURNS chargeonce_resolution LANGUAGE sql STABLE AS $$
  SELECT ROW('ok', NULL, u.kind, u.outcome, u.charged, u.released,
             u.units_charged, chargeonce_us(u.resolved_at),
             u.provider_ref, u.window_number)::chargeonce_resolution
$$;

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

-- Remembers an uncertain job with a request id as ended `how`, so that a
-- retried reserve finds it (chargeonce_remember_end's form).
CREATE OR REPLACE FUNCTION chargeonce_remember_uncertain_end(
  u uncertain_reservations, how text)
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

-- An uncertain job as a reservation answer: status outcome_unknown, no slot
-- (-1), no lease.
CREATE OR REPLACE FUNCTION chargeonce_with_uncertain(u uncertain_reservations)
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
CREATE OR REPLACE FUNCTION chargeonce_find_request(p_chat bigint,
                                                   p_request_id text)
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

-- Why an operation finds no active reservation p_id of p_chat; an
-- uncertain one answers invalid_state (resolve it), one released at
-- reconcile-timeout expired.
CREATE OR REPLACE FUNCTION chargeonce_explain_missing(p_chat bigint,
                                                      p_id bigint)
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
