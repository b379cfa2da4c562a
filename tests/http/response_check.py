#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Validates every response the HTTP suite received against docs/openapi.yaml.

usage: response_check.py OPENAPI.yaml RESPONSES.jsonl

RESPONSES.jsonl has one {"method", "path", "status", "content_type", "body"}
per line (tests/http/http.sh records them; path as requested, query string
included; body the raw text; content_type null when not recorded). Each is
matched to the spec's path template and method, then its status must be
documented there and a JSON body must validate against that response's
schema: $ref, allOf/oneOf/anyOf, nullable, type, enum, required,
properties, additionalProperties, items, minimum/maximum,
minLength/maxLength, pattern and format date-time. A request to no
documented route or method (404 no_route, 405) must answer the Error
schema.

Strict about fields: an object schema that lists `properties` and says
nothing of `additionalProperties` is taken as closed here. The document
leaves responses open so that a generated client keeps working when the
server adds a field; the suite is stricter so that a field the server sends
but the document forgets fails it.

Then it proves it can fail: the first recorded reservation is checked again
without a required field, with a field of the wrong type and with an
undocumented field, and each must be refused.

Python's standard library only (neither PyYAML nor jsonschema is a
dependency of the project): the YAML is read by a parser of the subset the
document uses. Where PyYAML happens to be importable, the two readings must
agree.
"""
import copy
import json
import re
import sys

# -- a YAML subset: block mappings and sequences, flow collections, quoted and
# plain scalars, literal block scalars (|), anchors and aliases ----------------


class YamlError(Exception):
    pass


def load_yaml(text):
    lines = []
    for number, raw in enumerate(text.split("\n"), 1):
        stripped = raw.lstrip(" ")
        lines.append([len(raw) - len(stripped), stripped.rstrip(), number])
    return _Reader(lines).document()


def _meaningful(text):
    return text != "" and not text.startswith("#")


class _Reader:
    def __init__(self, lines):
        self.lines, self.i, self.anchors = lines, 0, {}

    def fail(self, why):
        number = self.lines[self.i][2] if self.i < len(self.lines) else "end"
        raise YamlError(f"line {number}: {why}")

    def skip(self):
        while self.i < len(self.lines) and not _meaningful(self.lines[self.i][1]):
            self.i += 1

    def peek(self):
        self.skip()
        return self.lines[self.i] if self.i < len(self.lines) else None

    def document(self):
        first = self.peek()
        value = self.block(first[0]) if first else None
        if self.peek() is not None:
            self.fail("unexpected text after the document")
        return value

    def block(self, indent):
        line = self.peek()
        if line[1] == "-" or line[1].startswith("- "):
            return self.sequence(indent)
        return self.mapping(indent)

    def sequence(self, indent):
        out = []
        while (line := self.peek()) and line[0] == indent and \
                (line[1] == "-" or line[1].startswith("- ")):
            item = line[1][1:].lstrip(" ")
            if item == "":
                self.i += 1
                out.append(self.nested(indent))
            elif _key_split(item) is not None:
                # "- key: value" opens a mapping indented past the dash.
                line[0], line[1] = indent + len(line[1]) - len(item), item
                out.append(self.mapping(line[0]))
            else:
                self.i += 1
                out.append(self.inline(item))
        return out

    def mapping(self, indent):
        out = {}
        while (line := self.peek()) and line[0] == indent:
            split = _key_split(line[1])
            if split is None:
                self.fail(f"expected 'key: value', got {line[1]!r}")
            key, rest = split
            if key in out:
                self.fail(f"duplicate key {key!r}")
            self.i += 1
            out[key] = self.value(rest, indent)
        if (line := self.peek()) and line[0] > indent:
            self.fail(f"unexpected indentation: {line[1]!r}")
        return out

    def nested(self, indent):
        """The block below a key or dash whose value starts on the next line
        (a sequence may sit at its key's own indent)."""
        line = self.peek()
        if line and (line[0] > indent or (line[0] == indent and line[1].startswith("- "))):
            return self.block(line[0])
        return None

    def value(self, rest, indent):
        anchor = None
        if m := re.match(r"&([\w-]+)\s*", rest):
            anchor, rest = m.group(1), rest[m.end():]
        rest = _strip_comment(rest)
        if rest == "":
            value = self.nested(indent)
        elif rest in ("|", "|-", "|+"):
            value = self.literal(indent, rest)
        elif rest[0] in ">":
            self.fail("folded block scalars are not supported")
        else:
            # A flow collection may go on over more indented lines.
            while rest[0] in "[{" and not _closed(rest) and (line := self.peek()) \
                    and line[0] > indent:
                rest += " " + line[1]
                self.i += 1
            value = self.inline(rest)
        if anchor:
            self.anchors[anchor] = value
        return value

    def literal(self, indent, style):
        body, block_indent = [], None
        while self.i < len(self.lines):
            ind, text, _ = self.lines[self.i]
            if text == "":
                body.append("")
            elif ind <= indent:
                break
            else:
                block_indent = ind if block_indent is None else block_indent
                if ind < block_indent:
                    self.fail("a literal block line less indented than its first")
                body.append(" " * (ind - block_indent) + text)
            self.i += 1
        while body and body[-1] == "" and style != "|+":
            body.pop()
        return "\n".join(body) + ("" if style == "|-" else "\n")

    def inline(self, text):
        if m := re.fullmatch(r"\*([\w-]+)", text):
            if m.group(1) not in self.anchors:
                self.fail(f"unknown alias *{m.group(1)}")
            return copy.deepcopy(self.anchors[m.group(1)])
        value, end = _flow(text, 0, self)
        if _strip_comment(text[end:]).strip():
            self.fail(f"unexpected text after a value: {text!r}")
        return value


def _key_split(text):
    """(key, rest) of "key: rest" or "key:", else None."""
    if text[0] in "\"'":
        value, end = _quoted(text, 0)
        if text[end:end + 1] == ":" and (len(text) == end + 1 or text[end + 1] == " "):
            return value, text[end + 1:].strip()
        return None
    if text[0] in "{[":
        return None
    m = re.match(r"([^#:]+?|[^ ][^:]*?):(?: +(.*))?$", text)
    if not m or " #" in m.group(1):
        return None
    return m.group(1), (m.group(2) or "").strip()


def _closed(text):
    """Whether the flow collection text starts with ends on it."""
    depth, quote = 0, None
    for c in text:
        if quote:
            quote = None if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
            if depth == 0:
                return True
    return False


def _strip_comment(text):
    if text[:1] in "\"'{[":
        return text  # the flow reader skips a comment after the value
    return re.sub(r"(^|\s)#.*$", "", text).strip()


def _quoted(text, i):
    quote, j, out = text[i], i + 1, []
    while j < len(text):
        c = text[j]
        if quote == "'" and c == "'":
            if text[j + 1:j + 2] == "'":
                out.append("'")
                j += 2
                continue
            return "".join(out), j + 1
        if quote == '"' and c == "\\":
            esc = text[j + 1:j + 2]
            simple = {'"': '"', "\\": "\\", "/": "/", "n": "\n", "t": "\t"}
            if esc not in simple:
                raise YamlError(f"unsupported escape \\{esc} in {text!r}")
            out.append(simple[esc])
            j += 2
            continue
        if quote == '"' and c == '"':
            return "".join(out), j + 1
        out.append(c)
        j += 1
    raise YamlError(f"unterminated string: {text!r}")


def _plain(text):
    if text in ("true", "false"):
        return text == "true"
    if text in ("null", "~"):
        return None
    if re.fullmatch(r"[-+]?[0-9]+", text):
        return int(text)
    if re.fullmatch(r"[-+]?[0-9]+\.[0-9]+", text):
        return float(text)
    return text


def _flow(text, i, reader, in_flow=False):
    """The value at text[i:]: (value, index after it)."""
    while i < len(text) and text[i] == " ":
        i += 1
    if i >= len(text):
        return None, i
    c = text[i]
    if c in "\"'":
        return _quoted(text, i)
    if c == "*":
        m = re.match(r"\*([\w-]+)", text[i:])
        return reader.inline(m.group(0)), i + m.end()
    if c in "{[":
        close, out, i = ("}" if c == "{" else "]"), ({} if c == "{" else []), i + 1
        while True:
            while i < len(text) and text[i] == " ":
                i += 1
            if i < len(text) and text[i] == close:
                return out, i + 1
            if c == "{":
                key, i = _flow(text, i, reader, True)
                if text[i:i + 1] != ":":
                    raise YamlError(f"expected ':' in {text!r}")
                out[key], i = _flow(text, i + 1, reader, True)
            else:
                item, i = _flow(text, i, reader, True)
                out.append(item)
            while i < len(text) and text[i] == " ":
                i += 1
            if text[i:i + 1] == ",":
                i += 1
            elif text[i:i + 1] != close:
                raise YamlError(f"expected ',' or '{close}' in {text!r}")
    if not in_flow:
        return _plain(text[i:].strip()), len(text)
    m = re.match(r"[^,\[\]{}]*?(?=\s*(?:[,\]}]|:(?: |$)|$))", text[i:])
    return _plain(m.group(0).strip()), i + m.end()


# -- the schema check ---------------------------------------------------------

DATE_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)")
TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}


