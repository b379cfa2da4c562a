# SPDX-License-Identifier: Apache-2.0
"""Reads an answer's fields with their documented types.

A field missing or of another type is an UnexpectedResponseError naming it:
a server and a client that drifted apart say so at once instead of handing
a None to code that charges money.
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Dict, List, Mapping, Optional

from .errors import UnexpectedResponseError


def decode(body: bytes, status: int) -> Dict[str, Any]:
    """An answer's body, which must be a JSON object."""
    try:
        value = json.loads(body)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        text = body[:200].decode("utf-8", "replace")
        raise UnexpectedResponseError(
            f"HTTP {status} with a body that is not a JSON object: {text}", status)
    return value


def _wrong(x: Mapping[str, Any], key: str, what: str) -> UnexpectedResponseError:
    return UnexpectedResponseError(
        f'field "{key}" is not {what} in {json.dumps(x)[:300]}', 200)


def integer(x: Mapping[str, Any], key: str) -> int:
    v = x.get(key)
    # bool is an int in Python; JSON's true is not a number.
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise _wrong(x, key, "an integer")


def integer_or_none(x: Mapping[str, Any], key: str) -> Optional[int]:
    return None if x.get(key) is None else integer(x, key)


def string(x: Mapping[str, Any], key: str) -> str:
    v = x.get(key)
    if isinstance(v, str):
        return v
    raise _wrong(x, key, "a string")


def string_or_none(x: Mapping[str, Any], key: str) -> Optional[str]:
    return None if x.get(key) is None else string(x, key)


def boolean(x: Mapping[str, Any], key: str) -> bool:
    v = x.get(key)
    if isinstance(v, bool):
        return v
    raise _wrong(x, key, "a boolean")


def boolean_or_none(x: Mapping[str, Any], key: str) -> Optional[bool]:
    return None if x.get(key) is None else boolean(x, key)


def time(x: Mapping[str, Any], key: str) -> datetime:
    v = time_or_none(x, key)
    if v is None:
        raise _wrong(x, key, "a time")
    return v


def time_or_none(x: Mapping[str, Any], key: str) -> Optional[datetime]:
    """An ISO 8601 time as the server writes it ("2026-12-07T05:10:44.331559Z")."""
    v = string_or_none(x, key)
    if v is None:
        return None
    try:
        # Python before 3.11 does not read the "Z" suffix.
        return datetime.fromisoformat(v[:-1] + "+00:00" if v.endswith("Z") else v)
    except ValueError:
        raise _wrong(x, key, "an ISO 8601 time") from None


def obj(x: Mapping[str, Any], key: str) -> Dict[str, Any]:
    v = x.get(key)
    if isinstance(v, dict):
        return v
    raise _wrong(x, key, "an object")


def obj_or_none(x: Mapping[str, Any], key: str) -> Optional[Dict[str, Any]]:
    return None if x.get(key) is None else obj(x, key)


def array(x: Mapping[str, Any], key: str) -> List[Any]:
    v = x.get(key)
    if isinstance(v, list):
        return v
    raise _wrong(x, key, "an array")


def array_or_none(x: Mapping[str, Any], key: str) -> Optional[List[Any]]:
    return None if x.get(key) is None else array(x, key)


def amounts(x: Mapping[str, Any], key: str) -> Dict[str, int]:
    """Amounts by pocket name, e.g. {"balance": -1}."""
    pockets = obj(x, key)
    for name in pockets:
        integer(pockets, name)
    return dict(pockets)
