-- SPDX-License-Identifier: Apache-2.0
-- Start and heartbeat: the worker identity that may run a job, and its lease.
--
-- The live body of every function here: migrate() applies the function
-- files after the versioned migrations, in one transaction, when they
-- changed (persistence/migrations.hpp).

-- Whether the worker `p_worker` ('' for none) may go on with `p_op` on
-- reservation `p_id` of `p_chat`: NULL when it may (no identity named, the
-- job is queued or gone, or it is the one that started it), else the
-- refusal already_started. A start of a queued job by a named worker
-- records it; the caller's start then moves the job on in the same
-- transaction, under the row lock taken here, so that of two starts naming
-- different workers exactly one proceeds.
CREATE OR REPLACE FUNCTION chargeonce_claim(
  p_op text, p_chat bigint, p_id bigint, p_worker text)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION chargeonce_start(p_chat bigint, p_id bigint)
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
  SELECT * INTO r FROM reservations WHERE id = p_id AND chat_id = p_chat;
  IF FOUND THEN
    RETURN chargeonce_with_reservation(r);
  END IF;
  RETURN chargeonce_explain_missing(p_chat, p_id);
END $$;

CREATE OR REPLACE FUNCTION chargeonce_heartbeat(p_chat bigint, p_id bigint,
                                                p_lease_ms bigint)
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
  IF EXISTS (SELECT 1 FROM reservations WHERE id = p_id AND chat_id = p_chat) THEN
    RETURN chargeonce_refusal('invalid_state',
      chargeonce_describe(p_chat, p_id) || ' was never started');
  END IF;
  RETURN chargeonce_explain_missing(p_chat, p_id);
END $$;
