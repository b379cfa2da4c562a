-- SPDX-License-Identifier: Apache-2.0
-- Grants: the credits of the balance pocket, grant by grant (migrations/
-- 004_grants.sql). pockets[3] is the sum of the grants' left; a hold on
-- balance records its part of each grant, in spending order, and settles
-- grant by grant when it ends. Expiry is lazy (a writer that finds
-- chats.next_expiry passed expires first, under the chat row's lock) and
-- swept by the supervisor (chargeonce_expire_due).
--
-- The live body of every function here: migrate() applies the function
-- files after the versioned migrations, in one transaction, when they
-- changed (persistence/migrations.hpp).

-- -- amounts and order --------------------------------------------------------

-- The spending order, the one place it is written: priority, then the
-- soonest expiry (none last), then the source (promo, admin, purchase: what
-- was given away before what was paid for), then creation.
CREATE OR REPLACE FUNCTION chargeonce_spending_order(g grants)
  RETURNS chargeonce_spending_key LANGUAGE sql IMMUTABLE AS $$
  SELECT ROW(g.priority, g.expires_at IS NULL, g.expires_at,
             CASE g.source WHEN 'promo' THEN 0 WHEN 'admin' THEN 1 ELSE 2 END,
             g.created_at, g.grant_id)::chargeonce_spending_key
$$;

-- What a grant has left: its held credits are still in it.
CREATE OR REPLACE FUNCTION chargeonce_grant_left(g grants) RETURNS integer
  LANGUAGE sql IMMUTABLE AS $$
  SELECT g.credits - g.charged - g.expired - g.voided
$$;

-- Credits held per grant by the chat's active reservations and its
-- unresolved uncertain ones (whose outcome may still charge them).
CREATE OR REPLACE FUNCTION chargeonce_grants_held(p_chat bigint)
  RETURNS TABLE (grant_id bigint, held integer) LANGUAGE sql STABLE AS $$
  SELECT h.grant_id, sum(h.credits)::integer
    FROM (SELECT x.grant_id, x.credits
            FROM reservations r,
                 unnest(r.held_grants, r.held_grant_credits)
                   AS x(grant_id, credits)
           WHERE r.chat_id = p_chat
          UNION ALL
          SELECT x.grant_id, x.credits
            FROM uncertain_reservations u,
                 unnest(u.held_grants, u.held_grant_credits)
                   AS x(grant_id, credits)
           WHERE u.chat_id = p_chat AND u.outcome IS NULL) h
   GROUP BY h.grant_id
$$;

-- The soonest expiry of the chat's grants that may still expire. Fenced
-- (OFFSET 0): the chat's few grants by its index, then their minimum; never
-- the grants_due index walked in expiry order through every chat's grants
-- until one of this chat's comes (the plan a min() over an index on the
-- same column invites: a seed of 100,000 chats with two expiring grants
-- each ran it for more than seven minutes).
CREATE OR REPLACE FUNCTION chargeonce_next_expiry(p_chat bigint)
  RETURNS timestamptz LANGUAGE sql STABLE AS $$
  SELECT min(x.expires_at)
    FROM (SELECT expires_at FROM grants
           WHERE chat_id = p_chat AND expires_at IS NOT NULL
             AND expired_at IS NULL AND voided_at IS NULL OFFSET 0) x
$$;

-- How a grant's credits leave the balance when nobody holds them: 'void'
-- or 'expire', whichever came first (a grant voided before its expiry is
-- voided; one voided after it has expired), NULL while it is live.
CREATE OR REPLACE FUNCTION chargeonce_grant_end(g grants) RETURNS text
  LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN g.voided_at IS NOT NULL
                   AND (g.expires_at IS NULL OR g.voided_at < g.expires_at)
                THEN 'void'
              WHEN g.expires_at <= now() THEN 'expire' END
$$;

-- -- the balance and the ledger ------------------------------------------------

-- `p_credits` of grant `p_grant` leave chat `p_chat`'s balance (the caller
-- has moved them to the grant's expired or voided): pockets[3] lowered, one
-- ledger row `p_entry` (expire, void) with the pockets after it.
CREATE OR REPLACE FUNCTION chargeonce_grant_leaves(
  p_chat bigint, p_grant bigint, p_credits integer, p_entry text,
  p_detail text)
  RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  before integer[];
  after integer[];
