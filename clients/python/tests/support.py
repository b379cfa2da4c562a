# SPDX-License-Identifier: Apache-2.0
"""Test doubles: a scripted transport, and one that loses real answers."""
from __future__ import annotations

import json
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar, Union

from chargeonce import ChargeonceConnectionError, Client, RetryPolicy
from chargeonce.transport import HttpTransport
from chargeonce.transport import Request, Response, Transport

Answer = Union[Response, Exception]


def reservation_json(**over: Any) -> Dict[str, Any]:
    x = {"cancel_requested": False, "chat": 42, "created_at": "2026-12-07T06:36:36.541858Z",
         "ended_at": None, "held": {"balance": 0, "daily_images": 1, "daily_messages": 0},
         "id": 7, "kind": "image", "lease_expires_at": None, "queue": "image_generation",
         "request_id": "job-1", "slot": 0, "status": "queued", "units": 1, "window": 0}
    x.update(over)
    return x


def top_up_json(**over: Any) -> Dict[str, Any]:
    x = {"chat": 42, "credits": 5, "expires_at": None, "expires_in_ms": None, "grant_id": 9,
         "payment_id": "pay-1", "priority": 100, "purchased_at": "2026-12-07T06:36:40.000000Z",
         "source": "purchase"}
    x.update(over)
    return x


def grant_json(**over: Any) -> Dict[str, Any]:
    """A grant after its void."""
    x = {"chat": 42, "created_at": "2026-12-07T06:36:40.000000Z", "credits": 5,
         "expired_at": None, "expires_at": None, "held": 0, "id": 9, "left": 0,
         "payment_id": "pay-1", "priority": 100, "source": "purchase",
         "voided_at": "2026-12-08T09:30:00.250000Z"}
    x.update(over)
    return x


def ok(body: Dict[str, Any], status: int = 200) -> Response:
    return Response(status, json.dumps(body).encode(), {"content-type": "application/json"})


def error(status: int, name: str, message: str = "", retry_after: Optional[int] = None) -> Response:
    headers = {} if retry_after is None else {"retry-after": str(retry_after)}
    return Response(status, json.dumps({"error": name, "message": message}).encode(), headers)


class FakeTransport:
    """Answers from a script, in order; records every request."""

    def __init__(self, *answers: Answer) -> None:
        self.answers: List[Answer] = list(answers)
        self.sent: List[Request] = []
        self.streams: List[Request] = []
        self.stream_chunks: List[List[bytes]] = []

    def send(self, request: Request) -> Response:
        self.sent.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def stream(self, request: Request) -> "FakeEventSource":
        self.streams.append(request)
        return FakeEventSource(self.stream_chunks.pop(0))

    def close(self) -> None:
        pass


class FakeEventSource:
    def __init__(self, chunks: List[bytes]) -> None:
        self.chunks = list(chunks)
        self.closed = False

    def read(self) -> bytes:
        if not self.chunks or self.closed:
            raise ChargeonceConnectionError("the event stream ended")
        return self.chunks.pop(0)

    def close(self) -> None:
        self.closed = True


class LosingTransport:
    """A real transport that loses answers on purpose: the request reaches
    the server and is acted on, then its answer is dropped, as after a
    timeout or a reset between the server's commit and the client's read."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.sent: List[Request] = []
        self._rules: List[Tuple[str, Callable[[str], bool], List[int]]] = []

    def lose_answers(self, method: str, path_ends: str, count: int = 1) -> None:
        self._rules.append((method, lambda p: p.split("?")[0].endswith(path_ends), [count]))

    def sent_to(self, method: str, path_ends: str) -> List[Request]:
        return [r for r in self.sent
                if r.method == method and r.path.split("?")[0].endswith(path_ends)]

    def send(self, request: Request) -> Response:
        self.sent.append(request)
        response = self.inner.send(request)
        for method, matches, left in self._rules:
            if left[0] > 0 and request.method == method and matches(request.path):
                left[0] -= 1
                raise ChargeonceConnectionError(
                    f"{request.method} {request.path}: the answer (HTTP {response.status}) "
                    "was lost on purpose (test)")
        return response

    def stream(self, request: Request) -> Any:
        return self.inner.stream(request)


# -- against the real server ------------------------------------------------

T = TypeVar("T")


def make_client(server, retry: Optional[RetryPolicy] = None, transport=None) -> Client:
    return Client(server.url, server.gateway, server.worker, server.admin, retry=retry,
                  transport=transport)


def http(server) -> HttpTransport:
    return HttpTransport(server.url)


def wait_for(what: str, check: Callable[[], Optional[T]], seconds: float = 60.0) -> T:
    """Polls `check` until it returns something truthy; `seconds` is a
    liveness bound, never a speed. Prints how long it took."""
    started = time.monotonic()
    while True:
        value = check()
        if value:
            print(f"{what}: after {time.monotonic() - started:.1f} s")
            return value
        if time.monotonic() - started > seconds:
            raise AssertionError(f"{what}: not within {seconds:.0f} s")
        time.sleep(0.1)
