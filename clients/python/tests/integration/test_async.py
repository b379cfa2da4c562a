# SPDX-License-Identifier: Apache-2.0
"""AsyncClient against the real server: routes, errors, the event stream."""
import asyncio
import time

import pytest

from chargeonce import AlreadyStartedError, AsyncClient, BusyError, Receipt, Reservation

pytestmark = pytest.mark.integration


def test_the_asyncio_client_reserves_runs_commits_and_hears_the_notice(server, chat):
    async def main():
        async with AsyncClient(server.url, server.gateway, server.worker, server.admin) as c:
            await c.create_chat(chat, balance=2)
            stream = await c.events()
            try:
                job = await c.reserve(chat, "image")
                assert isinstance(job, Reservation) and job.request_id.startswith("auto:")
                with pytest.raises(BusyError):
                    await c.reserve(chat, "image", "another")
                started = time.monotonic()
                while True:
                    e = await stream.next(1.0)
                    if e and e.event == "queue_notice" and e.reservation == job.id:
                        break
                    assert time.monotonic() - started < 60, "no queue notice"
            finally:
                stream.close()
            await c.start(chat, job.id, "a")
            with pytest.raises(AlreadyStartedError):
                await c.start(chat, job.id, "b")
            receipt = await c.commit(chat, job.id, worker="a")
            assert isinstance(receipt, Receipt) and receipt.charged.balance == 1
            assert (await c.status(chat)).balance == 1
            assert (await c.history(chat)).entries[0].cause == "commit"
            assert await c.readyz() == "ready"
    asyncio.run(main())


def test_the_asyncio_listen_resumes_after_an_event_id(server, chat):
    async def main():
        async with AsyncClient(server.url, server.gateway, server.worker, server.admin) as c:
            await c.create_chat(chat, balance=2, max_active_jobs=2)
            jobs = []
            released = []
            stream = await c.events()  # subscribed: no release is missed
            try:
                for i in range(2):  # two jobs whose leases run out
                    j = await c.reserve(chat, "image", f"al-{i}")
                    await c.start(chat, j.id, "w")
                    await c.heartbeat(chat, j.id, "w")
                    jobs.append(j.id)
                started = time.monotonic()
                while len(released) < 2:
                    assert time.monotonic() - started < 60, "no releases"
                    e = await stream.next(1.0)
                    if e and e.event == "reservation_released" and e.chat == chat:
                        released.append(e)
            finally:
                stream.close()
            assert sorted(e.reservation for e in released) == sorted(jobs)
            first, second = sorted(released, key=lambda e: e.event_id)
            replayed = []
            async for e in c.listen(after_id=first.event_id, seconds=60):
                if e.event_id is not None and e.chat == chat:
                    replayed.append(e.event_id)
                    break
            assert replayed == [second.event_id], "resumed after the first: the second, once"
    asyncio.run(main())
