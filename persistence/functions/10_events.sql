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

-- -- low balance ---------------------------------------------------------------

-- The balance_low threshold of a chat whose own is `p_own`: its own, else
-- the server's balance-low-threshold, which every connection of a server
-- sets as chargeonce.balance_low_threshold (store::impl::connection), so
-- that it reaches every function that can lower a balance without a
-- parameter in each (and without changing a signature 0.2's servers call);
-- else 0, never. chargeonce_reserve and the batch spell the same out
-- inline, on the hot path.
CREATE OR REPLACE FUNCTION chargeonce_low_threshold(p_own integer)
  RETURNS integer LANGUAGE sql STABLE AS $$
  SELECT coalesce(p_own,
                  nullif(current_setting('chargeonce.balance_low_threshold',
                                         true), '')::integer,
                  0)
$$;

-- What the chat's holds hold of its balance: its active reservations' and
-- its unresolved uncertain ones' (ordinal 3, as catalog_pockets fixes it).
-- The available balance is pockets[3] less this.
CREATE OR REPLACE FUNCTION chargeonce_balance_held(p_chat bigint)
  RETURNS integer LANGUAGE sql STABLE AS $$
  SELECT coalesce(sum(x.held), 0)::integer
    FROM (SELECT held[3] AS held FROM reservations WHERE chat_id = p_chat
          UNION ALL
          SELECT held[3] FROM uncertain_reservations
           WHERE chat_id = p_chat AND outcome IS NULL) x
$$;

-- One balance_low event when the available balance fell across
-- `p_threshold`: from at or above it (`p_before`) to below it (`p_after`).
-- Once per crossing without a flag to keep: a balance already below it
-- does not cross again until something brought it back up (a top-up, a
-- hold released). `p_cause` (reserve, expire, void) is the event's detail;
-- the reservation whose reserve crossed it, if that was the cause. True
-- when it wrote one.
CREATE OR REPLACE FUNCTION chargeonce_note_balance(
  p_chat bigint, p_before integer, p_after integer, p_threshold integer,
  p_cause text, p_reservation bigint DEFAULT NULL)
  RETURNS boolean LANGUAGE plpgsql AS $$
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

-- -- the triggers' functions ---------------------------------------------------

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
