# SPDX-License-Identifier: Apache-2.0
"""Every route of docs/http.md against the real server, with typed results."""
from datetime import datetime, timedelta, timezone

import pytest

from chargeonce import (ChatStatus, Explanation, HistoryPage, Receipt, Reservation, Resolution,
                        TopUp, UnresolvedPage)
from support import make_client

pytestmark = pytest.mark.integration


def test_admin_routes_create_top_up_premium_flags_limits(server, chat):
    c = make_client(server)
    created = c.create_chat(chat, daily_messages=2, daily_images=1, balance=3)
    assert isinstance(created, ChatStatus) and created.chat == chat
    assert (created.daily_messages, created.daily_images, created.balance) == (2, 1, 3)
    top = c.top_up(chat, 5, f"pay-{chat}")
    assert isinstance(top, TopUp) and top.credits == 5 and top.purchased_at.tzinfo
    assert c.top_up(chat, 5, f"pay-{chat}") == top, "a retry answers the first"
    assert c.status(chat).balance == 8
    until = datetime.now(timezone.utc) + timedelta(days=30)
    premium = c.set_premium(chat, until)
    assert premium.premium and premium.plan == "premium"
    assert abs((premium.premium_until - until).total_seconds()) < 1
    flags = c.set_flags(chat, started=True, blocked=False)
    assert flags.started and not flags.blocked
    assert c.set_limits(chat, 3).max_active_jobs == 3
    assert c.set_limits(chat, None).max_active_jobs >= 1


def test_gateway_routes_touch_reserve_status_cancel(server, chat):
    c = make_client(server)
    touched = c.touch(chat)
    assert isinstance(touched, ChatStatus) and touched.last_activity_at is not None
    c.set_limits(chat, 2)
    c.top_up(chat, 10, f"p-{chat}")
    a = c.reserve(chat, "image", "msg-1-upscale")
    assert isinstance(a, Reservation) and a.status == "queued" and a.queue
    assert c.reserve(chat, "image", "msg-1-upscale") == a, "the same request id: the same job"
    b = c.reserve(chat, "text", "msg-2-reply", units=2)
    assert b.units == 2
    s = c.status(chat)
    assert [r.id for r in s.reservations] == [a.id, b.id] and s.reservation == a
    cancelled = c.cancel(chat, "msg-2-reply")
    assert cancelled.id == b.id
    assert c.cancel_reservation(chat, a.id).id == a.id
    assert c.status(chat).reservations == []
    again = c.reserve(chat, "text", "msg-3")
    assert c.cancel(chat).id == again.id, "the bare cancel: the chat's only job"


def test_worker_routes_start_heartbeat_commit_fail(server, chat):
    c = make_client(server)
    c.create_chat(chat, daily_images=1, balance=5, max_active_jobs=2)
    job = c.reserve(chat, "image", "w-1", units=3)
    started = c.start(chat, job.id, "task-1:a")
    assert started.status == "in_progress"
    beat = c.heartbeat(chat, job.id, "task-1:a")
    assert beat.lease_expires_at is not None and not beat.cancel_requested
    receipt = c.commit(chat, job.id, units=2, worker="task-1:a")
    assert isinstance(receipt, Receipt) and receipt.units == 2
    assert receipt.reservation == job.id and receipt.committed_at.tzinfo
    assert c.commit(chat, job.id, worker="task-1:a") == receipt, "a retry: the first receipt"
    other = c.reserve(chat, "image", "w-2")
    c.start(chat, other.id)
    failed = c.fail(chat, other.id)
    assert failed.id == other.id and failed.held.balance == 1, "what was held"
    assert c.status(chat).reservations == []


def test_uncertain_resolve_and_unresolved(server, chat):
    c = make_client(server)
    c.create_chat(chat, balance=4, max_active_jobs=2)
    job = c.reserve(chat, "image", "u-1")
    c.start(chat, job.id, "w")
    unknown = c.uncertain(chat, job.id, f"prov-{chat}", "w")
    assert unknown.status == "outcome_unknown" and unknown.provider_ref == f"prov-{chat}"
    assert unknown.slot == -1 and unknown.uncertain_at is not None
    page = c.unresolved(after=job.id - 1, limit=10)
    assert isinstance(page, UnresolvedPage) and job.id in [r.id for r in page.reservations]
    resolution = c.resolve(chat, job.id, "succeeded")
    assert isinstance(resolution, Resolution) and resolution.outcome == "succeeded"
    assert resolution.charged.balance == 1 and resolution.provider_ref == f"prov-{chat}"
    assert c.resolve(chat, job.id, "succeeded") == resolution
    assert c.status(chat).balance == 3


def test_history_explain_and_the_probes(server, chat):
    c = make_client(server)
    c.create_chat(chat, balance=2)
    job = c.reserve(chat, "image", "h-1")
    c.start(chat, job.id)
    c.commit(chat, job.id)
    page = c.history(chat, limit=1)
    assert isinstance(page, HistoryPage) and len(page.entries) == 1
    assert page.entries[0].cause == "commit" and page.entries[0].reservation == job.id
    assert page.entries[0].change == {"balance": -1} and page.next_before is not None
    rest = c.history(chat, before=page.next_before)
    assert [e.detail for e in rest.entries] == ["create_chat"] and rest.next_before is None
    why = c.explain(chat)
    assert isinstance(why, Explanation) and why.status.chat == chat
    assert why.plan_reason == "never premium" and why.refill_interval_ms > 0
    assert why.history[0].reservation == job.id
    assert c.healthz() == "ok" and c.readyz() == "ready"
    assert "chargeonce" in c.metrics()


def test_a_cancel_of_a_started_text_job_is_a_request_the_heartbeat_reports(server, chat):
    # The test server takes a cancel after start of a text job as a request.
    c = make_client(server)
    c.create_chat(chat, daily_messages=1)
    job = c.reserve(chat, "text", "t-1")
    c.start(chat, job.id, "w")
    assert c.cancel(chat, "t-1").cancel_requested
    assert c.heartbeat(chat, job.id, "w").cancel_requested
    c.fail(chat, job.id, "w")
    assert c.status(chat).daily_messages == 1, "nothing charged"


def test_one_client_shared_by_threads_answers_each_its_own(server, chat):
    import threading
    c = make_client(server)
    chats = [chat + i for i in range(8)]
    for n in chats:
        c.create_chat(n, balance=n % 5)
    got = {}

    def ask(n):
        for _ in range(10):
            got[n] = c.status(n).balance
    threads = [threading.Thread(target=ask, args=(n,)) for n in chats]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == {n: n % 5 for n in chats}
