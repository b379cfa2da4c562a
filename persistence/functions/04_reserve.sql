-- SPDX-License-Identifier: Apache-2.0
-- Reserve: the decision of how much, from which pocket and window, and from
-- which grants, under the chat row's lock.
--
-- The live body of every function here: migrate() applies the function
-- files after the versioned migrations, in one transaction, when they
-- changed (persistence/migrations.hpp).

CREATE OR REPLACE FUNCTION chargeonce_reserve(
  p_chat bigint, p_kind text, p_request_id text, p_units integer,
  p_free_max integer, p_premium_max integer, p_products jsonb)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  spec jsonb := p_products -> p_kind;
  c record;
  a record;
  r reservations;
  o chargeonce_outcome;
  job_limit integer;
  free_slot integer;
  choice chargeonce_choice;
  hold chargeonce_grant_hold := ROW('{}', '{}');
  v_units integer := coalesce(nullif(p_units, 0), 1);
  low integer;
  available integer;
BEGIN
  IF spec IS NULL THEN
    RETURN chargeonce_refusal('invalid_argument', 'unknown kind ' || p_kind);
  END IF;
  IF v_units NOT BETWEEN 1 AND 1000000 THEN
    RETURN chargeonce_refusal('invalid_argument',
      'units must be 1 to 1000000, not ' || v_units);
  END IF;
  SELECT pockets, max_active_jobs,
         coalesce(premium_until > now(), false) AS premium, blocked, banned,
         window_number, next_expiry, sole_grant, balance_low_threshold
    INTO c FROM chats WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  -- An expired grant pays nothing new: its credits leave the balance
  -- before the decision reads it.
  IF c.next_expiry <= now() THEN
    PERFORM chargeonce_expire_grants(p_chat);
    SELECT pockets, max_active_jobs,
           coalesce(premium_until > now(), false) AS premium, blocked,
           banned, window_number, next_expiry, sole_grant,
           balance_low_threshold
      INTO c FROM chats WHERE chat_id = p_chat;
  END IF;
  o := chargeonce_find_request(p_chat, p_request_id);
  IF o.r_id IS NOT NULL THEN
    IF o.r_kind <> p_kind THEN
      RETURN chargeonce_refusal('invalid_argument',
        'request_id ' || p_request_id || ' of chat ' || p_chat
        || ' names a ' || o.r_kind || ' job, not ' || p_kind);
    END IF;
    RETURN o;
  END IF;
  IF c.banned THEN
    RETURN chargeonce_refusal('chat_banned', 'chat ' || p_chat || ' is banned');
  END IF;
  IF c.blocked THEN
    RETURN chargeonce_refusal('chat_blocked', 'chat ' || p_chat || ' is blocked');
  END IF;
  job_limit := chargeonce_job_limit(c.max_active_jobs, c.premium, p_free_max,
                                    p_premium_max);
  -- An id a client made up (auto:) replays, but does not tell a double
  -- tap from a second job: beyond one job at once it counts as none.
  IF job_limit > 1 AND (p_request_id = '' OR p_request_id LIKE 'auto:%') THEN
    RETURN chargeonce_refusal('invalid_argument',
      'chat ' || p_chat || ' runs up to ' || job_limit
      || ' jobs at once: reserve needs a request_id'
      || CASE WHEN p_request_id <> '' THEN ' of the caller''s own, not an '
              || 'auto: one' ELSE '' END);
  END IF;
  -- What the holds take from the pockets of this window: a past
  -- window's only their balance part.
  SELECT count(slot) AS n,
         chargeonce_pockets_sum(chargeonce_in_window(held, w,
                                                     c.window_number))
           AS held,
         coalesce(array_agg(slot) FILTER (WHERE slot IS NOT NULL), '{}')
           AS slots
    INTO a
    FROM (SELECT held, slot, window_number AS w FROM reservations
           WHERE chat_id = p_chat
          UNION ALL
          SELECT held, NULL, window_number FROM uncertain_reservations
           WHERE chat_id = p_chat AND outcome IS NULL) x;
  -- The refusal order of 0.1.0, where one job at a time made busy and
  -- cannot-pay exclusive: pockets that cannot pay even with nothing held
  -- first (insufficient_*), then no free slot (busy), then pockets the
  -- other jobs' holds leave short (insufficient_*).
  IF chargeonce_choose(spec, c.premium, c.pockets, '{}', v_units) IS NULL THEN
    RETURN chargeonce_refusal(spec ->> 'refusal',
      'chat ' || p_chat || ' cannot pay for ' || p_kind || (spec ->> 'why'));
  END IF;
  SELECT min(s) INTO free_slot FROM generate_series(0, job_limit - 1) AS s
   WHERE s <> ALL (a.slots) AND a.n < job_limit;
  IF free_slot IS NULL THEN
    RETURN chargeonce_refusal('busy',
      chargeonce_busy_message(p_chat, a.n, job_limit));
  END IF;
  choice := chargeonce_choose(spec, c.premium, c.pockets, a.held, v_units);
  IF choice IS NULL THEN
    RETURN chargeonce_refusal(spec ->> 'refusal',
      'chat ' || p_chat || ' cannot pay for ' || p_kind || (spec ->> 'why'));
  END IF;
  -- Balance is the one pocket that spans grants: the hold records which.
  IF choice.held[3] > 0 THEN
    hold := chargeonce_hold_grants(p_chat, choice.held[3], c.sole_grant);
  END IF;
  INSERT INTO reservations (chat_id, kind, queue, held, request_id, slot,
                            units, held_units, window_number, held_grants,
                            held_grant_credits)
    VALUES (p_chat, p_kind, chargeonce_queue(spec, c.premium),
            choice.held, p_request_id, free_slot, v_units, choice.held_units,
            c.window_number, hold.grant_ids, hold.credits)
    ON CONFLICT (chat_id, slot) DO NOTHING
    RETURNING * INTO r;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('busy',
      chargeonce_busy_message(p_chat, a.n + 1, job_limit));
  END IF;
  -- balance_low when this hold takes the available balance below the
  -- threshold (chargeonce_note_balance). The hot path: with no threshold
  -- (0, the default) a hold on balance costs one expression more, and one
  -- that holds no balance nothing; the threshold as chargeonce_low_threshold
  -- has it, inline.
  IF choice.held[3] > 0 THEN
    low := coalesce(c.balance_low_threshold,
                    nullif(current_setting('chargeonce.balance_low_threshold',
                                           true), '')::integer,
                    0);
    IF low > 0 THEN
      available := coalesce(c.pockets[3], 0) - coalesce(a.held[3], 0);
      PERFORM chargeonce_note_balance(p_chat, available,
                                      available - choice.held[3], low,
                                      'reserve', r.id);
    END IF;
  END IF;
  RETURN chargeonce_with_reservation(r);
END $$;
