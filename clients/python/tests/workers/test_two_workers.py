# SPDX-License-Identifier: Apache-2.0
"""Billed Celery tasks on two real `celery worker` processes (started by
tests/clients/celery.sh with a Redis broker) against a real server: each
scenario counts the provider's calls and reads what chargeonce charged."""
import os
import secrets
import signal
import time
from datetime import datetime, timedelta, timezone

import pytest

from billing_app import render
from chargeonce import Client

env = os.environ
state = env["CHARGEONCE_TEST_STATE"]
worker_pids = [int(p) for p in env["CHARGEONCE_TEST_WORKER_PIDS"].split()]


@pytest.fixture
def client():
    return Client(env["CHARGEONCE_TEST_URL"], env["CHARGEONCE_TEST_GATEWAY_TOKEN"],
                  env["CHARGEONCE_TEST_WORKER_TOKEN"], env["CHARGEONCE_TEST_ADMIN_TOKEN"])


@pytest.fixture
def chat():
    return 100_000_000_000 + secrets.randbelow(900_000_000_000)


def wait_for(what, check, seconds=90.0):
    """Polls `check` until truthy; `seconds` is a liveness bound, never a
    speed. Prints how long it took."""
    started = time.monotonic()
    while True:
        value = check()
        if value:
            print(f"  {what}: after {time.monotonic() - started:.1f} s")
            return value
        assert time.monotonic() - started < seconds, f"{what}: not within {seconds:.0f} s"
        time.sleep(0.1)


def lines(name):
    try:
        with open(os.path.join(state, name)) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def provider_calls(job_id):
    return len(lines(f"provider-{job_id}"))


def commits(client, chat, job_id):
    return [e for e in client.history(chat).entries
            if e.cause == "commit" and e.reservation == job_id]


def idle(client, chat):
    return client.status(chat).reservations == []


def report(what, **facts):
    print(f"scenario {what}: " + ", ".join(f"{k}={v}" for k, v in facts.items()))


def test_a_task_that_succeeds_is_charged_once(client, chat):
    client.create_chat(chat, balance=2)
    sent = render.reserve_and_send(client, chat, "msg-1-render", "ok")
    assert sent.task_id and sent.reservation.queue == "image_generation"
    wait_for("committed", lambda: commits(client, chat, sent.reservation.id))
    assert provider_calls(sent.reservation.id) == 1
    assert client.status(chat).balance == 1
    report("success", provider_calls=1, charged=1, balance_after=1)


def test_a_premium_chats_task_goes_to_its_priority_queue(client, chat):
    until = datetime.now(timezone.utc) + timedelta(days=1)
    client.create_chat(chat, balance=2, premium_until=until)
    sent = render.reserve_and_send(client, chat, "msg-8-render", "ok")
    assert sent.reservation.queue == "image_generation_priority"
    wait_for("committed", lambda: commits(client, chat, sent.reservation.id))
    assert provider_calls(sent.reservation.id) == 1
    charged = commits(client, chat, sent.reservation.id)[0].change
    assert charged == {"balance": -1} and client.status(chat).balance == 1
    report("premium", queue=sent.reservation.queue, provider_calls=1, charged=charged)


def test_a_task_that_raises_is_not_charged(client, chat):
    client.create_chat(chat, balance=2)
    sent = render.reserve_and_send(client, chat, "msg-2-render", "fail")
    wait_for("the hold released", lambda: provider_calls(sent.reservation.id) and idle(client, chat))
    assert provider_calls(sent.reservation.id) == 1
    assert commits(client, chat, sent.reservation.id) == []
    entry = [e for e in client.history(chat).entries if e.reservation == sent.reservation.id]
    assert [e.status for e in entry] == ["failed"]
    assert client.status(chat).balance == 2
    report("exception", provider_calls=1, charged=0, balance_after=2)