class Checker:
    def __init__(self, spec, strict=True):
        self.spec, self.strict = spec, strict

    def resolve(self, node):
        while isinstance(node, dict) and "$ref" in node:
            ref = node["$ref"]
            if not ref.startswith("#/"):
                raise ValueError(f"only local $refs are supported: {ref}")
            node = self.spec
            for part in ref[2:].split("/"):
                node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def errors(self, schema, value, where="$"):
        out = []
        self._check(self.resolve(schema), value, where, out)
        return out

    def _check(self, s, v, where, out):
        s = self.resolve(s)
        if v is None:
            if not s.get("nullable") and any(k in s for k in ("type", "allOf", "oneOf", "anyOf")):
                out.append(f"{where}: null, not nullable")
            return
        for sub in s.get("allOf", []):
            self._check(sub, v, where, out)
        for key, least, most in (("oneOf", 1, 1), ("anyOf", 1, None)):
            if key in s:
                passing = sum(not self.errors(sub, v, where) for sub in s[key])
                if passing < least or (most is not None and passing > most):
                    out.append(f"{where}: {passing} of the {key} schemas match")
        t = s.get("type")
        if t is not None and not TYPES[t](v):
            out.append(f"{where}: {type(v).__name__} {json.dumps(v)[:60]}, expected {t}")
            return
        if "enum" in s and v not in s["enum"]:
            out.append(f"{where}: {v!r} not in {s['enum']}")
        if isinstance(v, dict):
            self._object(s, v, where, out)
        elif isinstance(v, list) and "items" in s:
            for k, item in enumerate(v):
                self._check(s["items"], item, f"{where}[{k}]", out)
        elif isinstance(v, str):
            if len(v) < s.get("minLength", 0) or len(v) > s.get("maxLength", len(v)):
                out.append(f"{where}: length {len(v)} outside the schema's bounds")
            if "pattern" in s and not re.search(s["pattern"], v):
                out.append(f"{where}: {v!r} does not match {s['pattern']}")
            if s.get("format") == "date-time" and not DATE_TIME.fullmatch(v):
                out.append(f"{where}: {v!r} is not a date-time")
        elif TYPES["number"](v):
            if "minimum" in s and v < s["minimum"]:
                out.append(f"{where}: {v} below the minimum {s['minimum']}")
            if "maximum" in s and v > s["maximum"]:
                out.append(f"{where}: {v} above the maximum {s['maximum']}")

    def _object(self, s, v, where, out):
        props = s.get("properties", {})
        for name in s.get("required", []):
            if name not in v:
                out.append(f"{where}: required field {name!r} missing")
        extra = s.get("additionalProperties")
        for name, item in v.items():
            if name in props:
                self._check(props[name], item, f"{where}.{name}", out)
            elif isinstance(extra, dict):
                self._check(extra, item, f"{where}.{name}", out)
            elif extra is False or (extra is None and self.strict and props):
                out.append(f"{where}: undocumented field {name!r}")


