# SPDX-License-Identifier: Apache-2.0
"""Every route of docs/http.md as the request it sends and how its answer
is read, once, for the blocking and the asyncio client alike. A Call is
built before the first try and sent as it is on every retry: the same
request id, payment id and worker identity."""
from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Dict, Generic, Mapping, Optional, TypeVar, Union
from urllib.parse import urlencode

from . import _json as j
from .models import (ChatStatus, Explanation, Grant, HistoryPage, Receipt, Reservation,
                     Resolution, TopUp, UnresolvedPage)
from .operations import Operation

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    op: Operation
    method: str
    path: str
    body: Optional[bytes]
    #: Reads a 2xx answer's body.
    parse: Callable[[bytes, int], T]


def auto_request_id() -> str:
    """A request id for a reserve whose caller gave none: "auto:" and 128
    random bits in hex, like the C++ client's. The server replays it like any
    other, but where the chat's limit is above 1 it counts as none
    (invalid_argument): derive your own from the user's intent (the message
    and the button) instead."""
    return "auto:" + secrets.token_hex(16)


def _obj(reader: Callable[[Mapping[str, Any]], T]) -> Callable[[bytes, int], T]:
    return lambda body, status: reader(j.decode(body, status))


def _body(fields: Dict[str, Any]) -> Optional[bytes]:
    present = {k: v for k, v in fields.items() if v is not None}
    return json.dumps(present, ensure_ascii=False).encode() if present else None


def _query(params: Dict[str, Any]) -> str:
    present = {k: v for k, v in params.items() if v is not None}
    return "?" + urlencode(present) if present else ""


def _time(t: Union[datetime, str]) -> str:
    """ISO 8601 as the server reads it; a string is passed on as it is."""
    if isinstance(t, str):
        return t
    if t.tzinfo is None:
        raise ValueError("a naive datetime: give it a time zone")
    return t.isoformat()


def _id(n: int) -> int:
    # A bool or a string in a path would reach the server as something else.
    if not isinstance(n, int) or isinstance(n, bool):
        raise TypeError(f"an id must be an int, not {type(n).__name__}")
    return n


def _job(chat: int, id: int, verb: str) -> str:
    return f"/v1/chats/{_id(chat)}/reservations/{_id(id)}/{verb}"


_reservation = _obj(Reservation.from_json)
_chat = _obj(ChatStatus.from_json)

# -- gateway -------------------------------------------------------------------


def touch(chat: int) -> Call[ChatStatus]:
    return Call(Operation.TOUCH, "POST", f"/v1/chats/{_id(chat)}/touch", None, _chat)


def reserve(chat: int, kind: str, request_id: Optional[str], units: Optional[int]) -> Call[Reservation]:
    body = _body({"kind": kind, "request_id": request_id or auto_request_id(), "units": units})
    return Call(Operation.RESERVE, "POST", f"/v1/chats/{_id(chat)}/reservations", body, _reservation)


def cancel(chat: int, request_id: Optional[str]) -> Call[Reservation]:
    query = _query({"request_id": request_id})
    return Call(Operation.CANCEL, "DELETE", f"/v1/chats/{_id(chat)}/reservation{query}", None,
                _reservation)


def cancel_reservation(chat: int, id: int) -> Call[Reservation]:
    return Call(Operation.CANCEL_RESERVATION, "DELETE",
                f"/v1/chats/{_id(chat)}/reservations/{_id(id)}", None, _reservation)


def status(chat: int) -> Call[ChatStatus]:
    return Call(Operation.STATUS, "GET", f"/v1/chats/{_id(chat)}", None, _chat)


# -- worker --------------------------------------------------------------------


def start(chat: int, id: int, worker: Optional[str]) -> Call[Reservation]:
    return Call(Operation.START, "POST", _job(chat, id, "start"), _body({"worker": worker}),
                _reservation)


def heartbeat(chat: int, id: int, worker: Optional[str]) -> Call[Reservation]:
    return Call(Operation.HEARTBEAT, "POST", _job(chat, id, "heartbeat"),
                _body({"worker": worker}), _reservation)


def commit(chat: int, id: int, units: Optional[int], worker: Optional[str]) -> Call[Receipt]:
    return Call(Operation.COMMIT, "POST", _job(chat, id, "commit"),
                _body({"units": units, "worker": worker}), _obj(Receipt.from_json))


def fail(chat: int, id: int, worker: Optional[str]) -> Call[Reservation]:
    return Call(Operation.FAIL, "POST", _job(chat, id, "fail"), _body({"worker": worker}),
                _reservation)


def uncertain(chat: int, id: int, provider_ref: str, worker: Optional[str]) -> Call[Reservation]:
    return Call(Operation.UNCERTAIN, "POST", _job(chat, id, "uncertain"),
                _body({"provider_ref": provider_ref, "worker": worker}), _reservation)


