# SPDX-License-Identifier: Apache-2.0
from datetime import datetime, timezone

from chargeonce import Event, Pockets, Reservation
from support import reservation_json


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