BEGIN
  SELECT pockets INTO before FROM chats WHERE chat_id = p_chat;
  after := chargeonce_pockets_set(before, 3,
             GREATEST(0, coalesce(before[3], 0) - p_credits));
  IF p_credits <> 0 THEN
    UPDATE chats SET pockets = after WHERE chat_id = p_chat;
  END IF;
  INSERT INTO ledger (entry, chat_id, detail, pockets, changed, grant_ids,
                      grant_credits)
    VALUES (p_entry, p_chat, p_detail, after,
            chargeonce_pockets_change(before, after), ARRAY[p_grant],
            ARRAY[p_credits]);
END $$;

-- -- the sole grant ----------------------------------------------------------

-- chats.sole_grant as it should be: the chat's one grant that can still give
-- credits (not expired, not voided, something left), NULL for none or
-- several. A grant's left only shrinks, so the value stays true between the
-- changes the triggers below recompute it at: a grant added, expired or
-- voided (a grant that spends down to nothing leaves it set, harmlessly:
-- nothing unheld is left on the balance then).
CREATE OR REPLACE FUNCTION chargeonce_sole_grant(p_chat bigint)
  RETURNS bigint LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN count(*) = 1 THEN min(g.grant_id) END
    FROM grants g
   WHERE g.chat_id = p_chat AND g.expired_at IS NULL AND g.voided_at IS NULL
     AND chargeonce_grant_left(g) > 0
$$;

-- A trigger rather than a line in each writer: grants inserted anywhere (a
-- top-up, an opening balance, the bench's seed, a test's fixture) keep the
-- fast path of chargeonce_hold_grants true.
-- The transition table has no statistics: the DISTINCT list drives the
-- join (one index probe of chats per chat), where `IN (…)` was once planned
-- as a scan of the added grants per row of chats (minutes for a seed of
-- 100,000 chats).
CREATE OR REPLACE FUNCTION chargeonce_grants_added() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  UPDATE chats c SET sole_grant = chargeonce_sole_grant(c.chat_id)
    FROM (SELECT DISTINCT chat_id FROM added_grants) a
   WHERE c.chat_id = a.chat_id;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION chargeonce_grant_ended() RETURNS trigger
  LANGUAGE plpgsql AS $$
BEGIN
  UPDATE chats SET sole_grant = chargeonce_sole_grant(NEW.chat_id)
   WHERE chat_id = NEW.chat_id;
  RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER grants_sole_grant_added AFTER INSERT ON grants
  REFERENCING NEW TABLE AS added_grants
  FOR EACH STATEMENT EXECUTE FUNCTION chargeonce_grants_added();

CREATE OR REPLACE TRIGGER grants_sole_grant_ended
  AFTER UPDATE OF expired_at, voided_at ON grants FOR EACH ROW
  WHEN (OLD.expired_at IS DISTINCT FROM NEW.expired_at
        OR OLD.voided_at IS DISTINCT FROM NEW.voided_at)
  EXECUTE FUNCTION chargeonce_grant_ended();

-- -- holds ---------------------------------------------------------------------

-- The split of `p_credits` of balance over the chat's live grants (not
-- voided, not expired), in spending order, each giving at most what it has
-- left that nobody holds. The caller chose balance because pockets[3] less
-- its holds covers it; grants that cannot are a bug (pockets[3] and the
-- grants disagree), never a refusal. `p_sole_grant` is chats.sole_grant,
-- read under the chat's lock after its due grants expired: when set, no
-- other grant has anything unheld, so it pays the whole hold without a scan.
CREATE OR REPLACE FUNCTION chargeonce_hold_grants(p_chat bigint,
                                                  p_credits integer,
                                                  p_sole_grant bigint
                                                    DEFAULT NULL)
  RETURNS chargeonce_grant_hold LANGUAGE plpgsql STABLE AS $$
DECLARE
  need integer := coalesce(p_credits, 0);
  ids bigint[] := '{}';
  amounts integer[] := '{}';
  take integer;
  g record;
