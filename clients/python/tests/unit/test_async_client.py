# SPDX-License-Identifier: Apache-2.0
"""AsyncClient over a scripted transport: the same retries and ids."""
import asyncio
import json
from datetime import datetime, timezone

import pytest

from chargeonce import AsyncClient, ChargeonceConnectionError, NotFoundError, RetryPolicy
from support import error, grant_json, ok, reservation_json, top_up_json


class FakeAsyncTransport:
    def __init__(self, *answers):
        self.answers = list(answers)
        self.sent = []

    async def send(self, request):
        self.sent.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def stream(self, request):
        raise AssertionError("no streams here")

    async def close(self):
        pass


def run(coro):
    return asyncio.run(coro)


def test_a_reserve_is_retried_with_one_auto_id_and_awaits_between_tries():
    slept = []

    async def sleep(s):
        slept.append(s)

    t = FakeAsyncTransport(ChargeonceConnectionError("reset"), error(503, "overloaded"),
                           ok(reservation_json()))
    c = AsyncClient("http://unused", "gw", retry=RetryPolicy(async_sleep=sleep), transport=t)
    job = run(c.reserve(42, "image"))
    ids = {json.loads(r.body)["request_id"] for r in t.sent}
    assert len(t.sent) == 3 and len(ids) == 1 and ids.pop().startswith("auto:")
    assert job.id == 7 and len(slept) == 2


def test_a_cancel_is_not_repeated():
    t = FakeAsyncTransport(ChargeonceConnectionError("reset"))
    c = AsyncClient("http://unused", "gw", transport=t)
    with pytest.raises(ChargeonceConnectionError):
        run(c.cancel(42))
    assert len(t.sent) == 1


def test_a_top_up_sends_exactly_the_terms_given():
    t = FakeAsyncTransport(ok(top_up_json(source="admin", priority=0,
                                          expires_at="2027-01-31T12:00:00Z")),
                           ok(top_up_json(payment_id="pay-2")))
    c = AsyncClient("http://unused", admin_token="ad", transport=t)
    top = run(c.top_up(42, 5, "pay-1", source="admin", priority=0,
                       expires_at=datetime(2027, 1, 31, 12, tzinfo=timezone.utc)))
    run(c.top_up(42, 5, "pay-2"))
    assert [json.loads(r.body) for r in t.sent] == [
        {"credits": 5, "payment_id": "pay-1", "expires_at": "2027-01-31T12:00:00+00:00",
         "priority": 0, "source": "admin"},
        {"credits": 5, "payment_id": "pay-2"}]
    assert (t.sent[0].path, t.sent[0].token) == ("/v1/chats/42/top-ups", "ad")
    assert (top.source, top.priority, top.expires_in_ms) == ("admin", 0, None)


def test_a_void_sends_its_route_and_reads_the_grant():
    slept = []

    async def sleep(s):
        slept.append(s)

    t = FakeAsyncTransport(ChargeonceConnectionError("reset"), ok(grant_json(id=12)),
                           ok(grant_json(id=12)), error(404, "not_found"))
    c = AsyncClient("http://unused", admin_token="ad", transport=t,
                    retry=RetryPolicy(async_sleep=sleep))
    by_id = run(c.void_grant(42, 12))
    by_payment = run(c.void_grant_by_payment(42, "pay-1"))
    with pytest.raises(NotFoundError):
        run(c.void_grant(42, 77))
    assert [(r.method, r.path, r.token, r.body and json.loads(r.body)) for r in t.sent] == [
        ("POST", "/v1/chats/42/grants/12/void", "ad", None),
        ("POST", "/v1/chats/42/grants/12/void", "ad", None),
        ("POST", "/v1/chats/42/grants/void", "ad", {"payment_id": "pay-1"}),
        ("POST", "/v1/chats/42/grants/77/void", "ad", None)]
    assert len(slept) == 1, "the lost answer only; not_found is not retried"
    assert (by_id.id, by_payment.id, by_id.payment_id) == (12, 12, "pay-1")
    assert by_id.voided_at == datetime(2026, 12, 8, 9, 30, 0, 250000, tzinfo=timezone.utc)
