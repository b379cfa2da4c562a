# SPDX-License-Identifier: Apache-2.0
"""The blocking client: one method per route of docs/http.md."""
from __future__ import annotations

import time
from datetime import datetime
from typing import Any, Dict, Iterator, List, Optional, TypeVar, Union

from . import _routes as routes
from .errors import ChargeonceConnectionError, ChargeonceError, TooManyStreamsError, TransientError, from_response
from .models import (ChatStatus, Event, Explanation, Grant, HistoryPage, Receipt,
                     Reservation, Resolution, TopUp, UnresolvedPage)
from .retry import RetryPolicy
from .sse import EventFilter, SseParser
from .transport import EventSource, HttpTransport, Request, Response, Transport

T = TypeVar("T")


class _Tokens:
    def __init__(self, gateway: Optional[str], worker: Optional[str], admin: Optional[str]) -> None:
        self._by_role = {"gateway": gateway, "worker": worker, "admin": admin}

    def of(self, role: Optional[str]) -> Optional[str]:
        return None if role is None else self._by_role[role]


class Client:
    """chargeonce's HTTP API, one method per route, each returning the answer
    as a typed object or raising the error's class (ChargeonceError and its
    subclasses).

    The operations that are safe to repeat (Operation.retry_safe, the set
    docs/clients.md names) are tried again after a TransientError (no
    answer, storage_unavailable, overloaded, request_timeout) as the
    RetryPolicy says, each try the same request: the same request id,
    payment id and worker identity. A reserve without a request id gets one
    of the client's own ("auto:…"), so that its retries find the job the
    first try made. Cancel and create-chat are never repeated.

    Thread safety: one Client holds one kept-alive connection guarded by a
    lock, so it may be shared between threads, whose calls then take turns
    (a retry's wait does not hold the lock). Threads that should not wait
    for each other each make their own Client. Event streams have
    connections of their own.
    """

    def __init__(self, url: str, gateway_token: Optional[str] = None,
                 worker_token: Optional[str] = None, admin_token: Optional[str] = None, *,
                 connect_timeout: float = 5.0, timeout: float = 15.0,
                 retry: Optional[RetryPolicy] = None, ca_file: Optional[str] = None,
                 transport: Optional[Transport] = None) -> None:
        """`url`: the server's HTTP port, e.g. "http://127.0.0.1:8080";
        tokens: gateway (touch, reserve, cancel, status, events), worker
        (start, heartbeat, commit, fail, uncertain, resolve, unresolved),
        admin (create-chat, top-up, void-grant, premium, flags, limits,
        history, explain); `timeout`: seconds per try of a request; `retry`: default 5
        tries, 0.1 s doubling up to 2 s; `ca_file`: the CA of an HTTPS
        server's own certificates; `transport`: another one (tests)."""
        self._transport: Transport = transport or HttpTransport(
            url, connect_timeout=connect_timeout, timeout=timeout, ca_file=ca_file)
        self._tokens = _Tokens(gateway_token, worker_token, admin_token)
        self._timeout = timeout
        self.retry = retry or RetryPolicy()

    def close(self) -> None:
        close = getattr(self._transport, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    auto_request_id = staticmethod(routes.auto_request_id)

    # -- gateway ---------------------------------------------------------------

    def touch(self, chat: int) -> ChatStatus:
        """A user update: registers an unknown chat, opens or refills its daily window."""
        return self._run(routes.touch(chat))

    def reserve(self, chat: int, kind: str, request_id: Optional[str] = None,
                units: Optional[int] = None) -> Reservation:
        """Holds the price of one job. `request_id`: the idempotency key, from
        the user's intent (e.g. "msg-18-upscale"); None: the client makes an
        "auto:" one and keeps it for its retries. A reserve with a used
        request id returns that job, active or with how it ended."""
        return self._run(routes.reserve(chat, kind, request_id, units))

    def cancel(self, chat: int, request_id: Optional[str] = None) -> Reservation:
        """Cancels the chat's only active job, or the job of `request_id`: a
        queued one is deleted; a started one is TooLateError, or under its
        kind's `request` policy marked cancel_requested. Never retried."""
        return self._run(routes.cancel(chat, request_id))

    def cancel_reservation(self, chat: int, id: int) -> Reservation:
        """Cancels job `id` of the chat, as cancel() does."""
        return self._run(routes.cancel_reservation(chat, id))

    def status(self, chat: int) -> ChatStatus:
        return self._run(routes.status(chat))

    def events(self, after_id: Optional[int] = None) -> "EventStream":
        """Opens the event stream and returns once the server subscribed it
        (no event after that is missed: subscribe before you reserve).
        `after_id`: the last durable event id handled; the stream first
        replays every kept event after it (sent as Last-Event-ID)."""
        headers = {} if after_id is None else {"Last-Event-ID": str(after_id)}
        source = self._transport.stream(
            Request("GET", "/v1/events", self._tokens.of("gateway"), None, headers))
        stream = EventStream(source, after_id)
        try:
            stream.wait_subscribed(self._timeout)
        except BaseException:
            stream.close()
            raise
        return stream

    def listen(self, after_id: Optional[int] = None,
               seconds: Optional[float] = None) -> Iterator[Event]:
        """Every event, each durable one once, for `seconds` (None: for
        ever). When a stream ends (a server restart, overflow,
        subscription_ended, a broken or silent connection) it opens another
        with Last-Event-ID the last id yielded, waiting as the retry policy
        says; it gives up after that many failures in a row with no event
        between them. An event counts as handled once the next is asked
        for, so the id to store is that of the last event you finished."""
        until = None if seconds is None else time.monotonic() + seconds
        last = after_id
        failures = 0
        while until is None or time.monotonic() < until:
            try:
                with self.events(last) as stream:
                    while until is None or time.monotonic() < until:
                        left = None if until is None else until - time.monotonic()
                        event = stream.next(1.0 if left is None else max(0.0, min(1.0, left)))
                        if event is None:
                            continue
                        failures = 0
                        yield event
                        if event.event_id is not None:
                            last = event.event_id
                        if event.ends_stream:
                            break
            except (TransientError, TooManyStreamsError) as e:
                failures += 1
                if failures >= self.retry.max_attempts:
                    raise
                self.retry.wait(failures, e.retry_after)

    # -- worker ----------------------------------------------------------------

    def start(self, chat: int, id: int, worker: Optional[str] = None) -> Reservation:
        """queued → in_progress. `worker` names this attempt (e.g. the task id
        and its delivery): once the job runs, a call naming another worker is
        AlreadyStartedError (the queue delivered it twice: drop it)."""
        return self._run(routes.start(chat, id, worker))

    def heartbeat(self, chat: int, id: int, worker: Optional[str] = None) -> Reservation:
        """Renews a started job's lease; its answer carries cancel_requested
        once the user cancelled."""
        return self._run(routes.heartbeat(chat, id, worker))

    def commit(self, chat: int, id: int, units: Optional[int] = None,
               worker: Optional[str] = None) -> Receipt:
        """Charges the hold (or `units` of it, the rest released). A retry
        answers the first receipt and charges nothing more."""
        return self._run(routes.commit(chat, id, units, worker))

    def fail(self, chat: int, id: int, worker: Optional[str] = None) -> Reservation:
        """The job failed: the hold is released, nothing charged."""
        return self._run(routes.fail(chat, id, worker))

    def uncertain(self, chat: int, id: int, provider_ref: str,
                  worker: Optional[str] = None) -> Reservation:
        """The provider call timed out, its outcome unknown: the slot is
        freed, the hold kept until resolve(). `provider_ref` is the
        idempotency key the worker gave its provider, to ask it later."""
        return self._run(routes.uncertain(chat, id, provider_ref, worker))

    def resolve(self, chat: int, id: int, outcome: str, units: Optional[int] = None) -> Resolution:
        """What the provider says of an uncertain job ("succeeded": charged
        like a commit; "failed": released), recorded once."""
        return self._run(routes.resolve(chat, id, outcome, units))

    def unresolved(self, after: int = 0, limit: Optional[int] = None) -> UnresolvedPage:
        """The jobs of unknown outcome of every chat after reservation id `after`."""
        return self._run(routes.unresolved(after, limit))

    # -- admin -----------------------------------------------------------------

    def create_chat(self, chat: int, *, daily_messages: Optional[int] = None,
                    daily_images: Optional[int] = None, balance: Optional[int] = None,
                    premium_until: Optional[Union[datetime, str]] = None,
                    max_active_jobs: Optional[int] = None,
                    pockets: Optional[Dict[str, int]] = None) -> ChatStatus:
        """Registers a chat; AlreadyExistsError if it is. Never retried.
        `pockets`: any other pocket of the server's catalog, by name."""
        return self._run(routes.create_chat(chat, daily_messages, daily_images, balance,
                                            premium_until, max_active_jobs, pockets))

    def top_up(self, chat: int, credits: int, payment_id: str, *,
               expires_at: Optional[datetime] = None, expires_in_ms: Optional[int] = None,
               priority: Optional[int] = None, source: Optional[str] = None) -> TopUp:
        """Adds credits as a grant once per `payment_id`; a retry with the
        same terms answers the first receipt, other terms are
        InvalidArgumentError. Only the terms given are sent, the server's
        defaults apply to the rest. `expires_at`: an aware datetime in the
        future (None: never); `expires_in_ms`: the grant expires this long
        after the top-up (1…3,155,760,000,000; not with `expires_at`);
        `priority`: 0…1,000, lower spends first (None: 100); `source`:
        "purchase" (None), "promo" or "admin"."""
        return self._run(routes.top_up(chat, credits, payment_id, expires_at=expires_at,
                                       expires_in_ms=expires_in_ms, priority=priority,
                                       source=source))

    def void_grant(self, chat: int, grant: int) -> Grant:
        """Voids grant `grant` of the chat (a refund, a chargeback): what
        nobody holds of it leaves the balance; holds on it finish, and what
        they release is voided too. Answers the grant after the void; a
        second void answers the same grant and changes nothing.
        NotFoundError when the chat has no such grant."""
        return self._run(routes.void_grant(chat, grant))

    def void_grant_by_payment(self, chat: int, payment_id: str) -> Grant:
        """Voids the grant the top-up of `payment_id` made, as void_grant
        does. NotFoundError when the chat has none (also for a top-up made
        before grants)."""
        return self._run(routes.void_grant_by_payment(chat, payment_id))

    def set_premium(self, chat: int, until: Union[datetime, str]) -> ChatStatus:
        return self._run(routes.set_premium(chat, until))

    def set_flags(self, chat: int, *, started: Optional[bool] = None,
                  blocked: Optional[bool] = None, banned: Optional[bool] = None) -> ChatStatus:
        """Sets the flags given; None leaves one as it is."""
        return self._run(routes.set_flags(chat, started, blocked, banned))

    def set_limits(self, chat: int, max_active_jobs: Any = routes.KEEP,
                   balance_low_threshold: Any = routes.KEEP) -> ChatStatus:
        """How many jobs the chat may run at once (1…64; None: its plan's
        again) and below which available balance it gets balance_low (0 or
        more, 0 never; None: the server's balance-low-threshold again). A
        limit not given stays as it is; give at least one."""
        return self._run(routes.set_limits(chat, max_active_jobs, balance_low_threshold))

    def history(self, chat: int, limit: Optional[int] = None,
                before: Optional[int] = None) -> HistoryPage:
        """One page of the chat's history, newest first; `before`: the
        previous page's next_before."""
        return self._run(routes.history(chat, limit, before))

    def explain(self, chat: int) -> Explanation:
        return self._run(routes.explain(chat))

    # -- probes ----------------------------------------------------------------

    def healthz(self) -> str:
        """"ok" while the process runs."""
        return self._run(routes.healthz())

    def readyz(self) -> str:
        """"ready" when the actors and Postgres answer; NotReadyError otherwise."""
        return self._run(routes.readyz())

    def metrics(self) -> str:
        """The Prometheus text of the server's process."""
        return self._run(routes.metrics())

    # -- requests --------------------------------------------------------------

    def _run(self, call: "routes.Call[T]") -> T:
        request = Request(call.method, call.path, self._tokens.of(call.op.role), call.body)
        response = self._send(call, request)
        return call.parse(response.body, response.status)

    def _send(self, call: "routes.Call[T]", request: Request) -> Response:
        attempt = 1
        while True:
            try:
                response = self._transport.send(request)
                if not 200 <= response.status < 300:
                    raise from_response(response.status, response.body, response.headers)
                return response
            except ChargeonceError as e:
                if not call.op.retry_safe or not self.retry.should_retry(e, attempt):
                    raise
                self.retry.wait(attempt, e.retry_after)
                attempt += 1


class EventStream:
    """One open event stream (Client.events()). Iterate it, or call
    next(seconds). Durable events come once per stream (repeats of a replay
    are dropped). When the stream ends, the iteration raises
    ChargeonceConnectionError: open another with `last_event_id`
    (Client.listen() does all that)."""

    def __init__(self, source: EventSource, after_id: Optional[int] = None) -> None:
        self._source = source
        self._parser = SseParser()
        self._filter = EventFilter(after_id)
        self._ready: List[Event] = []
        self._last = after_id
        self._ended = False

    @property
    def last_event_id(self) -> Optional[int]:
        """The id of the last durable event delivered (or the one opened after)."""
        return self._last

    def wait_subscribed(self, seconds: float) -> None:
        until = time.monotonic() + seconds
        while not self._filter.subscribed:
            if time.monotonic() >= until:
                raise ChargeonceConnectionError(
                    f"the event stream was not subscribed within {seconds:.1f} s")
            self._pump()

    def next(self, seconds: Optional[float] = None) -> Optional[Event]:
        """The next event, waiting up to about `seconds` (the server writes
        every second; None: as long as the stream lasts); None when none
        came in time."""
        until = None if seconds is None else time.monotonic() + seconds
        while not self._ready:
            if until is not None and time.monotonic() >= until:
                return None
            self._pump()
        event: Event = self._ready.pop(0)
        if event.event_id is not None:
            self._last = event.event_id
        return event

    def _pump(self) -> None:
        if self._ended:
            raise ChargeonceConnectionError(
                f"the event stream ended; open another after event {self._last}")
        try:
            chunk = self._source.read()
        except ChargeonceConnectionError:
            self._ended = True
            raise
        for message in self._parser.feed(chunk):
            event = self._filter.accept(message)
            if event is not None:
                self._ready.append(event)

    def __iter__(self) -> Iterator[Event]:
        while True:
            event = self.next(None)
            if event is not None:
                yield event

    def close(self) -> None:
        self._ended = True
        self._source.close()

    def __enter__(self) -> "EventStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
