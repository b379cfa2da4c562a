-- SPDX-License-Identifier: Apache-2.0
-- Pockets: amounts by pocket ordinal (catalog_pockets), their arithmetic, the
-- window a hold belongs to, and the choice of pocket a reservation holds.
--
-- The live body of every function here: migrate() applies the function
-- files after the versioned migrations, in one transaction, when they
-- changed (persistence/migrations.hpp).

-- Pockets written with names, {"balance": 5}, as the array of their
-- ordinals, for SQL written by hand (support, tests). A name
-- catalog_pockets does not have is an error, not a pocket dropped.
CREATE OR REPLACE FUNCTION chargeonce_pocket(name text) RETURNS integer
  LANGUAGE sql STABLE AS $$
  SELECT ordinal FROM catalog_pockets WHERE pocket = name
$$;

-- `a` with pocket `i` set to `v`; a pocket between the end of `a` and `i`
-- stays unlisted. Here and in every pocket helper a NULL array is no
-- pockets, '{}' (without the coalesce, NULL with 3 set to 5 was {5}: the
-- amount landed in pocket 1).
CREATE OR REPLACE FUNCTION chargeonce_pockets_set(
  a integer[], i integer, v integer)
  RETURNS integer[] LANGUAGE sql IMMUTABLE AS $$
  SELECT (coalesce(a, '{}'::integer[]))[:i - 1]
         || array_fill(NULL::integer,
                       ARRAY[GREATEST(0, i - 1
                                         - cardinality(coalesce(a, '{}')))])
         || v || (coalesce(a, '{}'::integer[]))[i + 1:]
$$;

CREATE OR REPLACE FUNCTION chargeonce_pockets(p jsonb) RETURNS integer[]
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

CREATE OR REPLACE FUNCTION chargeonce_pockets_json(p integer[]) RETURNS jsonb
  LANGUAGE sql STABLE AS $$
  SELECT coalesce(jsonb_object_agg(c.pocket, e.amount), '{}')
    FROM unnest(p) WITH ORDINALITY AS e(amount, i)
    JOIN catalog_pockets c ON c.ordinal = e.i
   WHERE e.amount IS NOT NULL
$$;

CREATE OR REPLACE FUNCTION chargeonce_pockets_add(a integer[], b integer[])
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

CREATE OR REPLACE AGGREGATE chargeonce_pockets_sum(integer[]) (
  SFUNC = chargeonce_pockets_add, STYPE = integer[], INITCOND = '{}'
);

-- `amounts` less each amount of `held`, stopping at zero.
CREATE OR REPLACE FUNCTION chargeonce_pockets_take(
  amounts integer[], held integer[])
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

-- `a` less `b`, per pocket of `a`, the pockets left at zero unlisted.
CREATE OR REPLACE FUNCTION chargeonce_pockets_less(a integer[], b integer[])
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

-- What taking `held` from `amounts` takes: each amount of `held`, at most
-- what its pocket has.
CREATE OR REPLACE FUNCTION chargeonce_pockets_charged(
  held integer[], amounts integer[])
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

-- `a` with the pockets `names` lists set to its amounts, the others as
-- they are (what jsonb's || did): for SQL written by hand.
CREATE OR REPLACE FUNCTION chargeonce_pockets_with(a integer[], names jsonb)
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

-- What changed from `before` to `after`, per pocket, the unchanged
-- unlisted (the ledger's `changed`).
CREATE OR REPLACE FUNCTION chargeonce_pockets_change(
  before integer[], after integer[])
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

-- The part of `x` (a hold, or what a commit of it takes) that falls on
-- the chat's pockets in window `now_window`, for a job reserved in window
-- `taken_in`: all of it in the same window; after a refill only its
-- balance part (ordinal 3, as catalog_pockets fixes it), since the daily
-- unit of its own window paid for the rest. Plain SQL: inlined where it is
-- used.
CREATE OR REPLACE FUNCTION chargeonce_in_window(x integer[], taken_in bigint,
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
-- common case, a hold of this window, costs one helper.
CREATE OR REPLACE FUNCTION chargeonce_charged_in(
  nominal integer[], taken_in bigint, now_window bigint, amounts integer[])
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

-- The part of a hold that a commit of `units` of its `held_total` units
-- charges: the units from the pockets that expire first (every daily
-- pocket, by name, before balance), at the hold's own price per pocket.
CREATE OR REPLACE FUNCTION chargeonce_captured(
  held integer[], held_units integer[], held_total integer, units integer)
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

-- The amount of the pocket `pocket` in `p`, and the pockets of `p` as
-- names: for SQL written by hand (the functions here index by ordinal).
CREATE OR REPLACE FUNCTION chargeonce_amount(
  p integer[], pocket text) RETURNS integer
  LANGUAGE sql STABLE AS $$
  SELECT coalesce(p[chargeonce_pocket(pocket)], 0)
$$;

-- The hold for `units` units of the kind `spec` describes (its pay list
-- [[ordinal, price], ...] in order), from what `amounts` has left after
-- `held`; NULL when the chat cannot pay.
CREATE OR REPLACE FUNCTION chargeonce_choose(spec jsonb, premium boolean,
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
