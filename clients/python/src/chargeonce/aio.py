# SPDX-License-Identifier: Apache-2.0
"""The asyncio client over aiohttp (Debian's python3-aiohttp): the same
routes, results, errors and retries as Client."""
from __future__ import annotations

import asyncio
import ssl
import time
from datetime import datetime
from typing import Any, AsyncIterator, Dict, List, Optional, Protocol, TypeVar, Union

import aiohttp

from . import _routes as routes
from .client import _Tokens
from .errors import (ChargeonceConnectionError, ChargeonceError, TooManyStreamsError,
                     TransientError, from_response)
from .models import (ChatStatus, Event, Explanation, Grant, HistoryPage, Receipt,
                     Reservation, Resolution, TopUp, UnresolvedPage)
from .retry import RetryPolicy
from .sse import EventFilter, SseParser
from .transport import USER_AGENT, Request, Response

T = TypeVar("T")


class AsyncEventSource(Protocol):
    async def read(self) -> bytes:
        """The next bytes; raises ChargeonceConnectionError once the stream
        ended or fell silent."""

    def close(self) -> None: ...


class AsyncTransport(Protocol):
    async def send(self, request: Request) -> Response: ...

    async def stream(self, request: Request) -> AsyncEventSource: ...

    async def close(self) -> None: ...


def _headers(request: Request) -> Dict[str, str]:
    headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
    if request.token is not None:
        headers["Authorization"] = "Bearer " + request.token
    if request.body is not None:
        headers["Content-Type"] = "application/json"
    headers.update(request.headers)
    return headers


class AiohttpTransport:
    """One aiohttp session (its pool keeps connections alive); made on first
    use, inside the event loop that uses it."""

    def __init__(self, url: str, connect_timeout: float = 5.0, timeout: float = 15.0,
                 ca_file: Optional[str] = None, stream_idle_timeout: float = 10.0) -> None:
        self._url = url.rstrip("/")
        self._connect_timeout = connect_timeout
        self._timeout = timeout
        self._stream_idle_timeout = stream_idle_timeout
        self._ssl = ssl.create_default_context(cafile=ca_file) if ca_file else None
        self._session: Optional[aiohttp.ClientSession] = None

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout, connect=self._connect_timeout),
                # The server closes idle connections after http-timeout (5 s by
                # default); a request on one it is closing would be lost.
                connector=aiohttp.TCPConnector(keepalive_timeout=2.0, ssl=self._ssl))
        return self._session

    async def send(self, request: Request) -> Response:
        session = self._session_now()
        try:
            async with session.request(request.method, self._url + request.path,
                                       data=request.body if request.body is not None else (
                                           b"" if request.method in ("POST", "PUT", "PATCH") else None),
                                       headers=_headers(request)) as answer:
                body = await answer.read()
                return Response(answer.status, body,
                                {k.lower(): v for k, v in answer.headers.items()})
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            raise ChargeonceConnectionError(
                f"{request.method} {request.path}: {type(e).__name__}: {e}") from e

    async def stream(self, request: Request) -> "AiohttpEventSource":
        session = self._session_now()
        timeout = aiohttp.ClientTimeout(total=None, connect=self._connect_timeout,
                                        sock_read=self._stream_idle_timeout)
        try:
            answer = await session.get(self._url + request.path, timeout=timeout, headers={
                **_headers(request), "Accept": "text/event-stream"})
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as e:
            raise ChargeonceConnectionError(
                f"{request.method} {request.path}: {type(e).__name__}: {e}") from e
        if answer.status != 200:
            body = await answer.read()
            answer.release()
            raise from_response(answer.status, body,
                                {k.lower(): v for k, v in answer.headers.items()})
        return AiohttpEventSource(answer, self._stream_idle_timeout)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class AiohttpEventSource:
    def __init__(self, answer: aiohttp.ClientResponse, idle_timeout: float) -> None:
        self._answer = answer
        self._idle_timeout = idle_timeout

    async def read(self) -> bytes:
        try:
            chunk = await self._answer.content.readany()
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError):
            self.close()
            raise ChargeonceConnectionError(
                f"the event stream was silent for {self._idle_timeout:.0f} s") from None
        except (aiohttp.ClientError, OSError) as e:
            self.close()
            raise ChargeonceConnectionError(f"the event stream broke: {e}") from e
        if not chunk:
            self.close()
            raise ChargeonceConnectionError("the event stream ended")
        return chunk

    def close(self) -> None:
        self._answer.close()


