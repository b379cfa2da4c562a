-- SPDX-License-Identifier: Apache-2.0
-- Cancel and fail: a reservation that disappears, nothing to refund; what it
-- held of a grant that expired or was voided meanwhile leaves the balance
-- then.
--
-- The live body of every function here: migrate() applies the function
-- files after the versioned migrations, in one transaction, when they
-- changed (persistence/migrations.hpp).

-- Which job a cancel names: p_id, else the job of p_request_id, else the
-- chat's only active one. A queued job is deleted. A started one is marked
-- cancel_requested when its kind's policy (p_products -> kind ->> 'cancel')
-- is `request`, and refused too_late otherwise. Both statements are
-- conditional on status: a start that won the row first leaves nothing to
-- delete, and the cancel then sees in_progress.
CREATE OR REPLACE FUNCTION chargeonce_cancel(
  p_chat bigint, p_id bigint, p_request_id text, p_products jsonb)
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
  IF EXISTS (SELECT 1 FROM reservations
              WHERE id = target AND chat_id = p_chat AND status = 'queued'
                AND cardinality(held_grants) > 0) THEN
    PERFORM chargeonce_lock_for_settle(p_chat);
  END IF;
  DELETE FROM reservations
   WHERE id = target AND chat_id = p_chat AND status = 'queued'
  RETURNING * INTO r;
  IF FOUND THEN
    PERFORM chargeonce_settle_hold(p_chat, r.held_grants,
                                   r.held_grant_credits, 0, r.id);
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

CREATE OR REPLACE FUNCTION chargeonce_fail(p_chat bigint, p_id bigint)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  r reservations;
BEGIN
  -- A hold on grants may write the balance: the chat's row first, as
  -- every writer takes them (held_grants never changes after reserve).
  IF EXISTS (SELECT 1 FROM reservations
              WHERE id = p_id AND chat_id = p_chat
                AND cardinality(held_grants) > 0) THEN
    PERFORM chargeonce_lock_for_settle(p_chat);
  END IF;
  DELETE FROM reservations WHERE id = p_id AND chat_id = p_chat RETURNING * INTO r;
  IF FOUND THEN
    PERFORM chargeonce_settle_hold(p_chat, r.held_grants,
                                   r.held_grant_credits, 0, r.id);
    PERFORM chargeonce_remember_end(r, 'failed');
    RETURN chargeonce_with_reservation(r);
  END IF;
  RETURN chargeonce_explain_missing(p_chat, p_id);
END $$;