BEGIN
  IF need <= 0 THEN
    RETURN ROW('{}', '{}')::chargeonce_grant_hold;
  END IF;
  IF p_sole_grant IS NOT NULL THEN
    RETURN ROW(ARRAY[p_sole_grant], ARRAY[need])::chargeonce_grant_hold;
  END IF;
  FOR g IN
    SELECT x.grant_id, chargeonce_grant_left(x) - coalesce(h.held, 0) AS free
      FROM grants x
      LEFT JOIN chargeonce_grants_held(p_chat) h ON h.grant_id = x.grant_id
     WHERE x.chat_id = p_chat AND x.voided_at IS NULL
       AND (x.expires_at IS NULL OR x.expires_at > now())
       AND chargeonce_grant_left(x) > 0
     ORDER BY chargeonce_spending_order(x)
  LOOP
    take := LEAST(need, g.free);
    IF take > 0 THEN
      ids := ids || g.grant_id;
      amounts := amounts || take;
      need := need - take;
    END IF;
    EXIT WHEN need = 0;
  END LOOP;
  IF need > 0 THEN
    RAISE EXCEPTION 'chat % holds % balance credits but its live grants '
      'cover only %: pockets[3] and the grants disagree (a bug)', p_chat,
      p_credits, p_credits - need;
  END IF;
  RETURN ROW(ids, amounts)::chargeonce_grant_hold;
END $$;

-- -- expiry --------------------------------------------------------------------

-- Expires the chat's grants that are due, under the chat row's lock (the
-- caller's): each one's unheld credits move to `expired` and leave the
-- balance (one ledger row `expire`, one credits_expired event, for a grant
-- that had anything left); credits still held stay in the grant, since a
-- hold belongs to what it was taken from, and expire when their hold ends
-- (chargeonce_settle_hold). One balance_low event when what left takes the
-- available balance below the chat's threshold. Returns how many grants
-- expired.
CREATE OR REPLACE FUNCTION chargeonce_expire_grants(p_chat bigint)
  RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  g record;
  n integer := 0;
  low integer;
  balance_before integer;
  held_balance integer;
BEGIN
  SELECT chargeonce_low_threshold(balance_low_threshold),
         coalesce(pockets[3], 0)
    INTO low, balance_before FROM chats WHERE chat_id = p_chat;
  FOR g IN
    SELECT x.grant_id, chargeonce_grant_left(x) AS left_credits,
           coalesce(h.held, 0) AS held
      FROM grants x
      LEFT JOIN chargeonce_grants_held(p_chat) h ON h.grant_id = x.grant_id
     WHERE x.chat_id = p_chat AND x.expires_at <= now()
       AND x.expired_at IS NULL AND x.voided_at IS NULL
     ORDER BY x.expires_at, x.grant_id
     FOR UPDATE OF x
  LOOP
    UPDATE grants
       SET expired = expired + GREATEST(0, g.left_credits - g.held),
           expired_at = now()
     WHERE grant_id = g.grant_id;
    n := n + 1;
    CONTINUE WHEN g.left_credits <= 0;
    PERFORM chargeonce_grant_leaves(p_chat, g.grant_id,
      GREATEST(0, g.left_credits - g.held), 'expire',
      'grant ' || g.grant_id || ' expired'
      || CASE WHEN g.held > 0 THEN ' (' || g.held || ' credits still held)'
              ELSE '' END);
    INSERT INTO events (event, chat_id, detail, grant_id, credits)
      VALUES ('credits_expired', p_chat,
              'grant ' || g.grant_id || ': '
              || GREATEST(0, g.left_credits - g.held) || ' credits expired'
              || CASE WHEN g.held > 0 THEN ', ' || g.held || ' held'
                      ELSE '' END,
              g.grant_id, GREATEST(0, g.left_credits - g.held));
  END LOOP;
  -- Holds are what they were: the fall is what left pockets[3].
  IF low > 0 AND n > 0 THEN
    held_balance := chargeonce_balance_held(p_chat);
    PERFORM chargeonce_note_balance(p_chat, balance_before - held_balance,
      (SELECT coalesce(pockets[3], 0) FROM chats WHERE chat_id = p_chat)
        - held_balance,
      low, 'expire');
  END IF;
  UPDATE chats SET next_expiry = chargeonce_next_expiry(p_chat)
   WHERE chat_id = p_chat;
  RETURN n;
END $$;

-- The lazy expiry every writer of a chat's balance makes first, under the
-- chat row's lock: one comparison when nothing is due.
CREATE OR REPLACE FUNCTION chargeonce_expire_if_due(p_chat bigint,
                                                    p_next_expiry timestamptz)
  RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  IF p_next_expiry <= now() THEN
    PERFORM chargeonce_expire_grants(p_chat);
    RETURN true;
  END IF;
  RETURN false;
END $$;

-- Locks the chat row before a hold on grants ends (every writer of the
-- balance locks the chat first), and expires what is due while the hold
-- still counts as held.
CREATE OR REPLACE FUNCTION chargeonce_lock_for_settle(p_chat bigint)
  RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  due timestamptz;
BEGIN
  SELECT next_expiry INTO due FROM chats WHERE chat_id = p_chat FOR UPDATE;
  PERFORM chargeonce_expire_if_due(p_chat, due);
END $$;

-- The supervisor's scan: up to p_limit grants that are due (the grants_due
-- index), their chats locked in chat-id order as every writer locks chats,
-- each chat's due grants expired. Returns how many grants expired.
CREATE OR REPLACE FUNCTION chargeonce_expire_due(p_limit integer)
  RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  due bigint[];
  chat bigint;
  n integer := 0;
