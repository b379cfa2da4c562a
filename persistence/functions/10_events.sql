-- SPDX-License-Identifier: Apache-2.0
-- Durable events: published in the transaction that causes them, numbered
-- after commit.
--
-- The live body of every function here: migrate() applies the function
-- files after the versioned migrations, in one transaction, when they
-- changed (persistence/migrations.hpp).

CREATE OR REPLACE FUNCTION chargeonce_publish(
  p_event text, p_chat bigint, p_reservation bigint, p_detail text)
  RETURNS void LANGUAGE sql AS $$
  INSERT INTO events (event, chat_id, reservation_id, detail)
  VALUES (p_event, p_chat, p_reservation, p_detail);
$$;

-- A sweep released a job past its lease or sweep-timeout.
CREATE OR REPLACE FUNCTION chargeonce_event_released() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  PERFORM chargeonce_publish('reservation_released', NEW.chat_id, NEW.id,
                             NEW.reason);
  RETURN NULL;
END $$;

-- A worker could not tell whether its provider did the job.
CREATE OR REPLACE FUNCTION chargeonce_event_reconcile_needed() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  PERFORM chargeonce_publish('reconcile_needed', NEW.chat_id, NEW.id,
                             NEW.provider_ref);
  RETURN NULL;
END $$;

-- Nobody resolved an uncertain job by reconcile-timeout: released, nothing
-- charged.
CREATE OR REPLACE FUNCTION chargeonce_event_unresolved() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  PERFORM chargeonce_publish('reservation_released', NEW.chat_id, NEW.id,
                             'unresolved');
  RETURN NULL;
END $$;

-- A user cancelled a started job under the `request` policy: once, when the
-- mark is set (a repeated cancel changes nothing and announces nothing).
-- Only statements that name cancel_requested queue it: start, heartbeat
-- and the pockets at commit never do.
CREATE OR REPLACE FUNCTION chargeonce_event_cancel_requested() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  PERFORM chargeonce_publish('cancel_requested', NEW.chat_id, NEW.id, NULL);
  RETURN NULL;
END $$;

-- Numbers up to p_max committed events that have no id yet, in write
-- order, after the clock; returns the newest id given so far. The clock's
-- row lock is held until the caller commits.
CREATE OR REPLACE FUNCTION chargeonce_number_events(p_max integer)
  RETURNS bigint LANGUAGE plpgsql AS $$
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

-- The triggers that write the events, beside the functions they call: a
-- release, a job to reconcile, one released unresolved, a cancel request.
-- CREATE OR REPLACE, like the functions, so that applying this file again
-- changes nothing.
CREATE OR REPLACE TRIGGER released_reservations_event
  AFTER INSERT ON released_reservations FOR EACH ROW
  EXECUTE FUNCTION chargeonce_event_released();

CREATE OR REPLACE TRIGGER uncertain_reservations_event
  AFTER INSERT ON uncertain_reservations FOR EACH ROW
  EXECUTE FUNCTION chargeonce_event_reconcile_needed();

CREATE OR REPLACE TRIGGER uncertain_reservations_released_event
  AFTER UPDATE OF outcome ON uncertain_reservations FOR EACH ROW
  WHEN (OLD.outcome IS NULL AND NEW.outcome = 'released')
  EXECUTE FUNCTION chargeonce_event_unresolved();

CREATE OR REPLACE TRIGGER reservations_cancel_requested_event
  AFTER UPDATE OF cancel_requested ON reservations FOR EACH ROW
  WHEN (NEW.cancel_requested AND NOT OLD.cancel_requested)
  EXECUTE FUNCTION chargeonce_event_cancel_requested();
