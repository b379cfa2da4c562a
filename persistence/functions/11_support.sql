-- SPDX-License-Identifier: Apache-2.0
-- Support: what a chat holds and why, for status and the support views.
--
-- The live body of every function here: migrate() applies the function
-- files after the versioned migrations, in one transaction, when they
-- changed (persistence/migrations.hpp).

-- Every active reservation of the chat, then every uncertain one, oldest
-- first: status lists both and sums their holds.
CREATE OR REPLACE FUNCTION chargeonce_reservations_json(p_chat bigint)
  RETURNS text LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (SELECT coalesce(json_agg(json_build_object(
           'id', id, 'chat', chat_id, 'kind', kind, 'status', status,
           'queue', queue, 'held', held, 'request_id', request_id,
           'created_us', chargeonce_us(created_at),
           'lease_us', chargeonce_us(lease_expires_at), 'slot', slot,
           'units', units, 'held_units', held_units,
           'cancel_requested', cancel_requested,
           'provider_ref', provider_ref,
           'uncertain_us', chargeonce_us(uncertain_at),
           'window', window_number)
           ORDER BY uncertain_at NULLS FIRST, created_at, id)::text, '[]')
    FROM (SELECT id, chat_id, kind, status, queue, held, request_id,
                 created_at, lease_expires_at, slot, units, held_units,
                 cancel_requested, NULL::text AS provider_ref,
                 NULL::timestamptz AS uncertain_at, window_number
            FROM reservations WHERE chat_id = p_chat
          UNION ALL
          SELECT id, chat_id, kind, 'outcome_unknown', queue, held,
                 request_id, created_at, NULL, -1, units, held_units,
                 cancel_requested, provider_ref, uncertain_at, window_number
            FROM uncertain_reservations
           WHERE chat_id = p_chat AND outcome IS NULL) x);
END $$;

-- A ledger row's or a hold's grants (aligned arrays) as the JSON array
-- history shows: [{"grant": id, "credits": n}, ...], in their order.
CREATE OR REPLACE FUNCTION chargeonce_grant_parts(p_grants bigint[],
                                                  p_credits integer[])
  RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(json_agg(json_build_object('grant', g, 'credits', n)
                           ORDER BY i)::text, '[]')
    FROM unnest(p_grants, p_credits) WITH ORDINALITY AS u(g, n, i)
$$;

CREATE OR REPLACE FUNCTION chargeonce_status(p_chat bigint)
  RETURNS chargeonce_outcome LANGUAGE plpgsql STABLE AS $$
DECLARE
  c chats;
  r reservations;
  o chargeonce_outcome;
BEGIN
  SELECT * INTO c FROM chats WHERE chat_id = p_chat;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  -- Fenced (OFFSET 0): the chat's few rows by its index, then sorted; never
  -- the created_at index walked in order for the one chat.
  SELECT * INTO r
    FROM (SELECT * FROM reservations WHERE chat_id = p_chat OFFSET 0) x
   ORDER BY created_at, id LIMIT 1;
  IF FOUND THEN
    o := chargeonce_with_reservation(r);
  END IF;
  o.outcome := 'ok';
  o.s_pockets := c.pockets;
  IF c.next_expiry <= now() THEN
    o.s_pockets[3] := o.s_pockets[3] - chargeonce_expiring_unheld(p_chat);
  END IF;
  o.s_premium_us := chargeonce_us(c.premium_until);
  o.s_premium := coalesce(c.premium_until > now(), false);
  o.s_started := c.started;
  o.s_blocked := c.blocked;
  o.s_banned := c.banned;
  o.s_window_us := chargeonce_us(c.window_started_at);
  o.s_activity_us := chargeonce_us(c.last_activity_at);
  o.s_max_jobs := c.max_active_jobs;
  o.s_low_threshold := c.balance_low_threshold;
  o.s_reservations := chargeonce_reservations_json(p_chat);
  o.s_grants := chargeonce_grants_json(p_chat);
  -- A status answer's window is the chat's.
  o.window_number := c.window_number;
  RETURN o;
END $$;
