-- SPDX-License-Identifier: Apache-2.0
-- Outcome unknown: a reservation whose provider call may or may not have
-- happened, held until it is resolved or released.
--
-- The live body of every function here: migrate() applies the function
-- files after the versioned migrations, in one transaction, when they
-- changed (persistence/migrations.hpp).

-- A started job whose outcome nobody knows: moved out of reservations (the
-- slot is free) with its hold. Repeated with the same provider_ref, it
-- answers the same; with another, invalid_argument.
CREATE OR REPLACE FUNCTION chargeonce_uncertain(
  p_chat bigint, p_id bigint, p_ref text)
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
                                        provider_ref, window_number,
                                        held_grants, held_grant_credits)
      VALUES (r.id, r.chat_id, r.kind, r.queue, r.held, r.held_units,
              r.units, r.request_id, r.slot, r.created_at,
              r.cancel_requested, p_ref, r.window_number, r.held_grants,
              r.held_grant_credits)
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

CREATE OR REPLACE FUNCTION chargeonce_resolve(p_chat bigint, p_id bigint,
                                              p_outcome text, p_units integer)
  RETURNS chargeonce_resolution LANGUAGE plpgsql AS $$
DECLARE
  c record;
  u uncertain_reservations;
  o chargeonce_outcome;
  nominal integer[];
  taken integer[];
  v_charged integer[];
  after integer[];
BEGIN
  IF p_outcome NOT IN ('succeeded', 'failed') THEN
    RETURN chargeonce_resolution_refusal('invalid_argument',
      'outcome must be succeeded or failed, not ' || p_outcome);
  END IF;
  SELECT pockets, window_number, next_expiry INTO c FROM chats
   WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_resolution_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  -- Expired first, while the hold still counts as held (as commit).
  IF chargeonce_expire_if_due(p_chat, c.next_expiry) THEN
    SELECT pockets, window_number, next_expiry INTO c FROM chats
     WHERE chat_id = p_chat;
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
    PERFORM chargeonce_settle_hold(p_chat, u.held_grants,
                                   u.held_grant_credits, 0, p_id);
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
  -- As commit: a hold of a past window takes nothing more of the daily
  -- pockets.
  nominal := chargeonce_captured(u.held, u.held_units, u.units, p_units);
  v_charged := chargeonce_charged_in(nominal, u.window_number, c.window_number,
                                   c.pockets);
  -- As commit: the balance part from the hold's grants.
  IF cardinality(u.held_grants) > 0 THEN
    taken := chargeonce_settle_hold(p_chat, u.held_grants,
                                    u.held_grant_credits, v_charged[3], p_id);
    IF nominal[3] IS NOT NULL THEN
      v_charged := chargeonce_pockets_set(v_charged, 3,
        (SELECT sum(t)::integer FROM unnest(taken) AS t));
    END IF;
    SELECT pockets INTO c.pockets FROM chats WHERE chat_id = p_chat;
  END IF;
  UPDATE chats SET pockets = chargeonce_pockets_take(pockets,
                     chargeonce_pockets_charged(
                       chargeonce_in_window(nominal, u.window_number,
                                            c.window_number),
                       v_charged))
   WHERE chat_id = p_chat RETURNING pockets INTO after;
  INSERT INTO ledger (reservation_id, chat_id, kind, charged, units, released,
                      pockets, changed, window_number, grant_ids,
                      grant_credits)
    VALUES (p_id, p_chat, u.kind, v_charged,
            coalesce(nullif(p_units, 0), u.units),
            chargeonce_pockets_less(u.held, nominal), after,
            chargeonce_pockets_change(c.pockets, after), u.window_number,
            u.held_grants, coalesce(taken, '{}'));
  UPDATE uncertain_reservations
     SET outcome = 'succeeded', resolved_at = now(),
         charged = v_charged,
         released = chargeonce_pockets_less(u.held, nominal),
         units_charged = coalesce(nullif(p_units, 0), u.units)
   WHERE id = p_id RETURNING * INTO u;
  PERFORM chargeonce_remember_uncertain_end(u, 'committed');
  RETURN chargeonce_resolution_of(u);
END $$;

-- At reconcile-timeout (re-checked here): the hold is released in the
-- user's favour, nothing charged. The reason, or NULL when the job was
-- resolved meanwhile or is not that old.
CREATE OR REPLACE FUNCTION chargeonce_release_unresolved(
  p_chat bigint, p_id bigint, p_timeout_ms bigint)
  RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  u uncertain_reservations;
BEGIN
  -- Its hold may leave the balance (a grant expired or voided): the chat's
  -- row first, as every writer takes them, and what was due expired while
  -- the hold still counts.
  IF EXISTS (SELECT 1 FROM uncertain_reservations
              WHERE id = p_id AND chat_id = p_chat AND outcome IS NULL
                AND cardinality(held_grants) > 0) THEN
    PERFORM chargeonce_lock_for_settle(p_chat);
  END IF;
  UPDATE uncertain_reservations
     SET outcome = 'released', resolved_at = now(), charged = '{}',
         released = held, units_charged = 0
   WHERE id = p_id AND chat_id = p_chat AND outcome IS NULL
     AND uncertain_at < now() - p_timeout_ms * interval '1 millisecond'
  RETURNING * INTO u;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  PERFORM chargeonce_settle_hold(p_chat, u.held_grants, u.held_grant_credits,
                                 0, p_id);
  PERFORM chargeonce_remember_uncertain_end(u, 'released');
  RETURN 'unresolved';
END $$;