def resolve(chat: int, id: int, outcome: str, units: Optional[int]) -> Call[Resolution]:
    return Call(Operation.RESOLVE, "POST", _job(chat, id, "resolve"),
                _body({"outcome": outcome, "units": units}), _obj(Resolution.from_json))


def unresolved(after: int, limit: Optional[int]) -> Call[UnresolvedPage]:
    query = _query({"status": "outcome_unknown", "limit": limit, "after": after})
    return Call(Operation.UNRESOLVED, "GET", f"/v1/reservations{query}", None,
                _obj(UnresolvedPage.from_json))


# -- admin ---------------------------------------------------------------------


def create_chat(chat: int, daily_messages: Optional[int], daily_images: Optional[int],
                balance: Optional[int], premium_until: Optional[Union[datetime, str]],
                max_active_jobs: Optional[int],
                pockets: Optional[Dict[str, int]] = None) -> Call[ChatStatus]:
    body = _body({"chat": _id(chat), "daily_messages": daily_messages,
                  "daily_images": daily_images, "balance": balance,
                  "premium_until": None if premium_until is None else _time(premium_until),
                  "max_active_jobs": max_active_jobs, "pockets": pockets or None})
    return Call(Operation.CREATE_CHAT, "POST", "/v1/chats", body, _chat)


def top_up(chat: int, credits: int, payment_id: str, *, expires_at: Optional[datetime] = None,
           expires_in_ms: Optional[int] = None, priority: Optional[int] = None,
           source: Optional[str] = None) -> Call[TopUp]:
    body = _body({"credits": credits, "payment_id": payment_id,
                  "expires_at": None if expires_at is None else _time(expires_at),
                  "expires_in_ms": expires_in_ms, "priority": priority, "source": source})
    return Call(Operation.TOP_UP, "POST", f"/v1/chats/{_id(chat)}/top-ups", body,
                _obj(TopUp.from_json))


def void_grant(chat: int, grant: int) -> Call[Grant]:
    return Call(Operation.VOID_GRANT, "POST", f"/v1/chats/{_id(chat)}/grants/{_id(grant)}/void",
                None, _obj(Grant.from_json))


def void_grant_by_payment(chat: int, payment_id: str) -> Call[Grant]:
    return Call(Operation.VOID_GRANT, "POST", f"/v1/chats/{_id(chat)}/grants/void",
                _body({"payment_id": payment_id}), _obj(Grant.from_json))


def set_premium(chat: int, until: Union[datetime, str]) -> Call[ChatStatus]:
    return Call(Operation.SET_PREMIUM, "PUT", f"/v1/chats/{_id(chat)}/premium",
                _body({"until": _time(until)}), _chat)


def set_flags(chat: int, started: Optional[bool], blocked: Optional[bool],
              banned: Optional[bool]) -> Call[ChatStatus]:
    return Call(Operation.SET_FLAGS, "PATCH", f"/v1/chats/{_id(chat)}/flags",
                _body({"started": started, "blocked": blocked, "banned": banned}), _chat)


#: set_limits' "leave this limit as it is" (None means: back to the default).
KEEP: Any = object()


def set_limits(chat: int, max_active_jobs: Any = KEEP,
               balance_low_threshold: Any = KEEP) -> Call[ChatStatus]:
    # null is meaningful here (the default again): sent for every limit
    # given, None included; a limit not given is left out, and stays.
    given = {"max_active_jobs": max_active_jobs,
             "balance_low_threshold": balance_low_threshold}
    body = json.dumps({k: v for k, v in given.items() if v is not KEEP}).encode()
    return Call(Operation.SET_LIMITS, "PUT", f"/v1/chats/{_id(chat)}/limits", body, _chat)


def history(chat: int, limit: Optional[int], before: Optional[int]) -> Call[HistoryPage]:
    query = _query({"limit": limit, "before": before})
    return Call(Operation.HISTORY, "GET", f"/v1/chats/{_id(chat)}/history{query}", None,
                _obj(HistoryPage.from_json))


def explain(chat: int) -> Call[Explanation]:
    return Call(Operation.EXPLAIN, "GET", f"/v1/chats/{_id(chat)}/explain", None,
                _obj(Explanation.from_json))


# -- probes --------------------------------------------------------------------


def _status_field(body: bytes, status: int) -> str:
    return j.string(j.decode(body, status), "status")


def healthz() -> Call[str]:
    return Call(Operation.HEALTHZ, "GET", "/healthz", None, _status_field)


def readyz() -> Call[str]:
    return Call(Operation.READYZ, "GET", "/readyz", None, _status_field)


def metrics() -> Call[str]:
    return Call(Operation.METRICS, "GET", "/metrics", None,
                lambda body, status: body.decode("utf-8", "replace"))

