# SPDX-License-Identifier: Apache-2.0
"""The Celery integration's decisions, without a broker: the app check, the
worker identity, and what a task does with each answer of chargeonce."""
from types import SimpleNamespace

import pytest
from celery import Celery

from chargeonce import (AlreadyStartedError, ExpiredError, InvalidStateError, NotFoundError,
                        Reservation)
from chargeonce.celery_tasks import (CancelRequested, ConfigurationError, ProviderTimeout,
                                     billed_task, check_app, install, worker_identity)
from support import reservation_json


def app(**conf):
    a = Celery("t", broker="memory://")
    a.conf.update(task_acks_late=True, task_reject_on_worker_lost=True,
                  broker_transport_options={"visibility_timeout": 60})
    a.conf.update(**conf)
    return a


def test_a_well_configured_app_passes():
    check_app(app(), lease_duration=30, sweep_interval=5)


@pytest.mark.parametrize("conf,says", [
    ({"task_acks_late": False}, "task_acks_late"),
    ({"task_reject_on_worker_lost": False}, "task_reject_on_worker_lost"),
    ({"broker_transport_options": {"visibility_timeout": 35}}, "visibility_timeout"),
])
def test_an_app_that_could_lose_or_repeat_a_job_is_refused(conf, says):
    with pytest.raises(ConfigurationError, match=says):
        check_app(app(**conf), lease_duration=30, sweep_interval=5)


def test_kombus_default_visibility_timeout_is_taken_as_an_hour():
    check_app(app(broker_transport_options={}), lease_duration=3000, sweep_interval=5)
    with pytest.raises(ConfigurationError):
        check_app(app(broker_transport_options={}), lease_duration=3600, sweep_interval=5)


def test_each_delivery_of_one_task_has_its_own_worker_identity():
    request = SimpleNamespace(id="task-1", retries=0, delivery_info={"redelivered": False})
    a, b = worker_identity(request), worker_identity(request)
    assert a != b and a.startswith("celery:task-1:r0:d:") and len(a) <= 256
    again = SimpleNamespace(id="task-1", retries=0, delivery_info={"redelivered": True})
    assert worker_identity(again).startswith("celery:task-1:r0:re:")


class FakeClient:
    """Answers start with `start_error` if set; records the calls."""

    def __init__(self, start_error=None):
        self.start_error = start_error
        self.calls = []

    def _reservation(self, **over):
        return Reservation.from_json(reservation_json(status="in_progress", **over))

    def start(self, chat, id, worker):
        self.calls.append("start")
        if self.start_error:
            raise self.start_error
        return self._reservation()

    def heartbeat(self, chat, id, worker):
        self.calls.append("heartbeat")
        return self._reservation(lease_expires_at="2999-01-01T00:00:00Z")  # heartbeats: at most a minute apart

    def commit(self, chat, id, units, worker):
        self.calls.append(f"commit:{units}")
        from chargeonce import Receipt
        return Receipt.from_json({"reservation": id, "chat": chat, "kind": "image",
                                  "charged": {"balance": 1}, "committed_at": "2026-12-07T06:36:36Z",
                                  "units": 1, "released": {}, "window": 0})

    def fail(self, chat, id, worker):
        self.calls.append("fail")

    def uncertain(self, chat, id, provider_ref, worker):
        self.calls.append(f"uncertain:{provider_ref}")


def run_task(fn, client, *args):
    a = app()
    dropped = []
    install(a, lambda: client, lease_duration=3, sweep_interval=1,
            on_drop=lambda chat, res, worker, reason: dropped.append(reason))
    task = billed_task(a, kind="image")(fn)
    result = task.apply(args=(42, 7, *args)).get(propagate=False)
    return result, dropped


@pytest.mark.parametrize("error", [
    NotFoundError("not_found", "", 404), ExpiredError("expired", "", 410),
    InvalidStateError("invalid_state", "", 409), AlreadyStartedError("already_started", "", 409)])
def test_a_delivery_whose_start_is_refused_is_dropped_unrun(error):
    ran = []
    client = FakeClient(start_error=error)
    def work(job):
        ran.append(job)
    result, dropped = run_task(work, client)
    assert ran == [] and client.calls == ["start"] and dropped == [error.error]
    assert result == {"reservation": 7, "dropped": error.error}


def test_success_commits_the_units_the_job_names():
    client = FakeClient()

    def work(job, x):
        job.units = 1
        return x * 2
    result, _ = run_task(work, client, 21)
    assert result["result"] == 42 and client.calls[-1] == "commit:1"


def test_an_exception_fails_the_job_and_reaches_celery():
    client = FakeClient()

    def work(job):
        raise RuntimeError("provider said no")
    result, _ = run_task(work, client)
    assert isinstance(result, RuntimeError) and client.calls[-1] == "fail"
    assert not any(c.startswith("commit") for c in client.calls)


def test_a_provider_timeout_is_uncertain_under_the_jobs_provider_ref():
    client = FakeClient()

    def work(job):
        raise ProviderTimeout()
    result, _ = run_task(work, client)
    assert client.calls[-1] == "uncertain:chargeonce-42-7" and "uncertain" in result


def test_a_cancel_request_fails_the_job():
    client = FakeClient()

    def work(job):
        raise CancelRequested("user")
    result, _ = run_task(work, client)
    assert result == {"reservation": 7, "cancelled": True} and client.calls[-1] == "fail"
