-- Pockets, holds and charges as integer arrays indexed by a pocket ordinal
-- instead of jsonb objects: the per-pocket jsonb arithmetic of reserve and
-- commit (build, parse, iterate, merge objects) was the whole cost the
-- catalog added to the hot path at 64 clients (docs/performance.md,
-- 2026-12-06); the same work on arrays is element reads and writes.
--
-- catalog_pockets gives each pocket name its ordinal once and for ever
-- (the built-in pockets are 1, 2, 3); the servers register their catalog's
-- pockets at start-up and translate ordinals back into names: names stay
-- what the catalog, the API and the logs use. In every array a NULL element
-- is a pocket not listed, as a key absent from the object was: it holds 0.
-- A receipt that charged 0 of balance lists balance at 0, as before.

CREATE TABLE catalog_pockets (
  pocket text PRIMARY KEY CHECK (chargeonce_is_name(pocket)),
  ordinal integer NOT NULL UNIQUE CHECK (ordinal BETWEEN 1 AND 1000),
  added_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO catalog_pockets (pocket, ordinal)
  VALUES ('daily_messages', 1), ('daily_images', 2), ('balance', 3);

-- Every other pocket the data names, in name order after the built-in ones.
INSERT INTO catalog_pockets (pocket, ordinal)
SELECT k, 3 + row_number() OVER (ORDER BY k COLLATE "C")
  FROM (SELECT jsonb_object_keys(pockets) AS k FROM chats
        UNION SELECT jsonb_object_keys(held) FROM reservations
        UNION SELECT jsonb_object_keys(held_units) FROM reservations
        UNION SELECT jsonb_object_keys(held) FROM ended_reservations
        UNION SELECT jsonb_object_keys(held_units) FROM ended_reservations
        UNION SELECT jsonb_object_keys(held) FROM uncertain_reservations
        UNION SELECT jsonb_object_keys(held_units) FROM uncertain_reservations
        UNION SELECT jsonb_object_keys(charged) FROM uncertain_reservations
         WHERE charged IS NOT NULL
        UNION SELECT jsonb_object_keys(released) FROM uncertain_reservations
         WHERE released IS NOT NULL
        UNION SELECT jsonb_object_keys(charged) FROM ledger
        UNION SELECT jsonb_object_keys(released) FROM ledger
        UNION SELECT jsonb_object_keys(changed) FROM ledger
        UNION SELECT jsonb_object_keys(pockets) FROM ledger
         WHERE pockets IS NOT NULL) names
 WHERE k NOT IN ('daily_messages', 'daily_images', 'balance');

-- `a` with pocket `i` set to `v`; a pocket between the end of `a` and `i`
-- stays unlisted. Here and in every pocket helper a NULL array is no
-- pockets, '{}' (without the coalesce, NULL with 3 set to 5 was {5}: the
-- amount landed in pocket 1).
CREATE FUNCTION chargeonce_pockets_set(a integer[], i integer, v integer)
  RETURNS integer[] LANGUAGE sql IMMUTABLE AS $$
  SELECT (coalesce(a, '{}'::integer[]))[:i - 1]
         || array_fill(NULL::integer,
                       ARRAY[GREATEST(0, i - 1
                                         - cardinality(coalesce(a, '{}')))])
         || v || (coalesce(a, '{}'::integer[]))[i + 1:]
$$;

-- Pockets written with names, {"balance": 5}, as the array of their
-- ordinals: the conversion below, and for SQL written by hand (support,
-- tests). A name catalog_pockets does not have is an error, not a pocket
-- dropped.
CREATE FUNCTION chargeonce_pocket(name text) RETURNS integer
  LANGUAGE sql STABLE AS $$
  SELECT ordinal FROM catalog_pockets WHERE pocket = name
$$;

CREATE FUNCTION chargeonce_pockets(p jsonb) RETURNS integer[]
  LANGUAGE plpgsql STABLE STRICT AS $$
DECLARE
  names text[];
  amounts integer[];
  out integer[] := '{}';
  i integer;
BEGIN
  SELECT array_agg(key), array_agg(value::integer) INTO names, amounts
    FROM jsonb_each_text(p);
  FOR k IN 1 .. coalesce(cardinality(names), 0) LOOP
    i := chargeonce_pocket(names[k]);
    IF i IS NULL THEN
      RAISE invalid_parameter_value USING
        MESSAGE = 'unknown pocket ' || names[k] || ': not in catalog_pockets';
    END IF;
    out := chargeonce_pockets_set(out, i, amounts[k]);
  END LOOP;
  RETURN out;
END $$;

ALTER TABLE chats DROP CONSTRAINT chats_pockets;
ALTER TABLE reservations DROP CONSTRAINT reservations_held;
ALTER TABLE ledger DROP CONSTRAINT ledger_changed,
  DROP CONSTRAINT ledger_charged, DROP CONSTRAINT ledger_pockets;

ALTER TABLE chats ALTER COLUMN pockets DROP DEFAULT,
  ALTER COLUMN pockets TYPE integer[] USING chargeonce_pockets(pockets),
  ALTER COLUMN pockets SET DEFAULT '{}';
ALTER TABLE reservations ALTER COLUMN held DROP DEFAULT,
  ALTER COLUMN held TYPE integer[] USING chargeonce_pockets(held),
  ALTER COLUMN held SET DEFAULT '{}',
  ALTER COLUMN held_units DROP DEFAULT,
  ALTER COLUMN held_units TYPE integer[]
    USING chargeonce_pockets(held_units),
  ALTER COLUMN held_units SET DEFAULT '{}';
ALTER TABLE ended_reservations ALTER COLUMN held DROP DEFAULT,
  ALTER COLUMN held TYPE integer[] USING chargeonce_pockets(held),
  ALTER COLUMN held SET DEFAULT '{}',
  ALTER COLUMN held_units DROP DEFAULT,
  ALTER COLUMN held_units TYPE integer[]
    USING chargeonce_pockets(held_units),
  ALTER COLUMN held_units SET DEFAULT '{}';
ALTER TABLE uncertain_reservations
  ALTER COLUMN held TYPE integer[] USING chargeonce_pockets(held),
  ALTER COLUMN held_units TYPE integer[]
    USING chargeonce_pockets(held_units),
  ALTER COLUMN charged TYPE integer[] USING chargeonce_pockets(charged),
  ALTER COLUMN released TYPE integer[]
    USING chargeonce_pockets(released);
ALTER TABLE ledger ALTER COLUMN charged DROP DEFAULT,
  ALTER COLUMN charged TYPE integer[] USING chargeonce_pockets(charged),
  ALTER COLUMN charged SET DEFAULT '{}',
  ALTER COLUMN released DROP DEFAULT,
  ALTER COLUMN released TYPE integer[]
    USING chargeonce_pockets(released),
  ALTER COLUMN released SET DEFAULT '{}',
  ALTER COLUMN changed DROP DEFAULT,
  ALTER COLUMN changed TYPE integer[] USING chargeonce_pockets(changed),
  ALTER COLUMN changed SET DEFAULT '{}',
  ALTER COLUMN pockets TYPE integer[] USING chargeonce_pockets(pockets);

-- One dimension from 1 (array_ndims and array_lower are NULL for an empty
-- array, which passes); a chat's pockets never below zero (the clamp).
-- Built-in functions only: a CHECK's expression is prepared again for every
-- statement, and an SQL function in it is parsed and planned again each
-- time: chargeonce_commit's ledger insert took 86 us with three of them,
-- 66 us without (pg_stat_statements, one connection).
ALTER TABLE chats ADD CONSTRAINT chats_pockets
  CHECK (array_ndims(pockets) = 1 AND array_lower(pockets, 1) = 1
         AND 0 <= ALL (pockets));
ALTER TABLE reservations ADD CONSTRAINT reservations_held
  CHECK (array_ndims(held) = 1 AND array_lower(held, 1) = 1
         AND array_ndims(held_units) = 1 AND array_lower(held_units, 1) = 1);
ALTER TABLE ledger ADD CONSTRAINT ledger_charged
    CHECK (array_ndims(charged) = 1 AND array_lower(charged, 1) = 1),
  ADD CONSTRAINT ledger_changed
    CHECK (array_ndims(changed) = 1 AND array_lower(changed, 1) = 1),
  ADD CONSTRAINT ledger_pockets
    CHECK (array_ndims(pockets) = 1 AND array_lower(pockets, 1) = 1);

ALTER TYPE chargeonce_outcome
  ALTER ATTRIBUTE r_held TYPE integer[],
  ALTER ATTRIBUTE c_charged TYPE integer[],
  ALTER ATTRIBUTE s_pockets TYPE integer[],
  ALTER ATTRIBUTE r_held_units TYPE integer[],
  ALTER ATTRIBUTE c_released TYPE integer[];
ALTER TYPE chargeonce_resolution
  ALTER ATTRIBUTE charged TYPE integer[],
  ALTER ATTRIBUTE released TYPE integer[];

-- -- pocket arithmetic --------------------------------------------------------
-- The jsonb forms go; each array form keeps its name and meaning.

DROP FUNCTION chargeonce_apply_batch(text[], bigint[], bigint[], text[],
                                     text[], integer[], bigint, integer,
                                     integer, jsonb);
DROP FUNCTION chargeonce_receipt_at(integer, bigint, text, jsonb,
                                    timestamptz, integer, jsonb);
DROP AGGREGATE chargeonce_pockets_sum(jsonb);
DROP FUNCTION chargeonce_pockets_add(jsonb, jsonb);
DROP FUNCTION chargeonce_pockets_take(jsonb, jsonb);
DROP FUNCTION chargeonce_pockets_charged(jsonb, jsonb);
DROP FUNCTION chargeonce_pockets_less(jsonb, jsonb);
DROP FUNCTION chargeonce_pockets_change(jsonb, jsonb);
DROP FUNCTION chargeonce_captured(jsonb, jsonb, integer, integer);
DROP FUNCTION chargeonce_choose(jsonb, boolean, jsonb, jsonb, integer);
DROP FUNCTION chargeonce_amount(jsonb, text);

-- The amount of the pocket `pocket` in `p`, and the pockets of `p` as
-- names: for SQL written by hand (the functions here index by ordinal).
CREATE FUNCTION chargeonce_amount(p integer[], pocket text) RETURNS integer
  LANGUAGE sql STABLE AS $$
  SELECT coalesce(p[chargeonce_pocket(pocket)], 0)
$$;

CREATE FUNCTION chargeonce_pockets_json(p integer[]) RETURNS jsonb
  LANGUAGE sql STABLE AS $$
  SELECT coalesce(jsonb_object_agg(c.pocket, e.amount), '{}')
    FROM unnest(p) WITH ORDINALITY AS e(amount, i)
    JOIN catalog_pockets c ON c.ordinal = e.i
   WHERE e.amount IS NOT NULL
$$;

-- `a` with the pockets `names` lists set to its amounts, the others as
-- they are (what jsonb's || did): for SQL written by hand.
CREATE FUNCTION chargeonce_pockets_with(a integer[], names jsonb)
  RETURNS integer[] LANGUAGE plpgsql STABLE AS $$
DECLARE
  b integer[] := chargeonce_pockets(names);
BEGIN
  a := coalesce(a, '{}');
  FOR i IN 1 .. coalesce(cardinality(b), 0) LOOP
    IF b[i] IS NOT NULL THEN
      a := chargeonce_pockets_set(a, i, b[i]);
    END IF;
  END LOOP;
  RETURN a;
END $$;

CREATE FUNCTION chargeonce_pockets_add(a integer[], b integer[])
  RETURNS integer[] LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  a := coalesce(a, '{}');
  FOR i IN 1 .. coalesce(cardinality(b), 0) LOOP
    IF b[i] IS NOT NULL THEN
      a := chargeonce_pockets_set(a, i, coalesce(a[i], 0) + b[i]);
    END IF;
  END LOOP;
  RETURN a;
END $$;

CREATE AGGREGATE chargeonce_pockets_sum(integer[]) (
  SFUNC = chargeonce_pockets_add, STYPE = integer[], INITCOND = '{}'
);

-- `amounts` less each amount of `held`, stopping at zero.
CREATE FUNCTION chargeonce_pockets_take(amounts integer[], held integer[])
  RETURNS integer[] LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  amounts := coalesce(amounts, '{}');
  FOR i IN 1 .. coalesce(cardinality(held), 0) LOOP
    IF held[i] IS NOT NULL THEN
      amounts := chargeonce_pockets_set(amounts, i,
                   GREATEST(0, coalesce(amounts[i], 0) - held[i]));
    END IF;
  END LOOP;
  RETURN amounts;
END $$;

-- What taking `held` from `amounts` takes: each amount of `held`, at most
-- what its pocket has.
CREATE FUNCTION chargeonce_pockets_charged(held integer[], amounts integer[])
  RETURNS integer[] LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  out integer[] := '{}';
BEGIN
  FOR i IN 1 .. coalesce(cardinality(held), 0) LOOP
    IF held[i] IS NOT NULL THEN
      out := chargeonce_pockets_set(out, i,
                                    LEAST(held[i], coalesce(amounts[i], 0)));
    END IF;
  END LOOP;
  RETURN out;
END $$;

-- `a` less `b`, per pocket of `a`, the pockets left at zero unlisted.
CREATE FUNCTION chargeonce_pockets_less(a integer[], b integer[])
  RETURNS integer[] LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  out integer[] := '{}';
BEGIN
  FOR i IN 1 .. coalesce(cardinality(a), 0) LOOP
    IF a[i] IS NOT NULL AND a[i] - coalesce(b[i], 0) <> 0 THEN
      out := chargeonce_pockets_set(out, i, a[i] - coalesce(b[i], 0));
    END IF;
  END LOOP;
  RETURN out;
END $$;

-- What changed from `before` to `after`, per pocket, the unchanged
-- unlisted (the ledger's `changed`).
CREATE FUNCTION chargeonce_pockets_change(before integer[], after integer[])
  RETURNS integer[] LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  out integer[] := '{}';
BEGIN
  FOR i IN 1 .. coalesce(GREATEST(cardinality(before), cardinality(after)),
                         0) LOOP
    IF coalesce(after[i], 0) <> coalesce(before[i], 0) THEN
      out := chargeonce_pockets_set(out, i,
               coalesce(after[i], 0) - coalesce(before[i], 0));
    END IF;
  END LOOP;
  RETURN out;
END $$;

-- The part of a hold that a commit of `units` of its `held_total` units
-- charges: the units from the pockets that expire first (every daily
-- pocket, by name, before balance), at the hold's own price per pocket.
CREATE FUNCTION chargeonce_captured(held integer[], held_units integer[],
                                    held_total integer, units integer)
  RETURNS integer[] LANGUAGE plpgsql STABLE AS $$
DECLARE
  i integer;
  n integer;
  take integer;
  left_units integer := units;
  out integer[] := '{}';
BEGIN
  IF coalesce(units, 0) <= 0 OR units >= held_total THEN
    RETURN held;
  END IF;
  FOR i, n IN
    SELECT u.i, u.n
      FROM unnest(held_units) WITH ORDINALITY AS u(n, i)
      JOIN catalog_pockets c ON c.ordinal = u.i
     WHERE u.n IS NOT NULL
     ORDER BY c.pocket = 'balance', c.pocket COLLATE "C"
  LOOP
    take := LEAST(left_units, n);
    IF n > 0 AND take > 0 THEN
      out := chargeonce_pockets_set(out, i,
                                    coalesce(held[i], 0) / n * take);
    END IF;
    left_units := left_units - take;
  END LOOP;
  RETURN out;
END $$;

-- What reserve holds, per pocket: the amounts and the units each pays.
CREATE TYPE chargeonce_choice AS (held integer[], held_units integer[]);

-- The hold for `units` units of the kind `spec` describes (its pay list
-- [[ordinal, price], ...] in order), from what `amounts` has left after
-- `held`; NULL when the chat cannot pay.
CREATE FUNCTION chargeonce_choose(spec jsonb, premium boolean,
                                  amounts integer[], held integer[],
                                  units integer)
  RETURNS chargeonce_choice LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  pay jsonb := spec -> 'pay';
  p integer;
  price integer;
  take integer;
  left_units integer := GREATEST(units, 1);
  h integer[] := '{}';
  u integer[] := '{}';
BEGIN
  IF premium AND (spec ->> 'free')::boolean THEN
    RETURN ROW('{}', '{}')::chargeonce_choice;
  END IF;
  FOR i IN 0 .. jsonb_array_length(pay) - 1 LOOP
    EXIT WHEN left_units = 0;
    p := (pay -> i ->> 0)::integer;
    price := (pay -> i ->> 1)::integer;
    take := LEAST(left_units, GREATEST(0, coalesce(amounts[p], 0)
                                          - coalesce(held[p], 0)) / price);
    IF take > 0 THEN
      h := chargeonce_pockets_set(h, p, take * price);
      u := chargeonce_pockets_set(u, p, take);
      left_units := left_units - take;
    END IF;
  END LOOP;
  IF left_units > 0 THEN
    RETURN NULL;
  END IF;
  RETURN ROW(h, u)::chargeonce_choice;
END $$;

CREATE FUNCTION chargeonce_receipt_at(i integer, chat bigint, k text,
                                      charged integer[], at timestamptz,
                                      units integer, released integer[],
                                      paid_by bigint)
  RETURNS chargeonce_outcome LANGUAGE sql STABLE AS $$
  SELECT ROW(i, 'ok', NULL,
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             chat, k, charged, chargeonce_us(at),
             NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
             NULL, NULL, NULL, units, released, NULL,
             paid_by)::chargeonce_outcome
$$;

-- The part of `x` (a hold, or what a commit of it takes) that falls on
-- the chat's pockets in window `now_window`, for a job reserved in window
-- `taken_in`: all of it in the same window; after a refill only its
-- balance part (ordinal 3, fixed above), since the daily unit of its own
-- window paid for the rest. Plain SQL: inlined where it is used.
CREATE FUNCTION chargeonce_in_window(x integer[], taken_in bigint,
                                     now_window bigint)
  RETURNS integer[] LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN taken_in = now_window THEN x
              WHEN cardinality(x) >= 3 THEN ARRAY[NULL, NULL, x[3]]::integer[]
              ELSE '{}'::integer[] END
$$;

-- What a commit (or a succeeded resolve) of `nominal`, the captured part
-- of a hold taken in window `taken_in`, charges when the chat is in
-- window `now_window` and its pockets are `amounts`: the part on the
-- current pockets, each stopping at what its pocket has (the clamp), and
-- the daily part of a past window whole (that window's unit paid it). The
-- common case, a hold of this window, costs one helper, as before windows.
CREATE FUNCTION chargeonce_charged_in(nominal integer[], taken_in bigint,
                                      now_window bigint, amounts integer[])
  RETURNS integer[] LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN taken_in = now_window
              THEN chargeonce_pockets_charged(nominal, amounts)
              ELSE chargeonce_pockets_add(
                     chargeonce_pockets_charged(
                       chargeonce_in_window(nominal, taken_in, now_window),
                       amounts),
                     chargeonce_pockets_less(nominal,
                       chargeonce_in_window(nominal, taken_in, now_window)))
         END
$$;

-- -- the per-operation functions whose bodies held jsonb ---------------------

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
  v_units integer := coalesce(nullif(p_units, 0), 1);
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
         window_number
    INTO c FROM chats WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('not_found', 'unknown chat ' || p_chat);
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
  INSERT INTO reservations (chat_id, kind, queue, held, request_id, slot,
                            units, held_units, window_number)
    VALUES (p_chat, p_kind, chargeonce_queue(spec, c.premium),
            choice.held, p_request_id, free_slot, v_units, choice.held_units,
            c.window_number)
    ON CONFLICT (chat_id, slot) DO NOTHING
    RETURNING * INTO r;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('busy',
      chargeonce_busy_message(p_chat, a.n + 1, job_limit));
  END IF;
  RETURN chargeonce_with_reservation(r);
END $$;

CREATE OR REPLACE FUNCTION chargeonce_commit(p_chat bigint, p_id bigint,
                                             p_units integer)
  RETURNS chargeonce_outcome LANGUAGE plpgsql AS $$
DECLARE
  c record;
  r reservations;
  l record;
  o chargeonce_outcome;
  nominal integer[];
  after integer[];
BEGIN
  SELECT pockets, window_number INTO c FROM chats
   WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_refusal('not_found', 'unknown chat ' || p_chat);
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
    UPDATE chats SET pockets = chargeonce_pockets_take(pockets,
                       chargeonce_in_window(nominal, r.window_number,
                                            c.window_number))
      WHERE chat_id = p_chat RETURNING pockets INTO after;
    INSERT INTO ledger (reservation_id, chat_id, kind, charged, units,
                        released, pockets, changed, window_number)
      VALUES (p_id, p_chat, r.kind,
              chargeonce_charged_in(nominal, r.window_number,
                                    c.window_number, c.pockets),
              coalesce(nullif(p_units, 0), r.units),
              chargeonce_pockets_less(r.held, nominal), after,
              chargeonce_pockets_change(c.pockets, after), r.window_number)
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

CREATE OR REPLACE FUNCTION chargeonce_resolve(p_chat bigint, p_id bigint,
                                              p_outcome text, p_units integer)
  RETURNS chargeonce_resolution LANGUAGE plpgsql AS $$
DECLARE
  c record;
  u uncertain_reservations;
  o chargeonce_outcome;
  nominal integer[];
  after integer[];
BEGIN
  IF p_outcome NOT IN ('succeeded', 'failed') THEN
    RETURN chargeonce_resolution_refusal('invalid_argument',
      'outcome must be succeeded or failed, not ' || p_outcome);
  END IF;
  SELECT pockets, window_number INTO c FROM chats
   WHERE chat_id = p_chat FOR UPDATE;
  IF NOT FOUND THEN
    RETURN chargeonce_resolution_refusal('not_found', 'unknown chat ' || p_chat);
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
  UPDATE chats SET pockets = chargeonce_pockets_take(pockets,
                     chargeonce_in_window(nominal, u.window_number,
                                          c.window_number))
   WHERE chat_id = p_chat RETURNING pockets INTO after;
  INSERT INTO ledger (reservation_id, chat_id, kind, charged, units, released,
                      pockets, changed, window_number)
    VALUES (p_id, p_chat, u.kind,
            chargeonce_charged_in(nominal, u.window_number, c.window_number,
                                  c.pockets),
            coalesce(nullif(p_units, 0), u.units),
            chargeonce_pockets_less(u.held, nominal), after,
            chargeonce_pockets_change(c.pockets, after), u.window_number);
  UPDATE uncertain_reservations
     SET outcome = 'succeeded', resolved_at = now(),
         charged = chargeonce_charged_in(nominal, u.window_number,
                                         c.window_number, c.pockets),
         released = chargeonce_pockets_less(u.held, nominal),
         units_charged = coalesce(nullif(p_units, 0), u.units)
   WHERE id = p_id RETURNING * INTO u;
  PERFORM chargeonce_remember_uncertain_end(u, 'committed');
  RETURN chargeonce_resolution_of(u);
END $$;

-- -- the batch ---------------------------------------------------------------
-- As in 011_single_operation_batches.sql, with two changes beside the
-- arrays. Each operation carries its kind's first two ways to pay
-- (b_pay1/b_price1, b_pay2/b_price2: ordinal and price, 0 where the kind
-- has fewer), so that the set-based reserve decides with element reads
-- instead of walking the catalog's jsonb. And the set-based statements
-- take only the common case: a reserve of one unit that one of those two
-- pockets pays (or a premium-free kind for a premium chat), a commit of
-- a whole hold on one pocket (or on none). Every other operation (several
-- units, a third way to pay, a partial commit, a hold on several pockets,
-- every refusal) goes through chargeonce_apply_one after them, which
-- decides it in full.

CREATE FUNCTION chargeonce_apply_batch(
  b_ops text[], b_chats bigint[], b_ids bigint[], b_kinds text[],
  b_request_ids text[], b_units integer[], b_pay1 integer[],
  b_price1 integer[], b_pay2 integer[], b_price2 integer[], lease_ms bigint,
  free_max integer, premium_max integer, products jsonb)
  RETURNS SETOF chargeonce_outcome LANGUAGE plpgsql
  SET enable_seqscan = off SET enable_mergejoin = off SET enable_hashjoin = off
  SET plan_cache_mode = force_generic_plan
  SET chargeonce.references_checked = 'on' AS $$
DECLARE
  v_lock_chats bigint[];
  v_reserve_chats bigint[];
  v_start_ids bigint[];
  v_commit_ids bigint[];
  distinct_chats bigint;
  answers chargeonce_outcome[] := '{}';
  part chargeonce_outcome[];
  answered integer[];
  x record;
  o chargeonce_outcome;
BEGIN
  IF cardinality(b_ops) IS NULL OR cardinality(b_ops) = 0 THEN
    RETURN;
  END IF;
  -- One operation (a lone client, a quiet moment): the per-operation
  -- function, whose plain statements start faster than the set-based
  -- ones below, which pay off only for several operations.
  IF cardinality(b_ops) = 1 THEN
    o := chargeonce_apply_one(b_ops[1], b_chats[1], b_ids[1], b_kinds[1],
                              b_request_ids[1], b_units[1], lease_ms,
                              free_max, premium_max, products);
    o.idx := 0;
    RETURN NEXT o;
    RETURN;
  END IF;
  SELECT array_agg(u.chat) FILTER (WHERE u.op IN ('reserve', 'commit')),
         array_agg(u.chat) FILTER (WHERE u.op = 'reserve'),
         array_agg(u.id) FILTER (WHERE u.op = 'start'),
         array_agg(u.id) FILTER (WHERE u.op = 'commit'),
         count(DISTINCT u.chat)
    INTO v_lock_chats, v_reserve_chats, v_start_ids, v_commit_ids,
         distinct_chats
    FROM unnest(b_ops, b_chats, b_ids) AS u(op, chat, id);
  -- Two operations of one chat: their order matters, one by one.
  IF distinct_chats < cardinality(b_ops) THEN
    FOR x IN
      SELECT u.* FROM unnest(b_ops, b_chats, b_ids, b_kinds, b_request_ids,
                             b_units)
                      WITH ORDINALITY
                      AS u(op, chat, id, k, request_id, units, n)
       ORDER BY u.n
    LOOP
      o := chargeonce_apply_one(x.op, x.chat, x.id, x.k, x.request_id,
                                x.units, lease_ms, free_max, premium_max,
                                products);
      o.idx := x.n - 1;
      RETURN NEXT o;
    END LOOP;
    RETURN;
  END IF;

  -- The chat rows that reserves and commits read and write, in chat order,
  -- before anything else: concurrent batches wait for each other here
  -- instead of deadlocking. (A start writes only its reservation row.)
  IF v_lock_chats IS NOT NULL THEN
    PERFORM 1 FROM chats WHERE chat_id = ANY (v_lock_chats)
      ORDER BY chat_id FOR UPDATE;
  END IF;

  -- Reserves of one unit that chargeonce_reserve would grant from the
  -- kind's first or second pocket (or for nothing: a premium-free kind, a
  -- premium chat): a kind of the catalog, a known chat, neither banned nor
  -- blocked, no job of the same request id, a request id where the limit
  -- is above 1, a free slot below the limit and the pocket's price left
  -- after the other active holds. One INSERT for all of them; the UNIQUE
  -- (chat_id, slot) index stays the arbiter. The others are answered one
  -- by one below.
  IF v_reserve_chats IS NOT NULL THEN
    WITH req AS (
      SELECT u.n, u.chat, u.k, u.request_id, products -> u.k AS spec,
             u.p1, u.c1, u.p2, u.c2
        FROM unnest(b_ops, b_chats, b_kinds, b_request_ids, b_units, b_pay1,
                    b_price1, b_pay2, b_price2)
             WITH ORDINALITY
             AS u(op, chat, k, request_id, units, p1, c1, p2, c2, n)
       WHERE u.op = 'reserve' AND coalesce(nullif(u.units, 0), 1) = 1),
    -- Materialized: each chat's decision is computed once, not once per
    -- place the planner would copy it to.
    seen AS MATERIALIZED (
      SELECT req.*, c.banned, c.blocked, c.premium,
             c.window_number AS chat_window,
             chargeonce_job_limit(c.max_active_jobs, c.premium, free_max,
                                  premium_max) AS job_limit,
             a.slots,
             CASE WHEN c.premium AND (req.spec ->> 'free')::boolean THEN 0
                  WHEN req.p1 > 0
                   AND coalesce(c.pockets[req.p1], 0) - a.held1 >= req.c1
                    THEN 1
                  WHEN req.p2 > 0
                   AND coalesce(c.pockets[req.p2], 0) - a.held2 >= req.c2
                    THEN 2 END AS choice,
             (chargeonce_find_request(req.chat, req.request_id)).r_id
               AS replay
        FROM req
        JOIN LATERAL (SELECT c.*,
                             coalesce(c.premium_until > now(), false)
                               AS premium
                        FROM chats c
                       WHERE c.chat_id = req.chat OFFSET 0) c ON true
        CROSS JOIN LATERAL (
          SELECT coalesce(sum(r.now_held[req.p1]), 0) AS held1,
                 coalesce(sum(r.now_held[req.p2]), 0) AS held2,
                 coalesce(array_agg(r.slot) FILTER (WHERE r.slot IS NOT NULL),
                          '{}') AS slots
            FROM (SELECT chargeonce_in_window(held, window_number,
                                              c.window_number) AS now_held,
                         slot
                    FROM reservations WHERE chat_id = req.chat
                  UNION ALL
                  SELECT chargeonce_in_window(held, window_number,
                                              c.window_number),
                         NULL
                    FROM uncertain_reservations
                   WHERE chat_id = req.chat AND outcome IS NULL) r) a
       WHERE req.spec IS NOT NULL),
    granted AS (
      SELECT seen.*,
             (SELECT min(s) FROM generate_series(0, job_limit - 1) AS s
               WHERE s <> ALL (slots) AND cardinality(slots) < job_limit)
               AS free_slot
        FROM seen
       WHERE replay IS NULL AND NOT banned AND NOT blocked
         AND (job_limit = 1
              OR (request_id <> '' AND request_id NOT LIKE 'auto:%'))
         AND choice IS NOT NULL),
    inserted AS (
      INSERT INTO reservations (chat_id, kind, queue, held, request_id, slot,
                                units, held_units, window_number)
      SELECT chat, k, chargeonce_queue(spec, premium),
             CASE choice WHEN 0 THEN '{}'
                         WHEN 1 THEN array_fill(NULL::integer, ARRAY[p1 - 1])
                                     || c1
                         ELSE array_fill(NULL::integer, ARRAY[p2 - 1]) || c2
             END,
             request_id, free_slot, 1,
             CASE choice WHEN 0 THEN '{}'
                         ELSE array_fill(NULL::integer,
                                         ARRAY[CASE choice WHEN 1 THEN p1
                                                           ELSE p2 END - 1])
                              || 1
             END,
             chat_window
        FROM granted WHERE free_slot IS NOT NULL ORDER BY chat
      ON CONFLICT (chat_id, slot) DO NOTHING
      RETURNING *)
    SELECT array_agg(chargeonce_reservation_at(g.n::integer - 1,
                                               ROW(i.*)::reservations))
      INTO part
      FROM granted g JOIN inserted i ON i.chat_id = g.chat;
    answers := answers || coalesce(part, '{}');
  END IF;

  -- Starts of queued reservations in one UPDATE, each recording the worker
  -- it names (b_request_ids carries a worker's identity); the rest (a
  -- retried start, a refusal) go through chargeonce_apply_one below.
  IF v_start_ids IS NOT NULL THEN
    WITH s AS (
      SELECT u.n, u.chat, u.id, coalesce(u.worker, '') AS worker
        FROM unnest(b_ops, b_chats, b_ids, b_request_ids) WITH ORDINALITY
             AS u(op, chat, id, worker, n)
       WHERE u.op = 'start'),
    started AS (
      UPDATE reservations r SET status = 'in_progress', started_at = now(),
                                worker = s.worker
        FROM s
       WHERE r.id = ANY (v_start_ids) AND r.id = s.id AND r.chat_id = s.chat
         AND r.status = 'queued'
      RETURNING s.n, r)
    SELECT array_agg(chargeonce_reservation_at(n::integer - 1, r))
      INTO part FROM started;
    answers := answers || coalesce(part, '{}');
  END IF;

  -- Commits of the whole hold of a started reservation that holds on one
  -- pocket (its last pocket pays all its units) or on none: the held amount,
  -- clamped at zero, one ledger row each with the pockets after it (its
  -- unique reservation_id stays the guard), the reservation deleted and,
  -- with a request id, remembered as committed. A repeated commit (the
  -- ledger answers), a partial one, a hold on several pockets or a refusal
  -- goes through chargeonce_commit below.
  IF v_commit_ids IS NOT NULL THEN
    WITH cm AS (
      SELECT u.n, u.chat, u.id, coalesce(u.units, 0) AS units,
             coalesce(u.worker, '') AS worker
        FROM unnest(b_ops, b_chats, b_ids, b_units, b_request_ids)
             WITH ORDINALITY AS u(op, chat, id, units, worker, n)
       WHERE u.op = 'commit'),
    taken AS (
      DELETE FROM reservations r USING cm
       WHERE r.id = ANY (v_commit_ids) AND r.id = cm.id AND r.chat_id = cm.chat
         AND r.status = 'in_progress' AND cm.units IN (0, r.units)
         AND (cm.worker = '' OR cm.worker = r.worker)
         AND (cardinality(r.held) = 0
              OR r.held_units[cardinality(r.held_units)] = r.units)
      RETURNING cm.n, r.id, r.chat_id, r.kind, r.held, r.queue, r.request_id,
                r.slot, r.created_at, r.lease_expires_at, r.units,
                r.held_units, r.window_number, cardinality(r.held) AS p),
    -- A hold on a daily pocket of a past window (its pocket is not in
    -- the hold's part in this window) is charged whole and takes
    -- nothing: its own window's unit paid.
    window_part AS (
      SELECT t.*, c.ctid AS chat_row, c.pockets AS pockets_before,
             t.p > 0 AND (chargeonce_in_window(t.held, t.window_number,
                                               c.window_number))[t.p]
                         IS NULL AS past
        FROM taken t
        JOIN LATERAL (SELECT ctid, * FROM chats c
                       WHERE c.chat_id = t.chat_id OFFSET 0) c ON true),
    before AS (
      SELECT w.*,
             CASE WHEN w.p = 0 THEN '{}'::integer[]
                  WHEN w.past THEN array_fill(NULL::integer, ARRAY[w.p - 1])
                                   || w.held[w.p]
                  ELSE array_fill(NULL::integer, ARRAY[w.p - 1])
                       || LEAST(w.held[w.p], coalesce(w.pockets_before[w.p], 0))
             END AS charged,
             CASE WHEN w.p = 0 OR w.past THEN w.pockets_before
                  ELSE chargeonce_pockets_set(w.pockets_before, w.p,
                         GREATEST(0, coalesce(w.pockets_before[w.p], 0)
                                     - w.held[w.p]))
             END AS after
        FROM window_part w),
    paid AS (
      UPDATE chats c SET pockets = bf.after
        FROM before bf
       WHERE c.ctid = bf.chat_row),
    booked AS (
      INSERT INTO ledger (reservation_id, chat_id, kind, charged, units,
                          released, pockets, changed, window_number)
      SELECT id, chat_id, kind, charged, units, '{}', after,
             CASE WHEN coalesce(after[p], 0)
                       = coalesce(pockets_before[p], 0) THEN '{}'::integer[]
                  ELSE array_fill(NULL::integer, ARRAY[p - 1])
                       || coalesce(after[p], 0)
                          - coalesce(pockets_before[p], 0) END,
             window_number
        FROM before ORDER BY chat_id),
    remembered AS (
      INSERT INTO ended_reservations (id, chat_id, kind, status, queue, held,
                                      request_id, slot, created_at,
                                      lease_expires_at, units, held_units,
                                      window_number)
      SELECT id, chat_id, kind, 'committed', queue, held, request_id, slot,
             created_at, lease_expires_at, units, held_units, window_number
        FROM taken WHERE request_id <> '')
    -- The receipts from what was inserted, not from its RETURNING: the
    -- ledger's committed_at defaults to now(), the transaction's time.
    SELECT array_agg(chargeonce_receipt_at(bf.n::integer - 1, bf.chat_id,
                       bf.kind, bf.charged, now(), bf.units, '{}',
                       bf.window_number))
      INTO part
      FROM before bf;
    answers := answers || coalesce(part, '{}');
  END IF;

  RETURN QUERY SELECT * FROM unnest(answers);
  IF cardinality(answers) = cardinality(b_ops) THEN
    RETURN;
  END IF;

  -- Everything else, one by one in batch order (the caller sorted it by
  -- chat).
  answered := ARRAY(SELECT a.idx + 1 FROM unnest(answers) AS a);
  FOR x IN
    SELECT u.*
      FROM unnest(b_ops, b_chats, b_ids, b_kinds, b_request_ids, b_units)
           WITH ORDINALITY AS u(op, chat, id, k, request_id, units, n)
     WHERE u.n <> ALL (answered)
     ORDER BY u.n
  LOOP
    o := chargeonce_apply_one(x.op, x.chat, x.id, x.k, x.request_id, x.units,
                              lease_ms, free_max, premium_max, products);
    o.idx := x.n - 1;
    RETURN NEXT o;
  END LOOP;
END $$;
