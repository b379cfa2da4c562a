# SPDX-License-Identifier: Apache-2.0
"""AsyncClient over a scripted transport: the same retries and ids."""
import asyncio
import json

import pytest

from chargeonce import AsyncClient, ChargeonceConnectionError, RetryPolicy
from support import error, ok, reservation_json


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
