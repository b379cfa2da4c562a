# SPDX-License-Identifier: Apache-2.0
"""Celery tasks that charge exactly once.

    app = Celery("bot", broker="redis://127.0.0.1:6379/0")
    app.conf.update(task_acks_late=True, task_reject_on_worker_lost=True,
                    broker_transport_options={"visibility_timeout": 3600})
    chargeonce.celery_tasks.install(app, lambda: Client(URL, worker_token=...),
                                    lease_duration=30, sweep_interval=5)

    @billed_task(app, kind="image")
    def upscale(job, photo_id):
        job.check()                     # CancelRequested once the user cancelled
        return provider.upscale(photo_id, idempotency_key=job.provider_ref)

    # the gateway, on a button press:
    sent = upscale.reserve_and_send(gateway_client, chat, "msg-18-upscale", photo_id)

The gateway reserves and sends the task to the queue the reservation names.
The task starts the reservation under a worker identity of its own
delivery, so a second delivery of the same message (a redelivery after a
lost worker, a double send) is refused `already_started` by chargeonce and
dropped unrun, as is a job that was cancelled (`not_found`), swept
(`expired`) or has ended (`invalid_state`). While the function runs, a
thread heartbeats the lease and notes a cancel request. Its return commits
the hold; an exception fails it (nothing charged); ProviderTimeout records
the job `uncertain` (the slot freed, the hold kept until a reconciler
resolves it).
"""
from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Dict, Optional, Tuple

from celery import Celery, Task, signals

from .client import Client
from .errors import (AlreadyStartedError, ChargeonceError, ExpiredError, InvalidStateError,
                     NotFoundError)
from .models import Receipt, Reservation

log = logging.getLogger("chargeonce.celery")

#: The errors of `start` after which a delivery is dropped unrun: the job
#: was cancelled while queued, swept, has ended, or another delivery runs it.
DROP_ON_START = (NotFoundError, ExpiredError, InvalidStateError, AlreadyStartedError)


#: Seconds between heartbeats at most, however long the lease.
HEARTBEAT_INTERVAL_MAX = 60.0


class ConfigurationError(Exception):
    """The Celery app is configured in a way that can run a job twice or
    leave it unacknowledged: the worker refuses to start."""


class CancelRequested(Exception):
    """The user cancelled the running job (its kind's policy is `request`):
    raised by Job.check(); the task fails the job, nothing charged."""


class JobLost(Exception):
    """chargeonce no longer lets this delivery finish the job (its lease ran
    out and the sweep released it, or another delivery runs it): stop, never
    commit."""

    def __init__(self, error: ChargeonceError) -> None:
        super().__init__(str(error))
        self.error = error


class ProviderTimeout(Exception):
    """The provider call timed out and its outcome is unknown: the task
    records the job uncertain under `provider_ref` (default: the job's)."""

    def __init__(self, provider_ref: Optional[str] = None) -> None:
        super().__init__(provider_ref or "provider timed out")
        self.provider_ref = provider_ref


@dataclass(frozen=True)
class Settings:
    client_factory: Callable[[], Client]
    lease_duration: float
    sweep_interval: float
    #: Called with (chat, reservation, worker, error name) for each dropped delivery.
    on_drop: Optional[Callable[[int, int, str, str], None]] = None


def check_app(app: Celery, lease_duration: float, sweep_interval: float) -> None:
    """Raises ConfigurationError unless the app acknowledges late, requeues
    a task whose worker was lost, and has a broker visibility timeout longer
    than chargeonce's lease plus its sweep interval."""
    conf = app.conf
    problems = []
    if not conf.task_acks_late:
        # Acknowledged on receipt, a task whose worker dies is never delivered
        # again and its job waits for the sweep with nobody to run it.
        problems.append("task_acks_late must be True")
    if not conf.task_reject_on_worker_lost:
        # Without it Celery acknowledges a task whose worker process was
        # killed, the same loss as above.
        problems.append("task_reject_on_worker_lost must be True")
    options = conf.broker_transport_options or {}
    # kombu's Redis transport redelivers a message unacknowledged for this
    # long (3600 s by default), even one whose first delivery still runs.
    visibility = float(options.get("visibility_timeout", 3600))
    if visibility <= lease_duration + sweep_interval:
        # Shorter, a healthy long job is delivered again while its first
        # delivery runs, and a lost worker's job comes back before chargeonce
        # has swept it: the copies are only dropped, but every long job then
        # costs a second worker slot and a second start for nothing.
        problems.append(f"broker_transport_options['visibility_timeout'] ({visibility:g} s) "
                        f"must exceed chargeonce's lease plus sweep interval "
                        f"({lease_duration:g} + {sweep_interval:g} s)")
    if problems:
        raise ConfigurationError("chargeonce: " + "; ".join(problems))