class AsyncClient:
    """Client for asyncio: the same methods, as coroutines, with the same
    typed results, errors and retries (awaiting, never blocking the loop).
    Use it from one event loop; `async with AsyncClient(...) as c:` closes
    its session."""

    def __init__(self, url: str, gateway_token: Optional[str] = None,
                 worker_token: Optional[str] = None, admin_token: Optional[str] = None, *,
                 connect_timeout: float = 5.0, timeout: float = 15.0,
                 retry: Optional[RetryPolicy] = None, ca_file: Optional[str] = None,
                 transport: Optional[AsyncTransport] = None) -> None:
        self._transport: AsyncTransport = transport or AiohttpTransport(
            url, connect_timeout=connect_timeout, timeout=timeout, ca_file=ca_file)
        self._tokens = _Tokens(gateway_token, worker_token, admin_token)
        self._timeout = timeout
        self.retry = retry or RetryPolicy()

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    auto_request_id = staticmethod(routes.auto_request_id)

    # -- gateway ---------------------------------------------------------------

    async def touch(self, chat: int) -> ChatStatus:
        return await self._run(routes.touch(chat))

    async def reserve(self, chat: int, kind: str, request_id: Optional[str] = None,
                      units: Optional[int] = None) -> Reservation:
        return await self._run(routes.reserve(chat, kind, request_id, units))

    async def cancel(self, chat: int, request_id: Optional[str] = None) -> Reservation:
        return await self._run(routes.cancel(chat, request_id))

    async def cancel_reservation(self, chat: int, id: int) -> Reservation:
        return await self._run(routes.cancel_reservation(chat, id))

    async def status(self, chat: int) -> ChatStatus:
        return await self._run(routes.status(chat))

    async def events(self, after_id: Optional[int] = None) -> "AsyncEventStream":
        headers = {} if after_id is None else {"Last-Event-ID": str(after_id)}
        source = await self._transport.stream(
            Request("GET", "/v1/events", self._tokens.of("gateway"), None, headers))
        stream = AsyncEventStream(source, after_id)
        try:
            await asyncio.wait_for(stream.wait_subscribed(), self._timeout)
        except asyncio.TimeoutError:
            stream.close()
            raise ChargeonceConnectionError(
                f"the event stream was not subscribed within {self._timeout:.1f} s") from None
        except BaseException:
            stream.close()
            raise
        return stream

    async def listen(self, after_id: Optional[int] = None,
                     seconds: Optional[float] = None) -> AsyncIterator[Event]:
        """As Client.listen(): every event, each durable one once, reopening
        the stream after the last id yielded. Leaving an `async for` early
        closes the stream only when the generator is finalized: wrap it in
        contextlib.aclosing() to close it at once."""
        until = None if seconds is None else time.monotonic() + seconds
        last = after_id
        failures = 0
        while until is None or time.monotonic() < until:
            try:
                stream = await self.events(last)
                try:
                    while until is None or time.monotonic() < until:
                        left = None if until is None else until - time.monotonic()
                        event = await stream.next(1.0 if left is None else max(0.0, min(1.0, left)))
                        if event is None:
                            continue
                        failures = 0
                        yield event
                        if event.event_id is not None:
                            last = event.event_id
                        if event.ends_stream:
                            break
                finally:
                    stream.close()
            except (TransientError, TooManyStreamsError) as e:
                failures += 1
                if failures >= self.retry.max_attempts:
                    raise
                await self.retry.async_wait(failures, e.retry_after)

    # -- worker ----------------------------------------------------------------

    async def start(self, chat: int, id: int, worker: Optional[str] = None) -> Reservation:
        return await self._run(routes.start(chat, id, worker))

    async def heartbeat(self, chat: int, id: int, worker: Optional[str] = None) -> Reservation:
        return await self._run(routes.heartbeat(chat, id, worker))

    async def commit(self, chat: int, id: int, units: Optional[int] = None,
                     worker: Optional[str] = None) -> Receipt:
        return await self._run(routes.commit(chat, id, units, worker))

    async def fail(self, chat: int, id: int, worker: Optional[str] = None) -> Reservation:
        return await self._run(routes.fail(chat, id, worker))

    async def uncertain(self, chat: int, id: int, provider_ref: str,
                        worker: Optional[str] = None) -> Reservation:
        return await self._run(routes.uncertain(chat, id, provider_ref, worker))

    async def resolve(self, chat: int, id: int, outcome: str,
                      units: Optional[int] = None) -> Resolution:
        return await self._run(routes.resolve(chat, id, outcome, units))

    async def unresolved(self, after: int = 0, limit: Optional[int] = None) -> UnresolvedPage:
        return await self._run(routes.unresolved(after, limit))

    # -- admin -----------------------------------------------------------------

    async def create_chat(self, chat: int, *, daily_messages: Optional[int] = None,
                          daily_images: Optional[int] = None, balance: Optional[int] = None,
                          premium_until: Optional[Union[datetime, str]] = None,
                          max_active_jobs: Optional[int] = None,
                    pockets: Optional[Dict[str, int]] = None) -> ChatStatus:
        return await self._run(routes.create_chat(chat, daily_messages, daily_images, balance,
                                                  premium_until, max_active_jobs, pockets))

    async def top_up(self, chat: int, credits: int, payment_id: str, *,
                     expires_at: Optional[datetime] = None, expires_in_ms: Optional[int] = None,
                     priority: Optional[int] = None, source: Optional[str] = None) -> TopUp:
        return await self._run(routes.top_up(chat, credits, payment_id, expires_at=expires_at,
                                             expires_in_ms=expires_in_ms, priority=priority,
                                             source=source))

    async def void_grant(self, chat: int, grant: int) -> Grant:
        return await self._run(routes.void_grant(chat, grant))

    async def void_grant_by_payment(self, chat: int, payment_id: str) -> Grant:
        return await self._run(routes.void_grant_by_payment(chat, payment_id))

    async def set_premium(self, chat: int, until: Union[datetime, str]) -> ChatStatus:
        return await self._run(routes.set_premium(chat, until))

    async def set_flags(self, chat: int, *, started: Optional[bool] = None,
                        blocked: Optional[bool] = None,
                        banned: Optional[bool] = None) -> ChatStatus:
        return await self._run(routes.set_flags(chat, started, blocked, banned))

    async def set_limits(self, chat: int, max_active_jobs: Any = routes.KEEP,
                         balance_low_threshold: Any = routes.KEEP) -> ChatStatus:
        return await self._run(routes.set_limits(chat, max_active_jobs, balance_low_threshold))

    async def history(self, chat: int, limit: Optional[int] = None,
                      before: Optional[int] = None) -> HistoryPage:
        return await self._run(routes.history(chat, limit, before))

    async def explain(self, chat: int) -> Explanation:
        return await self._run(routes.explain(chat))

    # -- probes ----------------------------------------------------------------

    async def healthz(self) -> str:
        return await self._run(routes.healthz())

    async def readyz(self) -> str:
        return await self._run(routes.readyz())

    async def metrics(self) -> str:
        return await self._run(routes.metrics())

    # -- requests --------------------------------------------------------------

    async def _run(self, call: "routes.Call[T]") -> T:
        request = Request(call.method, call.path, self._tokens.of(call.op.role), call.body)
        attempt = 1
        while True:
            try:
                response = await self._transport.send(request)
                if not 200 <= response.status < 300:
                    raise from_response(response.status, response.body, response.headers)
                return call.parse(response.body, response.status)
            except ChargeonceError as e:
                if not call.op.retry_safe or not self.retry.should_retry(e, attempt):
                    raise
                await self.retry.async_wait(attempt, e.retry_after)
                attempt += 1