# -- responses against operations ---------------------------------------------


def templates(spec):
    out = []
    for template in spec["paths"]:
        rx = re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template))
        out.append((re.compile(rx + r"\Z"), template))
    return out


def check_response(checker, routes, r):
    """[problems] of one recorded response, and its (method, template)."""
    path = r["path"].split("?", 1)[0]
    template = next((t for rx, t in routes if rx.match(path)), None)
    operation = checker.spec["paths"].get(template, {}).get(r["method"].lower())
    status = str(r["status"])
    if operation is None:
        # No such route or method: the HTTP layer's error object.
        schema, want_json = {"$ref": "#/components/schemas/Error"}, True
    else:
        responses = operation["responses"]
        if status not in responses and "default" not in responses:
            return [f"status {status} is not documented"], template
        response = checker.resolve(responses.get(status, responses.get("default")))
        content = response.get("content", {})
        want_json = "application/json" in content
        schema = content.get("application/json", {}).get("schema")
        if not want_json:
            return [], template  # text: /metrics, the event stream
    problems = []
    ctype = r.get("content_type")
    if ctype is not None and want_json and not ctype.startswith("application/json"):
        problems.append(f"Content-Type {ctype!r}, expected application/json")
    try:
        body = json.loads(r["body"])
    except ValueError:
        return problems + [f"the body is not JSON: {r['body'][:80]!r}"], template
    if schema is not None:
        problems += checker.errors(schema, body)
    return problems, template


