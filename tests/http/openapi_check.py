#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compares docs/openapi.yaml with the server's route table.

usage: openapi_check.py OPENAPI.yaml ROUTES.txt
ROUTES.txt has one "METHOD PATH ROLE" per line (test_http_routes_dump).
Fails unless every documented route exists, every route is documented,
exactly the routes of role "open" say `security: []`, and every operation
has an `operationId` (generated clients name their methods by it) of its
own, in camelCase. Parses only the
subset of YAML the document uses for paths (no PyYAML on the machine):
paths at two spaces of indent, methods at four, their keys at six.
"""
import re
import sys

METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def documented(path):
    """{(METHOD, path): open?} and {(METHOD, path): operationId} from the
    `paths:` section."""
    out, ids, in_paths, current, method = {}, {}, False, None, None
    for line in open(path, encoding="utf-8"):
        if re.match(r"^\S", line):  # a top-level key
            in_paths = line.startswith("paths:")
            continue
        if not in_paths:
            continue
        if m := re.match(r"^  (/\S*):\s*$", line):
            current, method = m.group(1), None
        elif (m := re.match(r"^    (\w+):", line)) and m.group(1) in METHODS:
            method = (m.group(1).upper(), current)
            out[method] = False
        elif method and re.match(r"^      security:\s*\[\]\s*$", line):
            out[method] = True
        elif method and (m := re.match(r"^      operationId:\s*(\S+)\s*$", line)):
            ids[method] = m.group(1)
    return out, ids


def implemented(path):
    out = {}
    for line in open(path, encoding="utf-8"):
        method, route, role = line.split()
        out[(method, route)] = role == "open"
    return out


def main(yaml_path, routes_path):
    (docs, ids), code = documented(yaml_path), implemented(routes_path)
    problems = [f"undocumented route: {m} {p}" for m, p in sorted(code.keys() - docs.keys())]
    problems += [f"documented but not served: {m} {p}" for m, p in sorted(docs.keys() - code.keys())]
    problems += [f"security of {m} {p}: yaml says open={docs[(m, p)]}, code open={code[(m, p)]}"
                 for m, p in sorted(code.keys() & docs.keys()) if docs[(m, p)] != code[(m, p)]]
    problems += [f"no operationId: {m} {p}" for m, p in sorted(docs.keys() - ids.keys())]
    problems += [f"operationId {i} is not camelCase: {m} {p}" for (m, p), i in sorted(ids.items())
                 if not re.fullmatch(r"[a-z][a-zA-Z0-9]*", i)]
    seen = {}
    for key, i in sorted(ids.items()):
        if i in seen:
            problems.append(f"operationId {i} names two operations: {seen[i]} and {key}")
        seen.setdefault(i, key)
    for p in problems:
        print("openapi_check:", p, file=sys.stderr)
    print(f"openapi_check: {len(code)} routes, {len(docs)} documented, {len(problems)} problems")
    return 1 if problems or not code else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
