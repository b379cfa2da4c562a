-- A job delivered twice runs once: the worker that starts a job may name
-- itself (any string it chooses for this attempt, e.g. its queue job id and
-- attempt); the first start that names one records it, and a start, a
-- heartbeat, a commit, a fail or an uncertain naming another one is
-- refused with already_started while the job runs. A call naming none
-- behaves as before. The identity is never shown: the refusal names
-- nothing of the other worker.

ALTER TABLE reservations ADD COLUMN worker text NOT NULL DEFAULT '';

-- Whether the worker `p_worker` ('' for none) may go on with `p_op` on
-- reservation `p_id` of `p_chat`: NULL when it may (no identity named, the
-- job is queued or gone, or it is the one that started it), else the
-- refusal already_started. A start of a queued job by a named worker
-- records it; the caller's start then moves the job on in the same
-- transaction, under the row lock taken here, so that of two starts naming
-- different workers exactly one proceeds.
CREATE FUNCTION chargeonce_claim(p_op text, p_chat bigint, p_id bigint,
                                 p_worker text)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  v_status text;
  v_worker text;
BEGIN
  IF coalesce(p_worker, '') = '' THEN
    RETURN NULL;
  END IF;
  -- A commit writes the chat's pockets: the chat's row first, as every
  -- writer takes them, then the reservation's.
  IF p_op = 'commit' THEN
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
