#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Prints a variant of chargeonce_apply_batch (as migration 011 defines it)
for timing only: `base` is the function as shipped; the others change what
the set-based reserve and commit compute, most of them giving wrong answers.
Apply the output to a scratch cluster, never to one that holds real money.

  nochoose   reserve holds one credit of `balance` without choosing
  nomath     commit charges the hold as it is and leaves the pockets as
             they are (no per-pocket arithmetic)
  free       nochoose and nomath together
  arrays     the per-pocket work on integer arrays indexed by a pocket
             ordinal (1 daily_messages, 2 daily_images, 3 balance), the
             prototype of a representation: needs arrays.sql first; the
             jsonb columns are left empty, so the bench's audit fails
  arrays_jsonb_holds  arrays, but holds and charges still built as jsonb
  arrays_general  arrays as a real version would be: the kind's first two
             (ordinal, price) pairs arrive per operation (here arrays
             filled once per batch), prices are not assumed to be 1, and
             the general paths (several units, premium-free kinds, longer
             pay lists, holds on several pockets) are in the statements
             (arrays.sql's experiment_*_general, which refuse to run)
  arrays_lean  arrays_general without the general paths in the set-based
             statements: what they do not cover is left to the one-by-one
             path after them, as refusals already are
  Cheaper jsonb forms (right answers):
  case_choose   reserve chooses among the kind's first two pockets in a
                CASE, chargeonce_choose only for the rest
  pocket_by_catalog, pocket_by_text  commit finds the hold's one pocket in
                the DELETE's RETURNING (by `?` on the kind's first two
                pockets, or from the hold's text) and builds the charge
                and the pockets after it with jsonb_build_object and ||
  skipfind      no request-id lookup for a reserve without a request id
  Halves of nomath (wrong answers):
  charge_only   commit computes the charge, leaves the pockets as they are
  after_only    commit charges the hold as it is, computes the pockets

Usage: variants.py NAME[+NAME...] > variant.sql
"""
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
MIGRATION = ROOT / "tests/persistence/fixtures/migrations_0.2_chain/011_single_operation_batches.sql"
START = "CREATE OR REPLACE FUNCTION chargeonce_apply_batch("

CHOOSE = """chargeonce_choose(req.spec, c.premium, c.pockets, a.held,
                               req.units)"""
COMMIT_MATH = """        CROSS JOIN LATERAL (
          SELECT coalesce(jsonb_object_agg(e.key,
                   LEAST(e.value::integer, chargeonce_amount(c.pockets, e.key))),
                   '{}') AS charged,
                 c.pockets || coalesce(jsonb_object_agg(e.key,
                   GREATEST(0, chargeonce_amount(c.pockets, e.key)
                               - e.value::integer)), '{}') AS after
            FROM jsonb_each_text(p.nominal) AS e) m),"""

NOCHOOSE = [(CHOOSE,
             """'{"held": {"balance": 1}, "units": {"balance": 1}}'::jsonb""")]
NOMATH = [(COMMIT_MATH, """        CROSS JOIN LATERAL (
          SELECT p.nominal AS charged, c.pockets AS after) m),""")]

# What every arrays variant changes alike in commit: the hold's ordinal and
# amounts come out of the DELETE, the charge's amounts out of `before`, and
# the chat's pockets are written as an array.
ARRAY_COMMIT = [
    ("""                r.held_units, cm.units AS units_named),""",
     """                r.held_units, cm.units AS units_named, r.hp, r.hv),"""),
    ("""      SELECT t.*, c.ctid AS chat_row, m.charged, m.after,""",
     """      SELECT t.*, c.ctid AS chat_row, m.charged, m.after, m.cv,"""),
    ("""      UPDATE chats c SET pockets = bf.after""",
     """      UPDATE chats c SET pv = bf.after"""),
]
COMMIT_FILTER = """         AND r.status = 'in_progress' AND cm.units BETWEEN 0 AND r.units"""
LEDGER_INSERT = """      INSERT INTO ledger (reservation_id, chat_id, kind, charged, units,
                          released, pockets)
      SELECT id, chat_id, kind, charged, units_charged, released, after"""

# Ordinals and prices are the built-in image's (daily_images, then balance,
# one each): a real version would pass them per operation.
ARRAYS = [
    ("""          SELECT chargeonce_pockets_sum(r.held) AS held,""",
     """          SELECT coalesce(sum(r.hv[2]), 0) AS held2,
                 coalesce(sum(r.hv[3]), 0) AS held3,"""),
    ("""            FROM (SELECT held, slot FROM reservations
                   WHERE chat_id = req.chat
                  UNION ALL
                  SELECT held, NULL FROM uncertain_reservations""",
     """            FROM (SELECT hv, slot FROM reservations
                   WHERE chat_id = req.chat
                  UNION ALL
                  SELECT NULL::integer[], NULL FROM uncertain_reservations"""),
    (CHOOSE, """CASE WHEN c.pv[2] - a.held2 >= 1 THEN 2
                  WHEN c.pv[3] - a.held3 >= 1 THEN 3 END"""),
    ("""      INSERT INTO reservations (chat_id, kind, queue, held, request_id, slot,
                                units, held_units)
      SELECT chat, k, chargeonce_queue(spec, premium), choice -> 'held',
             request_id, free_slot, units, choice -> 'units'""",
     """      INSERT INTO reservations (chat_id, kind, queue, held, request_id, slot,
                                units, held_units, hp, hv)
      SELECT chat, k, chargeonce_queue(spec, premium), '{}',
             request_id, free_slot, units, '{}', choice::smallint,
             array_fill(0, ARRAY[choice::integer - 1]) || 1"""),
    # Holds made by chargeonce_apply_one (batches of one) have no ordinal:
    # they are committed one by one, through the jsonb path.
    (COMMIT_FILTER,
     """         AND r.status = 'in_progress' AND cm.units BETWEEN 0 AND r.units
         AND r.hp IS NOT NULL"""),
    (COMMIT_MATH, """        CROSS JOIN LATERAL (
          SELECT '{}'::jsonb AS charged, LEAST(t.hv[t.hp], c.pv[t.hp]) AS cv,
                 c.pv[:t.hp - 1] || GREATEST(0, c.pv[t.hp] - t.hv[t.hp])
                   || c.pv[t.hp + 1:] AS after) m),"""),
    (LEDGER_INSERT,
     """      INSERT INTO ledger (reservation_id, chat_id, kind, charged, units,
                          released, pockets, cv, av)
      SELECT id, chat_id, kind, charged, units_charged, released, NULL,
             array_fill(0, ARRAY[hp - 1]) || cv, after"""),
] + ARRAY_COMMIT

# As `arrays`, but holds and charges stay jsonb, built per row (only the
# chat's pockets and the ledger's pockets after a charge are arrays).
NAME = "(CASE {0} WHEN 2 THEN 'daily_images' WHEN 3 THEN 'balance' END)"
HOLDS_JSONB = [
    ("""      SELECT chat, k, chargeonce_queue(spec, premium), '{}',
             request_id, free_slot, units, '{}', choice::smallint,""",
     """      SELECT chat, k, chargeonce_queue(spec, premium),
             jsonb_build_object(""" + NAME.format("choice") + """, 1),
             request_id, free_slot, units,
             jsonb_build_object(""" + NAME.format("choice") + """, 1),
             choice::smallint,"""),
    ("""          SELECT '{}'::jsonb AS charged,""",
     """          SELECT jsonb_build_object(""" + NAME.format("t.hp") + """,
                   LEAST(t.hv[t.hp], c.pv[t.hp])) AS charged,"""),
]

# ARRAYS with what a real version needs around it.
ARRAYS_GENERAL = [
    ("""  v_lock_chats bigint[];""",
     """  v_lock_chats bigint[];
  b_p0 integer[] := array_fill(2, ARRAY[cardinality(b_ops)]);
  b_c0 integer[] := array_fill(1, ARRAY[cardinality(b_ops)]);
  b_p1 integer[] := array_fill(3, ARRAY[cardinality(b_ops)]);
  b_c1 integer[] := array_fill(1, ARRAY[cardinality(b_ops)]);
  b_more boolean[] := array_fill(false, ARRAY[cardinality(b_ops)]);"""),
    ("""      SELECT u.n, u.chat, u.k, u.request_id, products -> u.k AS spec,
             coalesce(nullif(u.units, 0), 1) AS units
        FROM unnest(b_ops, b_chats, b_kinds, b_request_ids, b_units)
             WITH ORDINALITY AS u(op, chat, k, request_id, units, n)""",
     """      SELECT u.n, u.chat, u.k, u.request_id, products -> u.k AS spec,
             coalesce(nullif(u.units, 0), 1) AS units, u.p0, u.c0, u.p1,
             u.c1, u.more
        FROM unnest(b_ops, b_chats, b_kinds, b_request_ids, b_units, b_p0,
                    b_c0, b_p1, b_c1, b_more)
             WITH ORDINALITY
             AS u(op, chat, k, request_id, units, p0, c0, p1, c1, more, n)"""),
    ("""          SELECT chargeonce_pockets_sum(r.held) AS held,""",
     """          SELECT coalesce(sum(r.hv[req.p0]), 0) AS held0,
                 coalesce(sum(r.hv[req.p1]), 0) AS held1,"""),
    ("""            FROM (SELECT held, slot FROM reservations
                   WHERE chat_id = req.chat
                  UNION ALL
                  SELECT held, NULL FROM uncertain_reservations""",
     """            FROM (SELECT hv, slot FROM reservations
                   WHERE chat_id = req.chat
                  UNION ALL
                  SELECT hv, NULL FROM uncertain_reservations"""),
    (CHOOSE, """CASE
               WHEN c.premium AND (req.spec ->> 'free')::boolean
                 OR req.units <> 1 OR req.more THEN
                 experiment_choose_general(req.spec, c.premium, c.pv,
                                           req.chat, req.units)
               WHEN c.pv[req.p0] - a.held0 >= req.c0 THEN 0
               WHEN c.pv[req.p1] - a.held1 >= req.c1 THEN 1 END"""),
    ("""      INSERT INTO reservations (chat_id, kind, queue, held, request_id, slot,
                                units, held_units)
      SELECT chat, k, chargeonce_queue(spec, premium), choice -> 'held',
             request_id, free_slot, units, choice -> 'units'""",
     """      INSERT INTO reservations (chat_id, kind, queue, held, request_id, slot,
                                units, held_units, hp, hv)
      SELECT chat, k, chargeonce_queue(spec, premium), '{}',
             request_id, free_slot, units, '{}',
             CASE choice WHEN 0 THEN p0 ELSE p1 END,
             CASE choice WHEN 0 THEN array_fill(0, ARRAY[p0 - 1]) || c0
                         ELSE array_fill(0, ARRAY[p1 - 1]) || c1 END"""),
    # As in ARRAYS: holds made by chargeonce_apply_one have no ordinal.
    (COMMIT_FILTER,
     """         AND r.status = 'in_progress' AND cm.units BETWEEN 0 AND r.units
         AND r.hv IS NOT NULL"""),
    (COMMIT_MATH, """        CROSS JOIN LATERAL (
          SELECT '{}'::jsonb AS charged,
                 CASE WHEN t.hp IS NOT NULL AND NOT p.partial THEN
                   array_fill(0, ARRAY[t.hp - 1])
                     || LEAST(t.hv[t.hp], c.pv[t.hp])
                 ELSE experiment_charge_general(c.pv, t.hv, t.units,
                                                t.units_named) END AS cv,
                 CASE WHEN t.hp IS NOT NULL AND NOT p.partial THEN
                   c.pv[:t.hp - 1] || GREATEST(0, c.pv[t.hp] - t.hv[t.hp])
                     || c.pv[t.hp + 1:]
                 ELSE experiment_after_general(c.pv, t.hv, t.units,
                                               t.units_named) END AS after
          ) m),"""),
    (LEDGER_INSERT,
     """      INSERT INTO ledger (reservation_id, chat_id, kind, charged, units,
                          released, pockets, cv, av)
      SELECT id, chat_id, kind, charged, units_charged, released, NULL, cv,
             after"""),
] + ARRAY_COMMIT


def lean(changes):
    """ARRAYS_GENERAL with its general branches left to the one-by-one path."""
    out = []
    for old, new in changes:
        if old == CHOOSE:
            new = """CASE
               WHEN c.pv[req.p0] - a.held0 >= req.c0 THEN 0
               WHEN c.pv[req.p1] - a.held1 >= req.c1 THEN 1 END"""
        elif old == COMMIT_MATH:
            new = """        CROSS JOIN LATERAL (
          SELECT '{}'::jsonb AS charged,
                 array_fill(0, ARRAY[t.hp - 1])
                   || LEAST(t.hv[t.hp], c.pv[t.hp]) AS cv,
                 c.pv[:t.hp - 1] || GREATEST(0, c.pv[t.hp] - t.hv[t.hp])
                   || c.pv[t.hp + 1:] AS after) m),"""
        elif "AND r.hv IS NOT NULL" in new:
            new = new.replace("AND r.hv IS NOT NULL",
                              "AND r.hp IS NOT NULL AND cm.units IN (0, r.units)")
        out.append((old, new))
    out.append(("""       WHERE req.spec IS NOT NULL AND req.units BETWEEN 1 AND 1000000),""",
                """       WHERE req.spec IS NOT NULL AND req.units = 1 AND NOT req.more
         AND NOT (c.premium AND (req.spec ->> 'free')::boolean)),"""))
    return out


CASE_CHOOSE = [(CHOOSE, """CASE
               WHEN c.premium AND (req.spec ->> 'free')::boolean
                 OR req.units <> 1 THEN
                 chargeonce_choose(req.spec, c.premium, c.pockets, a.held,
                                   req.units)
               WHEN chargeonce_amount(c.pockets, req.spec #>> '{pay,0,0}')
                    - chargeonce_amount(a.held, req.spec #>> '{pay,0,0}')
                    >= (req.spec #>> '{pay,0,1}')::integer THEN
                 jsonb_build_object(
                   'held', jsonb_build_object(req.spec #>> '{pay,0,0}',
                                              (req.spec #>> '{pay,0,1}')::integer),
                   'units', jsonb_build_object(req.spec #>> '{pay,0,0}', 1))
               WHEN chargeonce_amount(c.pockets, req.spec #>> '{pay,1,0}')
                    - chargeonce_amount(a.held, req.spec #>> '{pay,1,0}')
                    >= (req.spec #>> '{pay,1,1}')::integer THEN
                 jsonb_build_object(
                   'held', jsonb_build_object(req.spec #>> '{pay,1,0}',
                                              (req.spec #>> '{pay,1,1}')::integer),
                   'units', jsonb_build_object(req.spec #>> '{pay,1,0}', 1))
               ELSE chargeonce_choose(req.spec, c.premium, c.pockets, a.held,
                                      req.units) END""")]


def one_pocket_commit(pocket_sql):
    """Commit's arithmetic for a hold on one pocket, found by pocket_sql."""
    return [
        ("""                r.held_units, cm.units AS units_named),""",
         """                r.held_units, cm.units AS units_named,
                """ + pocket_sql + """ AS pocket),"""),
        (COMMIT_MATH, """        CROSS JOIN LATERAL (
          SELECT CASE WHEN t.pocket IS NOT NULL AND NOT p.partial THEN
                   jsonb_build_object(t.pocket,
                     LEAST(chargeonce_amount(t.held, t.pocket),
                           chargeonce_amount(c.pockets, t.pocket)))
                 ELSE chargeonce_pockets_charged(c.pockets, p.nominal)
                 END AS charged,
                 CASE WHEN t.pocket IS NOT NULL AND NOT p.partial THEN
                   c.pockets || jsonb_build_object(t.pocket,
                     GREATEST(0, chargeonce_amount(c.pockets, t.pocket)
                                 - chargeonce_amount(t.held, t.pocket)))
                 ELSE chargeonce_pockets_take(c.pockets, p.nominal)
                 END AS after) m),""")]


def catalog_pocket(i):
    return f"(products #>> ARRAY[r.kind, 'pay', '{i}', '0'])"


POCKET_BY_CATALOG = one_pocket_commit(
    "CASE " + " ".join(
        f"WHEN r.held ? {catalog_pocket(i)} "
        f"AND r.held - {catalog_pocket(i)} = '{{}}' THEN {catalog_pocket(i)}"
        for i in (0, 1)) + " END")
# Pocket names match [a-z][a-z0-9_]*: no quote, no comma in a key.
POCKET_BY_TEXT = one_pocket_commit(
    """CASE WHEN strpos(r.held::text, ',') = 0
                     THEN nullif(split_part(r.held::text, '"', 2), '') END""")
CHARGE_ONLY = [("""                 c.pockets || coalesce(jsonb_object_agg(e.key,
                   GREATEST(0, chargeonce_amount(c.pockets, e.key)
                               - e.value::integer)), '{}') AS after""",
                """                 c.pockets AS after""")]
AFTER_ONLY = [("""          SELECT coalesce(jsonb_object_agg(e.key,
                   LEAST(e.value::integer, chargeonce_amount(c.pockets, e.key))),
                   '{}') AS charged,""", """          SELECT p.nominal AS charged,""")]

FIND = "(chargeonce_find_request(req.chat, req.request_id)).r_id"
SKIPFIND = [(FIND, "CASE WHEN req.request_id <> '' THEN " + FIND + " END")]

VARIANTS = {"base": [], "nochoose": NOCHOOSE, "nomath": NOMATH,
            "free": NOCHOOSE + NOMATH, "arrays": ARRAYS,
            "arrays_jsonb_holds": ARRAYS + HOLDS_JSONB,
            "arrays_general": ARRAYS_GENERAL,
            "arrays_lean": lean(ARRAYS_GENERAL),
            "case_choose": CASE_CHOOSE,
            "pocket_by_catalog": POCKET_BY_CATALOG,
            "pocket_by_text": POCKET_BY_TEXT,
            "charge_only": CHARGE_ONLY, "after_only": AFTER_ONLY,
            "skipfind": SKIPFIND}


def main():
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        sys.exit(__doc__)
    text = MIGRATION.read_text()
    sql = text[text.index(START):]
    for name in sys.argv[1].split("+"):
        if name not in VARIANTS:
            sys.exit(f"unknown variant {name!r}; known: {', '.join(VARIANTS)}")
        for old, new in VARIANTS[name]:
            if old not in sql:
                sys.exit(f"{name}: migration 011 changed; cannot find:\n{old}")
            sql = sql.replace(old, new)
    sys.stdout.write(sql)


if __name__ == "__main__":
    main()