def test_a_worker_killed_mid_task_the_redelivery_is_dropped_unrun(client, chat):
    client.create_chat(chat, balance=2)
    sent = render.reserve_and_send(client, chat, "msg-3-render", "hang")
    job = sent.reservation.id
    pid = int(wait_for("the task runs", lambda: (lines(f"running-{job}") or [None])[0]))
    assert pid not in worker_pids, "the prefork child runs it, not a worker's main process"
    os.kill(pid, signal.SIGKILL)
    print(f"  killed the worker process {pid} (kill -9) mid-task")
    # task_reject_on_worker_lost puts the message back; the next delivery
    # starts under another worker identity and is refused.
    wait_for("the redelivery dropped", lambda: lines(f"dropped-{job}") or provider_calls(job) > 1)
    assert provider_calls(job) == 1, f"the redelivery ran the provider again: {lines(f'provider-{job}')}"
    dropped = lines(f"dropped-{job}")
    reason = dropped[0].split()[0]
    assert reason in ("already_started", "expired"), dropped
    wait_for("the sweep released the hold", lambda: idle(client, chat))
    assert provider_calls(job) == 1, lines(f"provider-{job}")
    assert commits(client, chat, job) == [] and client.status(chat).balance == 2
    assert all(os.path.exists(f"/proc/{p}") for p in worker_pids), "both workers still run"
    report("kill -9 mid-task", provider_calls=provider_calls(job), redelivery=reason,
           charged=0, balance_after=2)


def test_a_double_press_with_one_request_id_runs_one_task(client, chat):
    client.create_chat(chat, balance=3)
    # Slow: the second delivery reaches the other worker while the first runs.
    first = render.reserve_and_send(client, chat, "msg-4-render", "slow")
    second = render.reserve_and_send(client, chat, "msg-4-render", "slow")
    job = first.reservation.id
    assert second.reservation.id == job, "the same request id: the same reservation"
    wait_for("committed", lambda: commits(client, chat, job) or provider_calls(job) > 1)
    assert provider_calls(job) == 1, f"both deliveries ran: {lines(f'provider-{job}')}"
    if second.task_id is not None:  # sent twice: the second delivery is dropped at start
        dropped = wait_for("the second delivery dropped", lambda: lines(f"dropped-{job}"))
        assert dropped[0].split()[0] in ("already_started", "invalid_state"), dropped
    assert provider_calls(job) == 1 and len(commits(client, chat, job)) == 1
    assert client.status(chat).balance == 2
    report("double press", messages_sent=2 if second.task_id else 1, provider_calls=1,
           charged=1, second=(lines(f"dropped-{job}") or ["not sent"])[0].split()[0])


def test_a_job_cancelled_while_queued_is_dropped_unrun(client, chat):
    client.create_chat(chat, balance=2)
    # Delivered after 3 s: the user cancels before any worker starts it.
    sent = render.reserve_and_send(client, chat, "msg-5-render", "ok", countdown=3)
    cancelled = client.cancel(chat, "msg-5-render")
    assert cancelled.id == sent.reservation.id
    dropped = wait_for("the delivery dropped", lambda: lines(f"dropped-{sent.reservation.id}"))
    assert dropped[0].split()[0] == "not_found"
    assert provider_calls(sent.reservation.id) == 0 and client.status(chat).balance == 2
    report("cancel while queued", provider_calls=0, charged=0, dropped="not_found")


def test_a_provider_timeout_makes_the_job_uncertain(client, chat):
    client.create_chat(chat, balance=2)
    sent = render.reserve_and_send(client, chat, "msg-6-render", "timeout")
    job = sent.reservation.id

    def uncertain():
        active = client.status(chat).reservations
        return active and active[0].status == "outcome_unknown" and active[0]
    reservation = wait_for("uncertain", uncertain)
    assert reservation.provider_ref == f"chargeonce-{chat}-{job}"
    assert provider_calls(job) == 1 and commits(client, chat, job) == []
    resolution = client.resolve(chat, job, "failed")  # what a reconciler would do
    assert resolution.charged.balance == 0 and client.status(chat).balance == 2
    report("provider timeout", provider_calls=1, status="outcome_unknown", charged=0)


def test_a_cancel_request_reaches_the_running_task_through_its_heartbeats(client, chat):
    client.create_chat(chat, daily_messages=1)
    sent = render.reserve_and_send(client, chat, "msg-7-reply", "until-cancelled", kind="text")
    job = sent.reservation.id
    wait_for("the task runs", lambda: lines(f"running-{job}"))
    assert client.cancel(chat, "msg-7-reply").cancel_requested
    wait_for("the hold released", lambda: idle(client, chat))
    assert provider_calls(job) == 1 and commits(client, chat, job) == []
    assert client.status(chat).daily_messages == 1
    report("cancel while running", provider_calls=1, charged=0)