def must_fail(checker, routes, records):
    """The checker refuses a real response that lost a required field, has a
    field of the wrong type, or carries one the document does not know."""
    sample = next((r for r in records if r["method"] == "POST" and r["status"] == 200
                   and re.fullmatch(r"/v1/chats/[^/]+/reservations", r["path"])), None)
    if sample is None:
        return ["no 200 reserve answer was recorded to mutate"]
    body = json.loads(sample["body"])
    mutations = {
        "without its required 'id'": {k: v for k, v in body.items() if k != "id"},
        "with a string 'units'": {**body, "units": str(body.get("units"))},
        "with an undocumented field": {**body, "undocumented": 1},
        "with a null 'created_at'": {**body, "created_at": None},
    }
    problems = []
    for what, mutated in mutations.items():
        got, _ = check_response(checker, routes, {**sample, "body": json.dumps(mutated)})
        if not got:
            problems.append(f"a reservation {what} passed the check")
    return problems


def main(spec_path, responses_path):
    text = open(spec_path, encoding="utf-8").read()
    spec = load_yaml(text)
    try:
        import yaml  # only to cross-check the subset parser where present
    except ImportError:
        yaml = None
    if yaml is not None and yaml.safe_load(text) != spec:
        print("response_check: the YAML subset parser and PyYAML read the document "
              "differently", file=sys.stderr)
        return 1
    checker, routes = Checker(spec), templates(spec)
    records = [json.loads(line) for line in open(responses_path, encoding="utf-8") if line.strip()]
    problems, seen = [], set()
    for r in records:
        got, template = check_response(checker, routes, r)
        seen.add((r["method"], template or "(no route)", r["status"]))
        problems += [f"{r['method']} {r['path']} -> {r['status']}: {p}; body {r['body'][:300]}"
                     for p in got]
    problems += must_fail(checker, routes, records)
    for p in problems:
        print("response_check:", p, file=sys.stderr)
    print(f"response_check: {len(records)} responses ({len(seen)} distinct method, path "
          f"and status) against {spec_path.rsplit('/', 1)[-1]}: {len(problems)} problems")
    return 1 if problems or not records else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