BEGIN
  SELECT array_agg(DISTINCT g.chat_id) INTO due
    FROM (SELECT chat_id FROM grants
           WHERE expires_at <= now() AND expired_at IS NULL
             AND voided_at IS NULL AND expires_at IS NOT NULL
           ORDER BY expires_at LIMIT p_limit) g;
  IF due IS NULL THEN
    RETURN 0;
  END IF;
  FOR chat IN
    SELECT chat_id FROM chats WHERE chat_id = ANY (due)
     ORDER BY chat_id FOR UPDATE
  LOOP
    n := n + chargeonce_expire_grants(chat);
  END LOOP;
  RETURN n;
END $$;

-- The human detail of a grant's credits_expiring event (a subscriber reads
-- the event's columns).
CREATE OR REPLACE FUNCTION chargeonce_expiring_detail(g grants)
  RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT 'grant ' || g.grant_id || ': ' || chargeonce_grant_left(g)
         || ' credits expire at '
         || to_char(g.expires_at AT TIME ZONE 'UTC',
                    'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
$$;

-- One credits_expiring event per grant, p_notice_ms before it expires:
-- up to p_limit grants, rows another transaction holds skipped for the
-- next scan. A grant with nothing left is marked without an event. A
-- grant created inside that time got its event from its top-up
-- (chargeonce_top_up) and is marked already. Returns how many were marked.
CREATE OR REPLACE FUNCTION chargeonce_notice_expiring(p_notice_ms bigint,
                                                      p_limit integer)
  RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  n integer;
BEGIN
  WITH due AS (
    SELECT grant_id FROM grants
     WHERE expires_at <= now() + p_notice_ms * interval '1 millisecond'
       AND expired_at IS NULL AND voided_at IS NULL
       AND expires_at IS NOT NULL AND expiring_noticed_at IS NULL
     ORDER BY expires_at LIMIT p_limit FOR UPDATE SKIP LOCKED),
  noticed AS (
    UPDATE grants g SET expiring_noticed_at = now()
      FROM due WHERE g.grant_id = due.grant_id
    RETURNING g.*),
  published AS (
    INSERT INTO events (event, chat_id, detail, grant_id, credits,
                        expires_at)
    SELECT 'credits_expiring', x.chat_id, chargeonce_expiring_detail(x),
           x.grant_id, chargeonce_grant_left(x), x.expires_at
      FROM noticed x
     WHERE chargeonce_grant_left(x) > 0
     ORDER BY x.chat_id, x.grant_id)
  SELECT count(*) INTO n FROM noticed;
  RETURN n;
END $$;

-- -- the end of a hold -----------------------------------------------------------

-- A hold on grants ends (commit, fail, cancel, resolve, release): p_charge
-- credits are charged from its grants in the hold's order, each at most
-- its part and what it has left (the clamp); returns the credits charged
-- of each (aligned with p_grants). What a grant's part has over that
-- returns to the balance while the grant is live; else it leaves it, to
-- voided or expired (whichever came first), with one ledger row naming
-- the reservation. The caller holds the chat row's lock and has expired
-- what was due (chargeonce_lock_for_settle); pockets[3] for the charge is
-- the caller's.
CREATE OR REPLACE FUNCTION chargeonce_settle_hold(
  p_chat bigint, p_grants bigint[], p_credits integer[], p_charge integer,
  p_reservation bigint)
  RETURNS integer[] LANGUAGE plpgsql AS $$
DECLARE
  need integer := GREATEST(0, coalesce(p_charge, 0));
  taken integer[] := '{}';
  g grants;
  take integer;
  rest integer;
  how text;
BEGIN
  FOR i IN 1 .. coalesce(cardinality(p_grants), 0) LOOP
    SELECT * INTO g FROM grants
     WHERE grant_id = p_grants[i] AND chat_id = p_chat FOR UPDATE;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'reservation % holds grant % that chat % does not '
        'have (a bug)', p_reservation, p_grants[i], p_chat;
    END IF;
    take := GREATEST(0, LEAST(need, p_credits[i], chargeonce_grant_left(g)));
    rest := GREATEST(0, LEAST(p_credits[i], chargeonce_grant_left(g)) - take);
    need := need - take;
    how := CASE WHEN rest > 0 THEN chargeonce_grant_end(g) END;
    IF take > 0 OR how IS NOT NULL THEN
      UPDATE grants
         SET charged = charged + take,
             voided = voided + CASE WHEN how = 'void' THEN rest ELSE 0 END,
             expired = expired + CASE WHEN how = 'expire' THEN rest ELSE 0 END,
             expired_at = CASE WHEN how = 'expire'
                               THEN coalesce(expired_at, now())
                               ELSE expired_at END
       WHERE grant_id = g.grant_id;
    END IF;
    IF how IS NOT NULL THEN
      PERFORM chargeonce_grant_leaves(p_chat, g.grant_id, rest, how,
        'grant ' || g.grant_id || CASE how WHEN 'void' THEN ' voided'
                                           ELSE ' expired' END
        || ': released by reservation ' || p_reservation);
    END IF;
    taken := taken || take;
  END LOOP;
  RETURN taken;
END $$;

-- The sweep's release of a job past its lease or sweep-timeout (the
-- deadline re-checked under the row lock), as one call: the reservation
-- deleted, remembered as released (with a request id) and in
-- released_reservations, and its hold settled, charging nothing. The
-- reason, or NULL when a heartbeat or a commit came first. For
-- store::release, whose own statement (release_statement_sql) does not
-- settle grants.
CREATE OR REPLACE FUNCTION chargeonce_release_swept(
  p_chat bigint, p_id bigint, p_timeout_ms bigint)
  RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  r reservations;
  why text;