class AsyncEventStream:
    """One open event stream of AsyncClient.events(): `async for`, or
    `await next(seconds)`; as EventStream otherwise."""

    def __init__(self, source: AsyncEventSource, after_id: Optional[int] = None) -> None:
        self._source = source
        self._parser = SseParser()
        self._filter = EventFilter(after_id)
        self._ready: List[Event] = []
        self._last = after_id
        self._ended = False

    @property
    def last_event_id(self) -> Optional[int]:
        return self._last

    async def wait_subscribed(self) -> None:
        while not self._filter.subscribed:
            await self._pump()

    async def next(self, seconds: Optional[float] = None) -> Optional[Event]:
        until = None if seconds is None else time.monotonic() + seconds
        while not self._ready:
            if until is not None and time.monotonic() >= until:
                return None
            await self._pump()
        event: Event = self._ready.pop(0)
        if event.event_id is not None:
            self._last = event.event_id
        return event

    async def _pump(self) -> None:
        if self._ended:
            raise ChargeonceConnectionError(
                f"the event stream ended; open another after event {self._last}")
        try:
            chunk = await self._source.read()
        except ChargeonceConnectionError:
            self._ended = True
            raise
        for message in self._parser.feed(chunk):
            event = self._filter.accept(message)
            if event is not None:
                self._ready.append(event)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        while True:
            event = await self.next(None)
            if event is not None:
                yield event

    def close(self) -> None:
        self._ended = True
        self._source.close()
