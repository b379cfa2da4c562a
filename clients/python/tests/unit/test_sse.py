# SPDX-License-Identifier: Apache-2.0
"""SSE framing and the event streams over scripted bytes."""
import pytest

from chargeonce import ChargeonceConnectionError, Client, RetryPolicy
from chargeonce.sse import Comment, EventFilter, Message, SseParser
from support import FakeTransport

RELEASED = (b'id: 5\nevent: reservation_released\ndata: {"event":"reservation_released",'
            b'"chat":42,"reservation":7,"reason":"lease_expired","event_id":5}\n\n')


def test_lines_end_in_lf_crlf_or_cr_and_chunks_may_cut_anywhere():
    whole = b": subscribed\r\nevent: queue_notice\rdata: {\"a\":\ndata: 1}\n\n"
    for cut in range(len(whole) + 1):
        p = SseParser()
        got = p.feed(whole[:cut]) + p.feed(whole[cut:])
        assert got == [Comment("subscribed"), Message("queue_notice", '{"a":\n1}', None)], cut


def test_a_cr_at_the_end_of_a_chunk_waits_for_a_possible_lf():
    p = SseParser()
    assert p.feed(b"data: x\r") == []
    assert p.feed(b"\n\r\n") == [Message("", "x", None)]


def test_unknown_fields_are_ignored_and_a_blank_line_alone_dispatches_nothing():
    p = SseParser()
    assert p.feed(b"\n\nretry: 10\nfoo\ndata:x\nid:3\n\n") == [Message("", "x", "3")]


def test_the_filter_drops_repeats_and_ids_at_or_below_the_one_resumed_after():
    f = EventFilter(after_id=4)
    p = SseParser()
    old = RELEASED.replace(b"id: 5", b"id: 4").replace(b'"event_id":5', b'"event_id":4')
    events = [f.accept(m) for m in p.feed(old + RELEASED + RELEASED)]
    assert [e.event_id if e else None for e in events] == [None, 5, None]
    assert events[1].reason == "lease_expired" and events[1].chat == 42


def test_queue_notices_have_no_id_and_are_all_delivered():
    f = EventFilter()
    msg = Message("queue_notice", '{"event":"queue_notice","chat":1,"reservation":2}', None)
    assert f.accept(msg).event == "queue_notice" and f.accept(msg) is not None


def test_data_that_is_not_json_is_an_unexpected_response():
    from chargeonce import UnexpectedResponseError
    with pytest.raises(UnexpectedResponseError):
        EventFilter().accept(Message("x", "nope", None))


def make_client(t, attempts=3):
    return Client("http://unused", "gw", retry=RetryPolicy(max_attempts=attempts, sleep=lambda s: None),
                  transport=t)


def test_events_waits_for_subscribed_and_sends_last_event_id():
    t = FakeTransport()
    t.stream_chunks.append([b": subscribed\n\n", RELEASED])
    c = make_client(t)
    with c.events(after_id=4) as stream:
        assert t.streams[0].headers == {"Last-Event-ID": "4"} and t.streams[0].token == "gw"
        assert stream.next(1.0).event_id == 5 and stream.last_event_id == 5
        with pytest.raises(ChargeonceConnectionError):
            stream.next(1.0)


def test_listen_resumes_after_the_last_event_yielded():
    t = FakeTransport()
    # The first stream ends after event 5; the second replays 5 (dropped) and sends 6.
    t.stream_chunks.append([b": subscribed\n\n", RELEASED])
    six = RELEASED.replace(b"id: 5", b"id: 6").replace(b'"event_id":5', b'"event_id":6')
    t.stream_chunks.append([b": subscribed\n\n", RELEASED + six])
    c = make_client(t)
    got = []
    for e in c.listen():
        got.append(e.event_id)
        if len(got) == 2:
            break
    assert got == [5, 6]
    assert "Last-Event-ID" not in t.streams[0].headers
    assert t.streams[1].headers == {"Last-Event-ID": "5"}


def test_listen_gives_up_after_the_bounded_failures_in_a_row():
    t = FakeTransport()
    t.stream_chunks.extend([[], [], []])  # each stream ends before it is subscribed
    c = make_client(t, attempts=3)
    with pytest.raises(ChargeonceConnectionError):
        list(c.listen())
    assert len(t.streams) == 3