BEGIN
  IF EXISTS (SELECT 1 FROM reservations
              WHERE id = p_id AND chat_id = p_chat
                AND cardinality(held_grants) > 0) THEN
    PERFORM chargeonce_lock_for_settle(p_chat);
  END IF;
  DELETE FROM reservations
   WHERE id = p_id AND chat_id = p_chat
     AND (created_at < now() - p_timeout_ms * interval '1 millisecond'
          OR lease_expires_at < now())
  RETURNING * INTO r;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  why := CASE WHEN r.lease_expires_at < now() THEN 'lease_expired'
              ELSE 'sweep_timeout' END;
  PERFORM chargeonce_remember_end(r, 'released');
  INSERT INTO released_reservations (id, chat_id, reason)
    VALUES (r.id, r.chat_id, why);
  PERFORM chargeonce_settle_hold(p_chat, r.held_grants, r.held_grant_credits,
                                 0, r.id);
  RETURN why;
END $$;

-- The part of the chat's balance that no grant has (pockets[3] less the
-- grants' left) becomes one grant from `p_source` that never expires: for
-- create_chat --balance (an admin grant), whose insert sets pockets[3]
-- itself. Returns the grant, or NULL when nothing was missing. The caller
-- holds the chat row (it just inserted it, or locked it).
CREATE OR REPLACE FUNCTION chargeonce_grant_balance(p_chat bigint,
                                                    p_source text DEFAULT
                                                      'admin')
  RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  missing integer;
  id bigint;
BEGIN
  SELECT coalesce(c.pockets[3], 0)
         - coalesce((SELECT sum(chargeonce_grant_left(g))
                       FROM grants g WHERE g.chat_id = p_chat), 0)
    INTO missing FROM chats c WHERE c.chat_id = p_chat;
  IF coalesce(missing, 0) <= 0 THEN
    RETURN NULL;
  END IF;
  INSERT INTO grants (chat_id, source, credits)
    VALUES (p_chat, p_source, missing) RETURNING grant_id INTO id;
  RETURN id;
END $$;

-- -- top-up and void -------------------------------------------------------------

CREATE OR REPLACE FUNCTION chargeonce_grant_refusal(code text, msg text)
  RETURNS chargeonce_grant_answer LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  o chargeonce_grant_answer;
BEGIN
  o.outcome := code;
  o.message := msg;
  RETURN o;
END $$;

