-- SPDX-License-Identifier: Apache-2.0
-- Commit: exactly what the reservation held, in the window it was held in,
-- clamped at 0; its balance part from the grants it held, in the hold's
-- order.
--
-- The live body of every function here: migrate() applies the function
-- files after the versioned migrations, in one transaction, when they
-- changed (persistence/migrations.hpp).

CREATE OR REPLACE FUNCTION chargeonce_commit(p_chat bigint, p_id bigint,
                                             p_units integer)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  c record;
  r reservations;
  l record;
  o chargeonce_outcome;
  nominal integer[];
  taken integer[];
  v_charged integer[];
  after integer[];
BEGIN
  SELECT pockets, window_number, next_expiry INTO c FROM chats
   WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  IF c.next_expiry <= now() THEN
    PERFORM chargeonce_expire_grants(p_chat);
    SELECT pockets, window_number, next_expiry INTO c FROM chats
     WHERE chat_id = p_chat;
  END IF;
  SELECT chat_id, kind, charged, committed_at, units, released, window_number
    INTO l
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
    -- A hold of a past window takes nothing more of the daily pockets:
    -- its window's unit paid, and the receipt says which window that was.
    nominal := chargeonce_captured(r.held, r.held_units, r.units, p_units);
    v_charged := chargeonce_charged_in(nominal, r.window_number,
                                     c.window_number, c.pockets);
    -- The balance part, clamped at what the pocket has, is charged from
    -- the hold's grants in the hold's order (each at most what it has
    -- left); what the hold has over it on a grant that expired or was
    -- voided leaves the balance in rows before this one.
    IF cardinality(r.held_grants) > 0 THEN
      taken := chargeonce_settle_hold(p_chat, r.held_grants,
                                      r.held_grant_credits, v_charged[3],
                                      p_id);
      IF nominal[3] IS NOT NULL THEN
        v_charged := chargeonce_pockets_set(v_charged, 3,
          (SELECT sum(t)::integer FROM unnest(taken) AS t));
      END IF;
      SELECT pockets INTO c.pockets FROM chats WHERE chat_id = p_chat;
    END IF;
    UPDATE chats SET pockets = chargeonce_pockets_take(pockets,
                       chargeonce_pockets_charged(
                         chargeonce_in_window(nominal, r.window_number,
                                              c.window_number),
                         v_charged))
      WHERE chat_id = p_chat RETURNING pockets INTO after;
    INSERT INTO ledger (reservation_id, chat_id, kind, charged, units,
                        released, pockets, changed, window_number,
                        grant_ids, grant_credits)
      VALUES (p_id, p_chat, r.kind, v_charged,
              coalesce(nullif(p_units, 0), r.units),
              chargeonce_pockets_less(r.held, nominal), after,
              chargeonce_pockets_change(c.pockets, after), r.window_number,
              coalesce(r.held_grants, '{}'), coalesce(taken, '{}'))
      RETURNING chat_id, kind, charged, committed_at, units, released,
                window_number INTO l;
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
  o.window_number := l.window_number;
  RETURN o;
END $$;