def install(app: Celery, client_factory: Callable[[], Client], *, lease_duration: float,
            sweep_interval: float,
            on_drop: Optional[Callable[[int, int, str, str], None]] = None) -> None:
    """Checks the app now and again when a worker starts (the worker
    refuses to start otherwise) and gives billed tasks their client:
    `client_factory` is called once per worker process (after the fork) and
    must return a Client with the worker token. `lease_duration` and
    `sweep_interval` are the server's (`--lease-duration`,
    `--sweep-interval`), in seconds."""
    check_app(app, lease_duration, sweep_interval)
    app.chargeonce_settings = Settings(client_factory, lease_duration, sweep_interval, on_drop)

    def at_worker_start(sender: Any = None, **_: Any) -> None:
        # The worker's own configuration (command line, config module) is final now.
        check_app(app, lease_duration, sweep_interval)
    signals.worker_init.connect(at_worker_start, weak=False)


_clients: Dict[Tuple[int, int], Client] = {}
_clients_lock = threading.Lock()


def _client_of(app: Celery) -> Client:
    settings = _settings(app)
    # One per process and app: a prefork child must not share its parent's socket.
    key = (os.getpid(), id(app))
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = settings.client_factory()
        return client


def _settings(app: Celery) -> Settings:
    settings = getattr(app, "chargeonce_settings", None)
    if settings is None:
        raise ConfigurationError("chargeonce: call chargeonce.celery_tasks.install(app, …) first")
    return settings


def worker_identity(request: Any) -> str:
    """The name this delivery gives chargeonce: the task id, Celery's retry
    count, whether the broker redelivered it, the host and process, and
    random bits. A delivery keeps it for every call (its own retries
    included); any other delivery of the same message, even on the same
    process, has another, so chargeonce refuses it `already_started` once
    the job runs. (The task id and the flags alone would not do: two
    deliveries of one message can carry the same ones.)"""
    redelivered = bool((getattr(request, "delivery_info", None) or {}).get("redelivered"))
    return (f"celery:{request.id}:r{request.retries or 0}:{'re' if redelivered else 'd'}:"
            f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}")[:256]


class Job:
    """The running job as a billed task's function sees it."""

    def __init__(self, client: Client, chat: int, reservation: Reservation, worker: str) -> None:
        self.client = client
        self.chat = chat
        self.reservation = reservation
        self.worker = worker
        #: Units to commit; None: the whole hold.
        self.units: Optional[int] = None
        self._cancel_requested = threading.Event()
        self._lost: Optional[ChargeonceError] = None
        self._stop = threading.Event()

    @property
    def id(self) -> int:
        return self.reservation.id

    @property
    def provider_ref(self) -> str:
        """An idempotency key for the provider call, the same for every
        delivery of this job: pass it to the provider, and it names the job
        in `uncertain` if the call times out."""
        return f"chargeonce-{self.chat}-{self.reservation.id}"

    @property
    def cancel_requested(self) -> bool:
        """True once a heartbeat answered that the user cancelled the job."""
        return self._cancel_requested.is_set()

    def heartbeat(self) -> bool:
        """Renews the lease now; returns True if the user cancelled the job.
        Raises JobLost when chargeonce no longer lets this delivery finish."""
        try:
            self.reservation = self.client.heartbeat(self.chat, self.id, self.worker)
        except (ExpiredError, AlreadyStartedError, NotFoundError, InvalidStateError) as e:
            self._lost = e
            raise JobLost(e) from e
        if self.reservation.cancel_requested:
            self._cancel_requested.set()
        return self.cancel_requested

    def check(self) -> None:
        """Call between steps: raises CancelRequested once the user
        cancelled, JobLost once the job can no longer be committed."""
        if self._lost is not None:
            raise JobLost(self._lost)
        if self.cancel_requested:
            raise CancelRequested(f"reservation {self.id} of chat {self.chat}")

    def _interval(self) -> float:
        # A third of the lease, so that two lost heartbeats in a row still renew it.
        expires = self.reservation.lease_expires_at
        if expires is None:
            return 1.0
        left = (expires - datetime.now(timezone.utc)).total_seconds()
        return min(max(0.2, left / 3), HEARTBEAT_INTERVAL_MAX)

    def _heartbeats(self) -> None:
        while not self._stop.wait(self._interval()):
            try:
                self.heartbeat()
            except JobLost:
                return
            except ChargeonceError as e:  # transient after the client's own retries
                log.warning("heartbeat of reservation %s failed: %s", self.id, e)


