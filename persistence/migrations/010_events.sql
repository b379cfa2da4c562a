-- Events that outlive a restart. The changes a gateway must hear of after
-- the fact (a release, a refill, a cancel request, a job to reconcile) are
-- written to `events` in the same transaction as the change itself, by
-- triggers on the tables that change (so that the batch function and the
-- per-statement SQL both write them without knowing) and by the
-- reactivation statement. Subscribers read them back by id, and resume
-- after the last id they saw.
--
-- The id a subscriber sees is given after the commit, not by the writer:
-- a writer's row has `seq` (write order) and no id. Whoever reads the
-- events (chargeonce_number_events, from every server's event bus) first
-- numbers the committed rows without one, in seq order, holding the row
-- lock of event_clock until its own commit. A numbering that gave id N is
-- therefore visible before any other can give N+1: a reader that has seen
-- N never meets a smaller id later (an id taken by the writer could not
-- promise it: a writer that took one early may commit late). Writers take
-- no lock for it, so releases commit in parallel as before; only the
-- readers, a few times a second, and the reactivation scan, once per page
-- of a thousand chats, queue for the clock.

CREATE TABLE event_clock (
  only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  last_id  bigint NOT NULL
);
INSERT INTO event_clock (last_id) VALUES (0);

CREATE TABLE events (
  seq            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id             bigint NULL,  -- NULL until numbered
  event          text NOT NULL
                   CHECK (event IN ('reservation_released', 'limits_refilled',
                                    'cancel_requested', 'reconcile_needed')),
  chat_id        bigint NOT NULL,
  reservation_id bigint NULL,  -- NULL for limits_refilled
  detail         text NULL,    -- a release's reason, a job's provider_ref
  at             timestamptz NOT NULL DEFAULT now()
);

-- Readers follow this one; a writer's insert (no id yet) touches only the
-- primary key and the next one. Pruning walks the primary key, oldest first
-- (seq follows the time closely enough for a retention of hours).
CREATE UNIQUE INDEX events_id ON events (id) WHERE id IS NOT NULL;
-- What the next numbering takes, oldest first.
CREATE INDEX events_unnumbered ON events (seq) WHERE id IS NULL;

-- Numbers up to p_max committed events that have no id yet, in write
-- order, after the clock; returns the newest id given so far. The clock's
-- row lock is held until the caller commits.
CREATE FUNCTION chargeonce_number_events(p_max integer)
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

CREATE FUNCTION chargeonce_publish(p_event text, p_chat bigint,
                                   p_reservation bigint, p_detail text)
  RETURNS void LANGUAGE sql AS $$
  INSERT INTO events (event, chat_id, reservation_id, detail)
  VALUES (p_event, p_chat, p_reservation, p_detail);
$$;

-- A sweep released a job past its lease or sweep-timeout.
CREATE FUNCTION chargeonce_event_released() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  PERFORM chargeonce_publish('reservation_released', NEW.chat_id, NEW.id,
                             NEW.reason);
  RETURN NULL;
END $$;

CREATE TRIGGER released_reservations_event
  AFTER INSERT ON released_reservations FOR EACH ROW
  EXECUTE FUNCTION chargeonce_event_released();

-- A worker could not tell whether its provider did the job.
CREATE FUNCTION chargeonce_event_reconcile_needed() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  PERFORM chargeonce_publish('reconcile_needed', NEW.chat_id, NEW.id,
                             NEW.provider_ref);
  RETURN NULL;
END $$;

CREATE TRIGGER uncertain_reservations_event
  AFTER INSERT ON uncertain_reservations FOR EACH ROW
  EXECUTE FUNCTION chargeonce_event_reconcile_needed();

-- Nobody resolved an uncertain job by reconcile-timeout: released, nothing
-- charged.
CREATE FUNCTION chargeonce_event_unresolved() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  PERFORM chargeonce_publish('reservation_released', NEW.chat_id, NEW.id,
                             'unresolved');
  RETURN NULL;
END $$;

CREATE TRIGGER uncertain_reservations_released_event
  AFTER UPDATE OF outcome ON uncertain_reservations FOR EACH ROW
  WHEN (OLD.outcome IS NULL AND NEW.outcome = 'released')
  EXECUTE FUNCTION chargeonce_event_unresolved();

-- A user cancelled a started job under the `request` policy: once, when the
-- mark is set (a repeated cancel changes nothing and announces nothing).
-- Only statements that name cancel_requested queue it: start, heartbeat
-- and the pockets at commit never do.
CREATE FUNCTION chargeonce_event_cancel_requested() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  PERFORM chargeonce_publish('cancel_requested', NEW.chat_id, NEW.id, NULL);
  RETURN NULL;
END $$;

CREATE TRIGGER reservations_cancel_requested_event
  AFTER UPDATE OF cancel_requested ON reservations FOR EACH ROW
  WHEN (NEW.cancel_requested AND NOT OLD.cancel_requested)
  EXECUTE FUNCTION chargeonce_event_cancel_requested();

-- limits_refilled has no trigger: the reactivation scan refills a thousand
-- chats per statement and writes their events in that statement, numbered
-- at once under the clock's lock, taken after every chat lock of its page
-- (persistence/store_limits.cpp). A reader holding the clock never waits
-- for anything (it skips locked rows), so neither can deadlock.
