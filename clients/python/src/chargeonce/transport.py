# SPDX-License-Identifier: Apache-2.0
"""The blocking client's HTTP over the standard library's http.client."""
from __future__ import annotations

import http.client
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Protocol
from urllib.parse import urlsplit

from .errors import ChargeonceConnectionError, from_response

USER_AGENT = "chargeonce-python/0.2"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    token: Optional[str] = None
    body: Optional[bytes] = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    #: By lower-case name.
    headers: Mapping[str, str] = field(default_factory=dict)


class EventSource(Protocol):
    """An open event stream's bytes."""

    def read(self) -> bytes:
        """The next bytes; raises ChargeonceConnectionError once the stream
        ended or fell silent."""

    def close(self) -> None: ...


class Transport(Protocol):
    def send(self, request: Request) -> Response: ...

    def stream(self, request: Request) -> EventSource:
        """Opens a stream; an answer other than 200 is raised as its error."""


def _headers(request: Request) -> Dict[str, str]:
    headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    if request.token is not None:
        headers["Authorization"] = "Bearer " + request.token
    if request.body is not None:
        headers["Content-Type"] = "application/json"
    headers.update(request.headers)
    return headers


_KEEP_ALIVE = re.compile(r"timeout=(\d+)")


class HttpTransport:
    """One kept-alive connection for all requests, and one more per event
    stream. Requests are serialized by a lock, so one transport (and one
    Client) may be shared between threads; they then wait for each other,
    and a thread that wants its own pace makes its own Client."""

    def __init__(self, url: str, connect_timeout: float = 5.0, timeout: float = 15.0,
                 ca_file: Optional[str] = None, stream_idle_timeout: float = 10.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._connect_timeout = connect_timeout
        self._timeout = timeout
        self._stream_idle_timeout = stream_idle_timeout
        self._ssl = ssl.create_default_context(cafile=ca_file) if self._https else None
        self._lock = threading.Lock()
        self._conn: Optional[http.client.HTTPConnection] = None
        self._idle_since = 0.0
        # The server closes a connection idle for its http-timeout (it says
        # how long in Keep-Alive); a request sent on one it is closing is lost
        # with an unknown outcome, so an older one is replaced first.
        self._keep_alive = 5.0

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self._https:
            conn = http.client.HTTPSConnection(self._host, self._port, timeout=self._connect_timeout,
                                               context=self._ssl)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self._connect_timeout)
        conn.connect()
        assert conn.sock is not None
        conn.sock.settimeout(timeout)
        return conn

    def send(self, request: Request) -> Response:
        with self._lock:
            if self._conn is not None and time.monotonic() - self._idle_since > self._keep_alive - 1:
                self._drop()
            try:
                if self._conn is None:
                    self._conn = self._connect(self._timeout)
                self._conn.request(request.method, self._prefix + request.path,
                                   body=request.body if request.body is not None
                                   else (b"" if request.method in ("POST", "PUT", "PATCH") else None),
                                   headers=_headers(request))
                answer = self._conn.getresponse()
                body = answer.read()
            except (OSError, http.client.HTTPException) as e:
                self._drop()
                raise ChargeonceConnectionError(
                    f"{request.method} {request.path}: {type(e).__name__}: {e}") from e
            headers = {k.lower(): v for k, v in answer.getheaders()}
            if answer.will_close:
                self._drop()
            else:
                self._idle_since = time.monotonic()
                m = _KEEP_ALIVE.search(headers.get("keep-alive", ""))
                if m:
                    self._keep_alive = float(m.group(1))
            return Response(answer.status, body, headers)

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self._drop()

    def stream(self, request: Request) -> "HttpEventSource":
        try:
            conn = self._connect(self._timeout)
            conn.request(request.method, self._prefix + request.path, headers={
                **_headers(request), "Accept": "text/event-stream"})
            answer = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            raise ChargeonceConnectionError(
                f"{request.method} {request.path}: {type(e).__name__}: {e}") from e
        if answer.status != 200:
            body = answer.read()
            conn.close()
            raise from_response(answer.status, body, {k.lower(): v for k, v in answer.getheaders()})
        return HttpEventSource(conn, answer, self._stream_idle_timeout)


class HttpEventSource:
    """An event stream on a connection of its own. The server writes every
    second, so a stream silent for `idle_timeout` is dead."""

    def __init__(self, conn: http.client.HTTPConnection, answer: http.client.HTTPResponse,
                 idle_timeout: float) -> None:
        self._conn = conn
        self._answer = answer
        self._idle_timeout = idle_timeout
        assert conn.sock is not None
        conn.sock.settimeout(idle_timeout)

    def read(self) -> bytes:
        try:
            chunk = self._answer.read1(65536)
        except socket.timeout:
            self.close()
            raise ChargeonceConnectionError(
                f"the event stream was silent for {self._idle_timeout:.0f} s") from None
        except (OSError, http.client.HTTPException, ValueError) as e:
            self.close()
            raise ChargeonceConnectionError(f"the event stream broke: {e}") from e
        if not chunk:
            self.close()
            raise ChargeonceConnectionError("the event stream ended")
        return chunk

    def close(self) -> None:
        self._conn.close()
