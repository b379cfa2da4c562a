# SPDX-License-Identifier: Apache-2.0
from datetime import datetime, timezone

import pytest

from chargeonce import ChatStatus, Event, HistoryEntry, Grant, Pockets, Reservation, TopUp, UnexpectedResponseError
from support import grant_json, reservation_json, top_up_json


def test_a_reservation_reads_every_field_with_its_type():
    r = Reservation.from_json(reservation_json(lease_expires_at="2026-12-07T06:36:39.5Z",
                                               provider_ref="p-1"))
    assert r.created_at == datetime(2026, 12, 7, 6, 36, 36, 541858, tzinfo=timezone.utc)
    assert r.lease_expires_at.tzinfo is not None and r.provider_ref == "p-1"
    assert r.held == Pockets(0, 1, 0, {"balance": 0, "daily_images": 1, "daily_messages": 0})
    assert r.active and not Reservation.from_json(reservation_json(status="committed")).active


def test_pockets_keep_the_catalogs_own_names():
    p = Pockets.from_json({"daily_voice": 3})
    assert (p.balance, p.get("daily_voice"), p.get("other")) == (0, 3, 0)


def test_an_event_takes_its_name_from_the_frame_and_its_id_from_the_json_or_the_frame():
    e = Event.from_frame("cancel_requested", {"chat": 1, "reservation": 2}, "17")
    assert (e.event, e.event_id, e.ends_stream) == ("cancel_requested", 17, False)
    assert Event.from_frame("", {"event": "overflow"}, None).ends_stream


def test_grant_and_balance_events_read_their_fields():
    expired = Event.from_frame("credits_expired", {"event": "credits_expired", "chat": 1,
                                                   "grant": 7, "credits": 5, "event_id": 9}, "9")
    assert (expired.grant, expired.credits, expired.expires_at) == (7, 5, None)
    expiring = Event.from_frame("credits_expiring", {
        "event": "credits_expiring", "chat": 1, "grant": 7, "credits": 5,
        "expires_at": "2027-01-31T12:00:00Z", "event_id": 10}, "10")
    assert (expiring.grant, expiring.credits) == (7, 5)
    assert expiring.expires_at == datetime(2027, 1, 31, 12, 0, tzinfo=timezone.utc)
    low = Event.from_frame("balance_low", {
        "event": "balance_low", "chat": 1, "available": 4, "threshold": 5, "cause": "reserve",
        "reservation": 3, "event_id": 11}, "11")
    assert (low.available, low.threshold, low.cause, low.reservation) == (4, 5, "reserve", 3)


def test_an_event_this_version_does_not_know_comes_as_it_is():
    e = Event.from_frame("from_the_future", {"event": "from_the_future", "chat": 1,
                                             "event_id": 12, "shape": [1]}, "12")
    assert (e.event, e.event_id, e.data["shape"], e.ends_stream) == \
        ("from_the_future", 12, [1], False)


def test_a_top_up_reads_its_grant():
    t = TopUp.from_json(top_up_json(grant_id=12, source="promo", priority=10,
                                    expires_at="2027-01-31T12:00:00.5Z", expires_in_ms=86_400_000))
    assert (t.grant_id, t.source, t.priority, t.expires_in_ms) == (12, "promo", 10, 86_400_000)
    assert t.expires_at == datetime(2027, 1, 31, 12, 0, 0, 500000, tzinfo=timezone.utc)
    never = TopUp.from_json(top_up_json())
    assert (never.grant_id, never.source, never.priority, never.expires_at,
            never.expires_in_ms) == (9, "purchase", 100, None, None)


def test_a_top_up_of_a_server_before_grants_gets_the_defaults():
    old = {"chat": 42, "credits": 5, "payment_id": "pay-1",
           "purchased_at": "2026-12-07T06:36:40.000000Z"}
    t = TopUp.from_json(old)
    assert (t.payment_id, t.credits) == ("pay-1", 5)
    assert (t.grant_id, t.source, t.priority, t.expires_at, t.expires_in_ms) == (
        None, "purchase", 100, None, None)


def test_a_top_up_with_a_grant_field_of_another_type_is_refused():
    with pytest.raises(UnexpectedResponseError, match='"priority" is not an integer'):
        TopUp.from_json(top_up_json(priority="10"))


def test_a_grant_reads_every_field_with_its_type():
    g = Grant.from_json(grant_json(id=12, source="promo", credits=50, left=20, held=3, priority=10,
                                   expires_at="2027-01-31T12:00:00.5Z",
                                   payment_id="promo-42-welcome", voided_at=None))
    assert (g.id, g.chat, g.source, g.credits, g.left, g.held, g.priority, g.payment_id) == (
        12, 42, "promo", 50, 20, 3, 10, "promo-42-welcome")
    assert g.expires_at == datetime(2027, 1, 31, 12, 0, 0, 500000, tzinfo=timezone.utc)
    assert g.created_at == datetime(2026, 12, 7, 6, 36, 40, tzinfo=timezone.utc)
    assert (g.expired_at, g.voided_at) == (None, None)
    opening = Grant.from_json(grant_json(payment_id=None, expired_at="2026-12-08T00:00:00Z"))
    assert (opening.payment_id, opening.expires_at) == (None, None)
    assert opening.expired_at == datetime(2026, 12, 8, tzinfo=timezone.utc)
    assert opening.voided_at == datetime(2026, 12, 8, 9, 30, 0, 250000, tzinfo=timezone.utc)


def test_a_grant_with_a_field_of_another_type_is_refused():
    with pytest.raises(UnexpectedResponseError, match='"left" is not an integer'):
        Grant.from_json(grant_json(left="0"))


def chat_json(**over):
    x = {"chat": 42, "daily_messages": 0, "daily_images": 0, "balance": 7,
         "pockets": {"balance": 7}, "plan": "free", "premium": False, "premium_until": None,
         "started": False, "blocked": False, "banned": False, "window": 0,
         "window_started_at": None, "last_activity_at": None, "reservation": None,
         "max_active_jobs": 1, "held": {}, "available": {"balance": 7}, "reservations": []}
    x.update(over)
    return x


def test_a_status_lists_its_grants_in_the_order_sent():
    promo = grant_json(id=12, source="promo", left=2, held=1, priority=10, voided_at=None,
                       expires_at="2026-12-09T00:00:00Z", expired=True)
    plain = grant_json(id=9, left=5, voided_at=None, expired=False, voided=False)
    st = ChatStatus.from_json(chat_json(grants=[promo, plain]))
    assert [(g.id, g.source, g.left, g.held, g.expired, g.voided) for g in st.grants] == [
        (12, "promo", 2, 1, True, False), (9, "purchase", 5, 0, False, False)]


def test_a_status_of_a_server_before_grants_lists_none():
    assert ChatStatus.from_json(chat_json()).grants == []
    with pytest.raises(UnexpectedResponseError, match='"grants"'):
        ChatStatus.from_json(chat_json(grants={"id": 1}))


def test_a_history_entry_names_its_grants_in_order():
    row = {"at": "2026-12-07T05:13:24.053006Z", "cause": "commit", "detail": "",
           "grants": [{"grant": 12, "credits": 2}, {"grant": 9, "credits": 1}]}
    assert list(HistoryEntry.from_json(row).grants.items()) == [(12, 2), (9, 1)]
    del row["grants"]
    assert HistoryEntry.from_json(row).grants == {}
