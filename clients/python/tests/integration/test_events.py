# SPDX-License-Identifier: Apache-2.0
"""The event stream: the queue notice, durable events, resuming after an id."""
import time

import pytest

from chargeonce import InvalidArgumentError
from support import make_client

pytestmark = pytest.mark.integration


def next_of(stream, match, seconds=60.0):
    """The first event `match` accepts, within a liveness bound."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        e = stream.next(1.0)
        if e is not None and match(e):
            print(f"{e.event}: after {time.monotonic() - started:.1f} s")
            return e
    raise AssertionError(f"no matching event within {seconds:.0f} s")


def test_the_queue_notice_and_a_release_then_a_resume_replays_the_release(server, chat):
    c = make_client(server)
    c.create_chat(chat, balance=2)
    with c.events() as stream:
        job = c.reserve(chat, "image", "ev-1")
        notice = next_of(stream, lambda e: e.reservation == job.id and e.event == "queue_notice")
        assert notice.event_id is None and notice.chat == chat
        c.start(chat, job.id, "w")
        c.heartbeat(chat, job.id, "w")  # then no more: the lease runs out, the sweep releases it
        released = next_of(stream, lambda e: e.reservation == job.id
                           and e.event == "reservation_released")
        assert released.event_id is not None and released.reason
        assert stream.last_event_id == released.event_id
    with c.events(after_id=released.event_id - 1) as again:
        replayed = next_of(again, lambda e: e.event_id is not None)
        assert replayed.event_id == released.event_id and replayed.reservation == job.id


def test_listen_resumes_after_the_last_id_and_never_repeats(server, chat):
    c = make_client(server)
    c.create_chat(chat, balance=3, max_active_jobs=3)
    with c.events() as stream:
        jobs = [c.reserve(chat, "image", f"l-{i}") for i in range(2)]
        for j in jobs:  # started, one heartbeat, then none: the sweep releases them
            c.start(chat, j.id, "w")
            c.heartbeat(chat, j.id, "w")
        released = [next_of(stream, lambda e: e.chat == chat and e.event_id) for _ in jobs]
        first = min(released, key=lambda e: e.event_id)
        jobs.sort(key=lambda j: [e.reservation for e in released].index(j.id))
    # Resumed after the first: the second comes, the first never again.
    seen = []
    for e in c.listen(after_id=first.event_id - 1, seconds=60):
        if e.event_id is not None and e.chat == chat:
            seen.append(e.reservation)
        if jobs[1].id in seen:
            break
    assert seen[:2] == [jobs[0].id, jobs[1].id] and len(seen) == len(set(seen))


def test_a_last_event_id_beyond_the_newest_is_invalid_argument(server):
    with pytest.raises(InvalidArgumentError):
        make_client(server).events(after_id=10**15)


def test_credits_expiring_and_balance_low_come_typed_with_their_fields(server, chat):
    c = make_client(server)
    c.create_chat(chat)
    status = c.set_limits(chat, balance_low_threshold=3)
    assert status.balance_low_threshold == 3 and status.max_active_jobs == 1
    with c.events() as stream:
        # Expires in an hour, inside expiry-notice (24 h): told at once.
        grant = c.top_up(chat, 3, f"soon-{chat}", expires_in_ms=3_600_000)
        expiring = next_of(stream, lambda e: e.chat == chat and e.event == "credits_expiring")
        assert (expiring.grant, expiring.credits) == (grant.grant_id, 3)
        assert expiring.expires_at == grant.expires_at and expiring.event_id is not None
        # An image job with no daily images holds 1 credit: 3 available fall to 2.
        job = c.reserve(chat, "image", "low-1")
        low = next_of(stream, lambda e: e.chat == chat and e.event == "balance_low")
        assert (low.available, low.threshold, low.cause, low.reservation) == \
            (2, 3, "reserve", job.id)
    assert c.set_limits(chat, balance_low_threshold=None).balance_low_threshold == 0
    with pytest.raises(InvalidArgumentError):
        c.set_limits(chat, balance_low_threshold=-1)