-- A grant as an answer, with what open holds hold of it now.
CREATE OR REPLACE FUNCTION chargeonce_grant_answer_of(g grants)
  RETURNS chargeonce_grant_answer LANGUAGE sql STABLE AS $$
  SELECT ROW('ok', NULL, g.grant_id, g.chat_id, g.source, g.credits,
             chargeonce_grant_left(g),
             coalesce((SELECT h.held FROM chargeonce_grants_held(g.chat_id) h
                        WHERE h.grant_id = g.grant_id), 0),
             g.priority, chargeonce_us(g.expires_at), g.expires_in_ms,
             g.payment_id, chargeonce_us(g.created_at),
             chargeonce_us(g.expired_at), chargeonce_us(g.voided_at),
             chargeonce_us(g.created_at),
             chargeonce_grant_end(g))::chargeonce_grant_answer
$$;

-- Why a top-up is invalid whatever the chat has, or NULL.
CREATE OR REPLACE FUNCTION chargeonce_top_up_invalid(
  p_credits integer, p_expires_at timestamptz, p_expires_in_ms bigint,
  p_priority integer, p_source text)
  RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN coalesce(p_credits, 0) <= 0
      THEN 'credits must be positive, not ' || coalesce(p_credits::text, 'none')
    WHEN p_expires_at IS NOT NULL AND p_expires_in_ms IS NOT NULL
      THEN 'a top-up gives expires_at or expires_in, not both'
    WHEN p_expires_in_ms <= 0
      THEN 'expires_in must be positive, not ' || p_expires_in_ms || ' ms'
    WHEN p_priority NOT BETWEEN 0 AND 1000
      THEN 'priority must be 0 to 1000, not ' || p_priority
    WHEN p_source NOT IN ('purchase', 'promo', 'admin')
      THEN 'source must be purchase, promo or admin, not ' || p_source
  END
$$;

