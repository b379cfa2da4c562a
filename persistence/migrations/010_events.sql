-- Events that outlive a restart. The changes a gateway must hear of after
-- the fact (a release, a refill, a cancel request, a job to reconcile) are
-- written to `events` in the same transaction as the change itself, by
-- triggers on the tables that change, so that the batch function and the
-- per-statement SQL both write them without knowing. Subscribers read them
-- back by id, and resume after the last id they saw.
--
-- The id is the commit order, not the insert order: every trigger here is
-- deferred to commit and takes the next id from one clock row, whose row
-- lock it holds until the commit is done. A transaction that took id N is
-- therefore visible before any other can take N+1, so a reader that has
-- seen N never meets a smaller id later (a sequence could not promise it:
-- an id taken early may commit late). Rolled-back ids roll back with the
-- clock, so ids have no gaps. Only transactions that announce something
-- take the lock, and only after every other lock they need (so its holder
-- never waits for anyone, and no deadlock can go through it): the hot path
-- (reserve, start, commit) writes no event and never waits for it.

CREATE TABLE event_clock (
  only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  last_id  bigint NOT NULL
);
INSERT INTO event_clock (last_id) VALUES (0);

CREATE TABLE events (
  id             bigint PRIMARY KEY,
  event          text NOT NULL
                   CHECK (event IN ('reservation_released', 'limits_refilled',
                                    'cancel_requested', 'reconcile_needed')),
  chat_id        bigint NOT NULL,
  reservation_id bigint NULL,  -- NULL for limits_refilled
  detail         text NULL,    -- a release's reason, a job's provider_ref
  at             timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Pruning after event-retention walks this index.
CREATE INDEX events_at ON events (at);

CREATE FUNCTION chargeonce_publish(p_event text, p_chat bigint,
                                   p_reservation bigint, p_detail text)
  RETURNS void LANGUAGE sql AS $$
  WITH next AS (UPDATE event_clock SET last_id = last_id + 1
                RETURNING last_id)
  INSERT INTO events (id, event, chat_id, reservation_id, detail)
  SELECT last_id, p_event, p_chat, p_reservation, p_detail FROM next;
$$;

-- A sweep released a job past its lease or sweep-timeout.
CREATE FUNCTION chargeonce_event_released() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  PERFORM chargeonce_publish('reservation_released', NEW.chat_id, NEW.id,
                             NEW.reason);
  RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER released_reservations_event
  AFTER INSERT ON released_reservations
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  EXECUTE FUNCTION chargeonce_event_released();

-- A worker could not tell whether its provider did the job.
CREATE FUNCTION chargeonce_event_reconcile_needed() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  PERFORM chargeonce_publish('reconcile_needed', NEW.chat_id, NEW.id,
                             NEW.provider_ref);
  RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER uncertain_reservations_event
  AFTER INSERT ON uncertain_reservations
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
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

CREATE CONSTRAINT TRIGGER uncertain_reservations_released_event
  AFTER UPDATE OF outcome ON uncertain_reservations
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
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

CREATE CONSTRAINT TRIGGER reservations_cancel_requested_event
  AFTER UPDATE OF cancel_requested ON reservations
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
  WHEN (NEW.cancel_requested AND NOT OLD.cancel_requested)
  EXECUTE FUNCTION chargeonce_event_cancel_requested();

-- limits_refilled has no trigger: the reactivation scan refills a thousand
-- chats per statement and numbers their events itself, in that statement,
-- after its row locks (persistence/store_limits.cpp).