class BilledTask(Task):
    """The base of billed tasks (billed_task() makes them)."""

    #: The job kind the gateway reserves; reserve_and_send(kind=…) overrides it.
    kind: Optional[str] = None
    acks_late = True
    reject_on_worker_lost = True

    def reserve_and_send(self, client: Client, chat: int, request_id: Optional[str], *args: Any,
                         kind: Optional[str] = None, units: Optional[int] = None,
                         countdown: Optional[float] = None, **kwargs: Any) -> "Sent":
        """The gateway's half: reserves the job's price (raising BusyError,
        Insufficient*Error, … for the gateway to answer the user) and sends
        the task to the queue the reservation names. A press repeated with
        the same request id finds the same reservation; it is sent again
        only while still queued, and a second delivery is dropped at start.
        If the broker refuses the message the error propagates with the job
        held: the same press again finds the queued reservation and sends it."""
        job_kind = kind or self.kind
        if job_kind is None:
            raise ValueError(f"task {self.name} has no kind: give billed_task(kind=…) or kind=")
        reservation = client.reserve(chat, job_kind, request_id, units)
        if reservation.status != "queued":
            return Sent(reservation, None)
        # The task id names the job: every send of one reservation has the same.
        task_id = f"chargeonce-{chat}-{reservation.id}"
        self.apply_async(args=(chat, reservation.id, *args), kwargs=kwargs,
                         queue=reservation.queue, task_id=task_id, countdown=countdown)
        return Sent(reservation, task_id)


@dataclass(frozen=True)
class Sent:
    reservation: Reservation
    #: None: not sent (the request id's job is already running or ended).
    task_id: Optional[str]


def billed_task(app: Celery, *, kind: Optional[str] = None, name: Optional[str] = None,
                **options: Any) -> Callable[[Callable[..., Any]], BilledTask]:
    """Makes `fn(job, *args, **kwargs)` a Celery task that runs the job
    `reserve_and_send` reserved: start, heartbeat while it runs, then
    commit, fail or uncertain (module docstring)."""

    def decorate(fn: Callable[..., Any]) -> BilledTask:
        def run(self: BilledTask, chat: int, reservation: int, *args: Any, **kwargs: Any) -> Any:
            return _run(self, fn, chat, reservation, args, kwargs)
        # Celery compiles a signature check under this name: a lambda's will not do.
        run.__name__ = fn.__name__ if fn.__name__.isidentifier() else "billed"
        run.__doc__ = fn.__doc__
        run.__module__ = fn.__module__
        task: BilledTask = app.task(bind=True, base=BilledTask, name=name, kind=kind,
                                    acks_late=True, reject_on_worker_lost=True, **options)(run)
        return task
    return decorate


def _run(task: BilledTask, fn: Callable[..., Any], chat: int, reservation: int,
         args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    settings = _settings(task.app)
    client = _client_of(task.app)
    worker = worker_identity(task.request)

    def dropped(error: ChargeonceError) -> Dict[str, Any]:
        log.info("dropped reservation %s of chat %s unrun (%s): %s", reservation, chat,
                 error.error, error.message)
        if settings.on_drop is not None:
            settings.on_drop(chat, reservation, worker, error.error)
        return {"reservation": reservation, "dropped": error.error}

    try:
        started = client.start(chat, reservation, worker)
    except DROP_ON_START as e:
        return dropped(e)
    job = Job(client, chat, started, worker)
    try:
        job.heartbeat()  # the first answer says how long the lease is
    except JobLost as e:
        return dropped(e.error)
    beats = threading.Thread(target=job._heartbeats, name=f"heartbeat-{reservation}", daemon=True)
    beats.start()
    try:
        try:
            result = fn(job, *args, **kwargs)
            if job._lost is not None:  # lost meanwhile: never commit
                raise JobLost(job._lost)
        finally:
            job._stop.set()
            beats.join()
    except JobLost as e:
        return dropped(e.error)
    except CancelRequested:
        # The user cancelled and the function stopped: release the hold. (A
        # function that finished the work anyway returns, and it is committed.)
        _fail_quietly(client, chat, reservation, worker)
        return {"reservation": reservation, "cancelled": True}
    except ProviderTimeout as e:
        client.uncertain(chat, reservation, e.provider_ref or job.provider_ref, worker)
        return {"reservation": reservation, "uncertain": e.provider_ref or job.provider_ref}
    except BaseException:
        # Nothing charged; the exception goes on to Celery, which records
        # the task failed (and acknowledges it: not a lost worker).
        _fail_quietly(client, chat, reservation, worker)
        raise
    try:
        receipt: Receipt = client.commit(chat, reservation, job.units, worker)
    except (ExpiredError, AlreadyStartedError) as e:
        # Swept while the last step ran: the work is done, nothing is charged.
        return dropped(e)
    return {"reservation": reservation, "charged": receipt.charged.all, "result": result}


def _fail_quietly(client: Client, chat: int, reservation: int, worker: str) -> None:
    try:
        client.fail(chat, reservation, worker)
    except (ExpiredError, AlreadyStartedError, NotFoundError, InvalidStateError):
        pass  # released or ended already: nothing is held