-- A top-up: a grant of p_credits, idempotent by p_payment_id. A retry with
-- the same fields as given (a relative expiry as given, not the instant it
-- resolved to) answers the first grant and changes nothing; other values
-- are invalid_argument. Without the new fields (NULLs) it is the top-up of
-- 0.2: a grant that never expires, priority 100, source purchase, and the
-- same answers and refusals (store::top_up). A grant that expires within
-- p_notice_ms (the server's expiry-notice) gets its credits_expiring event
-- in this transaction, not at the next scan; without p_notice_ms the scan
-- (chargeonce_notice_expiring) writes it.
CREATE OR REPLACE FUNCTION chargeonce_top_up(
  p_chat bigint, p_credits integer, p_payment_id text,
  p_expires_at timestamptz DEFAULT NULL, p_expires_in_ms bigint DEFAULT NULL,
  p_priority integer DEFAULT NULL, p_source text DEFAULT NULL,
  p_notice_ms bigint DEFAULT NULL)
  RETURNS chargeonce_grant_answer LANGUAGE plpgsql AS $$
DECLARE
  v_priority integer := coalesce(p_priority, 100);
  v_source text := coalesce(p_source, 'purchase');
  why text := chargeonce_top_up_invalid(p_credits, p_expires_at,
                                        p_expires_in_ms, p_priority, p_source);
  v_expires_at timestamptz;
  c record;
  g grants;
  l record;
  o chargeonce_grant_answer;
BEGIN
  IF why IS NOT NULL THEN
    RETURN chargeonce_grant_refusal('invalid_argument', why);
  END IF;
  SELECT pockets, next_expiry INTO c FROM chats
   WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_grant_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  -- Under the chat lock, a retry of the same purchase sees the first.
  SELECT * INTO g FROM grants WHERE payment_id = p_payment_id;
  IF FOUND THEN
    IF g.chat_id <> p_chat OR g.credits <> p_credits THEN
      RETURN chargeonce_grant_refusal('invalid_argument',
        'payment_id ' || p_payment_id || ' was already used for '
        || g.credits || ' credits of chat ' || g.chat_id);
    END IF;
    IF g.priority <> v_priority OR g.source <> v_source
       OR g.expires_in_ms IS DISTINCT FROM p_expires_in_ms
       OR (p_expires_in_ms IS NULL
           AND g.expires_at IS DISTINCT FROM p_expires_at) THEN
      RETURN chargeonce_grant_refusal('invalid_argument',
        'payment_id ' || p_payment_id || ' was already used for a grant '
        || 'with priority ' || g.priority || ', source ' || g.source
        || CASE WHEN g.expires_in_ms IS NOT NULL
                THEN ', expires_in ' || g.expires_in_ms || ' ms'
                WHEN g.expires_at IS NOT NULL
                THEN ', expires_at ' || g.expires_at
                ELSE ', no expiry' END);
    END IF;
    RETURN chargeonce_grant_answer_of(g);
  END IF;
  -- A top-up of 0.2 (before grants) names no grant: its ledger row answers.
  SELECT chat_id, credited_balance, committed_at INTO l
    FROM ledger WHERE payment_id = p_payment_id;
  IF FOUND THEN
    IF l.chat_id <> p_chat OR l.credited_balance <> p_credits THEN
      RETURN chargeonce_grant_refusal('invalid_argument',
        'payment_id ' || p_payment_id || ' was already used for '
        || l.credited_balance || ' credits of chat ' || l.chat_id);
    END IF;
    o.outcome := 'ok';
    o.chat_id := l.chat_id;
    o.credits := l.credited_balance;
    o.payment_id := p_payment_id;
    o.committed_us := chargeonce_us(l.committed_at);
    RETURN o;
  END IF;
  IF p_expires_at <= now() THEN
    RETURN chargeonce_grant_refusal('invalid_argument',
      'expires_at ' || p_expires_at || ' is not in the future');
  END IF;
  IF chargeonce_expire_if_due(p_chat, c.next_expiry) THEN
    SELECT pockets, next_expiry INTO c FROM chats WHERE chat_id = p_chat;
  END IF;
  IF coalesce(c.pockets[3], 0)::bigint + p_credits > 2147483647 THEN
    RETURN chargeonce_grant_refusal('invalid_argument',
      'balance of chat ' || p_chat || ' would overflow');
  END IF;
  v_expires_at := coalesce(p_expires_at,
                           now() + p_expires_in_ms * interval '1 millisecond');
  -- Inside the notice window: noticed as it is made, so that the scan
  -- never writes a second credits_expiring for it.
  INSERT INTO grants (chat_id, source, credits, priority, expires_at,
                      expires_in_ms, payment_id, expiring_noticed_at)
    VALUES (p_chat, v_source, p_credits, v_priority, v_expires_at,
            p_expires_in_ms, p_payment_id,
            CASE WHEN v_expires_at
                      <= now() + p_notice_ms * interval '1 millisecond'
                 THEN now() END)
    ON CONFLICT (payment_id) WHERE payment_id IS NOT NULL DO NOTHING
    RETURNING * INTO g;
  IF NOT FOUND THEN
    -- The same payment_id committed for another chat in the meantime.
    RETURN chargeonce_grant_refusal('invalid_argument',
      'payment_id ' || p_payment_id || ' was already used for another chat');
  END IF;
  IF g.expiring_noticed_at IS NOT NULL THEN
    INSERT INTO events (event, chat_id, detail, grant_id, credits,
                        expires_at)
      VALUES ('credits_expiring', p_chat, chargeonce_expiring_detail(g),
              g.grant_id, g.credits, g.expires_at);
  END IF;
  UPDATE chats
     SET pockets = chargeonce_pockets_set(pockets, 3,
                     coalesce(pockets[3], 0) + p_credits),
         next_expiry = LEAST(next_expiry, g.expires_at)
   WHERE chat_id = p_chat RETURNING pockets INTO c.pockets;
  INSERT INTO ledger (entry, chat_id, payment_id, credited_balance, pockets,
                      grant_ids, grant_credits)
    VALUES ('top_up', p_chat, p_payment_id, p_credits, c.pockets,
            ARRAY[g.grant_id], ARRAY[p_credits]);
  RETURN chargeonce_grant_answer_of(g);
END $$;

-- Voids a grant (a refund, a chargeback), named by id or by payment id:
-- what nobody holds of it leaves the balance (ledger `void`); holds on it
-- finish normally, and what they release afterwards is voided too
-- (chargeonce_settle_hold). A second void answers the grant and changes
-- nothing. One balance_low event when what left takes the available
-- balance below the chat's threshold.
CREATE OR REPLACE FUNCTION chargeonce_void_grant(
  p_chat bigint, p_grant bigint, p_payment_id text DEFAULT NULL)
  RETURNS chargeonce_grant_answer LANGUAGE plpgsql AS $$
DECLARE
  due timestamptz;
  g grants;
  held integer;
  gone integer;
  low integer;
  balance_before integer;
  held_balance integer;
BEGIN
  IF (p_grant IS NULL) = (p_payment_id IS NULL) THEN
    RETURN chargeonce_grant_refusal('invalid_argument',
      'void-grant names a grant or a payment_id, one of them');
  END IF;
  SELECT next_expiry INTO due FROM chats WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_grant_refusal('not_found', 'unknown chat ' || p_chat);
  END IF;
  -- Expired first if it was due: credits expire or are voided, not both.
  PERFORM chargeonce_expire_if_due(p_chat, due);
  SELECT * INTO g FROM grants
   WHERE chat_id = p_chat
     AND (grant_id = p_grant OR payment_id = p_payment_id)
   FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_grant_refusal('not_found',
      'chat ' || p_chat || ' has no grant '
      || coalesce(p_grant::text, 'of payment_id ' || p_payment_id));
  END IF;
  IF g.voided_at IS NOT NULL THEN
    RETURN chargeonce_grant_answer_of(g);
  END IF;
  held := coalesce((SELECT h.held FROM chargeonce_grants_held(p_chat) h
                     WHERE h.grant_id = g.grant_id), 0);
  gone := GREATEST(0, chargeonce_grant_left(g) - held);
  SELECT chargeonce_low_threshold(balance_low_threshold),
         coalesce(pockets[3], 0)
    INTO low, balance_before FROM chats WHERE chat_id = p_chat;
  UPDATE grants SET voided = voided + gone, voided_at = now()
   WHERE grant_id = g.grant_id RETURNING * INTO g;
  PERFORM chargeonce_grant_leaves(p_chat, g.grant_id, gone, 'void',
    'grant ' || g.grant_id || ' voided'
    || CASE WHEN held > 0 THEN ' (' || held || ' credits still held)'
            ELSE '' END);
  IF low > 0 AND gone > 0 THEN
    held_balance := chargeonce_balance_held(p_chat);
    PERFORM chargeonce_note_balance(p_chat, balance_before - held_balance,
      (SELECT coalesce(pockets[3], 0) FROM chats WHERE chat_id = p_chat)
        - held_balance,
      low, 'void');
  END IF;
  UPDATE chats SET next_expiry = chargeonce_next_expiry(p_chat)
   WHERE chat_id = p_chat;
  RETURN chargeonce_grant_answer_of(g);
END $$;

-- -- status ----------------------------------------------------------------------

-- What the chat's grants that are due to expire, and not expired yet, have
-- that nobody holds: it leaves the balance at the chat's next write (or the
-- supervisor's scan), and status, which does not write, shows it gone.
CREATE OR REPLACE FUNCTION chargeonce_expiring_unheld(p_chat bigint)
  RETURNS integer LANGUAGE sql STABLE AS $$
  SELECT coalesce(sum(GREATEST(0, chargeonce_grant_left(g)
                                  - coalesce(h.held, 0))), 0)::integer
    FROM grants g
    LEFT JOIN chargeonce_grants_held(p_chat) h ON h.grant_id = g.grant_id
   WHERE g.chat_id = p_chat AND g.expires_at <= now()
     AND g.expired_at IS NULL AND g.voided_at IS NULL
$$;

-- The chat's grants with credits left, in spending order, for status: an
-- expired or voided grant shows only what holds still hold of it (the rest
-- is gone, written or not: status does not write), flagged.
CREATE OR REPLACE FUNCTION chargeonce_grants_json(p_chat bigint)
  RETURNS text LANGUAGE sql STABLE AS $$
  SELECT coalesce(json_agg(json_build_object(
           'id', x.grant_id, 'source', x.source, 'credits', x.credits,
           'left', x.shown_left, 'held', x.held,
           'expires_us', chargeonce_us(x.expires_at),
           'priority', x.priority, 'payment_id', x.payment_id,
           'created_us', chargeonce_us(x.created_at),
           'expired_us', chargeonce_us(x.expired_at),
           'voided_us', chargeonce_us(x.voided_at),
           'expired', x.dead IS NOT DISTINCT FROM 'expire',
           'voided', x.dead IS NOT DISTINCT FROM 'void')
           ORDER BY x.spending)::text, '[]')
    FROM (SELECT g.*, coalesce(h.held, 0) AS held,
                 chargeonce_grant_end(g) AS dead,
                 chargeonce_spending_order(g) AS spending,
                 CASE WHEN chargeonce_grant_end(g) IS NULL
                      THEN chargeonce_grant_left(g)
                      ELSE LEAST(chargeonce_grant_left(g),
                                 coalesce(h.held, 0)) END AS shown_left
            FROM grants g
            LEFT JOIN chargeonce_grants_held(p_chat) h
              ON h.grant_id = g.grant_id
           WHERE g.chat_id = p_chat) x
   WHERE x.shown_left > 0
$$;
