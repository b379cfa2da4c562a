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
