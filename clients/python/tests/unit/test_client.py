# SPDX-License-Identifier: Apache-2.0
"""The blocking client over a scripted transport: requests, retries,
auto request ids, typed results."""
import json
from datetime import datetime, timedelta, timezone

import pytest

from chargeonce import (BusyError, ChargeonceConnectionError, Client, Grant, InternalError,
                        InvalidArgumentError, NotFoundError, Operation, Reservation,
                        RetryPolicy, StorageUnavailableError, UnexpectedResponseError)
from support import FakeTransport, error, grant_json, ok, reservation_json, top_up_json


def client(transport, attempts=5):
    slept = []
    retry = RetryPolicy(max_attempts=attempts, sleep=slept.append, random=lambda: 0.0)
    return Client("http://unused", "gw-token", "wk-token", "ad-token", retry=retry,
                  transport=transport), slept


def body(request):
    return None if request.body is None else json.loads(request.body)


def test_a_reserve_without_a_request_id_sends_an_auto_one_and_the_same_on_every_retry():
    t = FakeTransport(ChargeonceConnectionError("reset"), error(503, "storage_unavailable"),
                      ok(reservation_json(request_id="whatever")))
    c, slept = client(t)
    job = c.reserve(42, "image")
    ids = [body(r)["request_id"] for r in t.sent]
    assert len(ids) == 3 and len(set(ids)) == 1
    assert ids[0].startswith("auto:") and len(ids[0]) == len("auto:") + 32
    assert isinstance(job, Reservation) and len(slept) == 2


def test_two_reserves_without_request_ids_get_different_auto_ids():
    t = FakeTransport(ok(reservation_json()), ok(reservation_json()))
    c, _ = client(t)
    c.reserve(42, "image")
    c.reserve(42, "image")
    assert body(t.sent[0])["request_id"] != body(t.sent[1])["request_id"]


def test_the_callers_request_id_and_units_are_sent_as_given():
    t = FakeTransport(ok(reservation_json()))
    c, _ = client(t)
    c.reserve(42, "image", "msg-18-upscale", units=3)
    assert body(t.sent[0]) == {"kind": "image", "request_id": "msg-18-upscale", "units": 3}
    assert (t.sent[0].method, t.sent[0].path, t.sent[0].token) == (
        "POST", "/v1/chats/42/reservations", "gw-token")


def test_a_commit_is_retried_with_the_same_worker_and_units():
    receipt = {"charged": {"balance": 1}, "chat": 42, "committed_at": "2026-12-07T06:36:36Z",
               "kind": "image", "released": {}, "reservation": 7, "units": 1, "window": 0}
    t = FakeTransport(error(503, "request_timeout"), error(503, "overloaded", retry_after=1),
                      ok(receipt))
    c, slept = client(t)
    r = c.commit(42, 7, units=1, worker="task-1:0")
    assert [body(x) for x in t.sent] == [{"units": 1, "worker": "task-1:0"}] * 3
    assert all(x.token == "wk-token" for x in t.sent)
    assert r.charged.balance == 1 and slept[1] == pytest.approx(1.0), "Retry-After is a floor"


def test_retries_stop_at_the_bound_and_raise_the_last_error():
    t = FakeTransport(*[error(503, "storage_unavailable")] * 3)
    c, slept = client(t, attempts=3)
    with pytest.raises(StorageUnavailableError):
        c.status(42)
    assert len(t.sent) == 3 and len(slept) == 2


@pytest.mark.parametrize("call", [
    lambda c: c.cancel(42), lambda c: c.cancel(42, "job-1"),
    lambda c: c.cancel_reservation(42, 7), lambda c: c.create_chat(42, balance=1),
    lambda c: c.healthz(),
])
def test_operations_outside_the_retry_safe_set_are_sent_once(call):
    t = FakeTransport(ChargeonceConnectionError("reset"))
    c, slept = client(t)
    with pytest.raises(ChargeonceConnectionError):
        call(c)
    assert len(t.sent) == 1 and slept == []


@pytest.mark.parametrize("answer,cls", [
    (error(409, "busy"), BusyError), (error(422, "invalid_argument"), InvalidArgumentError),
    (error(500, "internal"), InternalError)])
def test_service_errors_are_raised_at_once(answer, cls):
    t = FakeTransport(answer)
    c, _ = client(t)
    with pytest.raises(cls):
        c.reserve(42, "image", "r")
    assert len(t.sent) == 1


def test_the_retry_safe_set_is_the_documented_one():
    safe = {op.value for op in Operation if op.retry_safe}
    assert safe == {"touch", "reserve", "status", "start", "heartbeat", "commit", "fail",
                    "uncertain", "resolve", "unresolved", "history", "explain", "top-up",
                    "void-grant", "set-premium", "set-flags", "set-limits"}


def test_every_operation_has_its_role():
    admin = {op.value for op in Operation if op.role == "admin"}
    assert admin == {"create-chat", "top-up", "void-grant", "set-premium", "set-flags",
                     "set-limits", "history", "explain"}


def test_each_route_sends_its_method_path_token_and_body():
    chat_json = {"chat": 42, "daily_messages": 0, "daily_images": 0, "balance": 0,
                 "pockets": {}, "plan": "free", "premium": False, "premium_until": None,
                 "started": False, "blocked": False, "banned": False, "window": 0,
                 "window_started_at": None, "last_activity_at": None, "reservation": None,
                 "max_active_jobs": 1, "held": {}, "available": {}, "reservations": []}
    cases = [
        (lambda c: c.touch(42), chat_json, "POST", "/v1/chats/42/touch", "gw-token", None),
        (lambda c: c.cancel(42, "a b"), reservation_json(), "DELETE",
         "/v1/chats/42/reservation?request_id=a+b", "gw-token", None),
        (lambda c: c.cancel_reservation(42, 7), reservation_json(), "DELETE",
         "/v1/chats/42/reservations/7", "gw-token", None),
        (lambda c: c.status(42), chat_json, "GET", "/v1/chats/42", "gw-token", None),
        (lambda c: c.start(42, 7), reservation_json(), "POST",
         "/v1/chats/42/reservations/7/start", "wk-token", None),
        (lambda c: c.heartbeat(42, 7, "w"), reservation_json(), "POST",
         "/v1/chats/42/reservations/7/heartbeat", "wk-token", {"worker": "w"}),
        (lambda c: c.fail(42, 7, "w"), reservation_json(), "POST",
         "/v1/chats/42/reservations/7/fail", "wk-token", {"worker": "w"}),
        (lambda c: c.uncertain(42, 7, "p-1"), reservation_json(), "POST",
         "/v1/chats/42/reservations/7/uncertain", "wk-token", {"provider_ref": "p-1"}),
        (lambda c: c.unresolved(5, 10), {"reservations": [], "next_after": None}, "GET",
         "/v1/reservations?status=outcome_unknown&limit=10&after=5", "wk-token", None),
        (lambda c: c.set_flags(42, blocked=True), chat_json, "PATCH", "/v1/chats/42/flags",
         "ad-token", {"blocked": True}),
        (lambda c: c.set_limits(42, None), chat_json, "PUT", "/v1/chats/42/limits",
         "ad-token", {"max_active_jobs": None}),
        (lambda c: c.set_limits(42, balance_low_threshold=50), chat_json, "PUT",
         "/v1/chats/42/limits", "ad-token", {"balance_low_threshold": 50}),
        (lambda c: c.set_limits(42, 2, balance_low_threshold=None), chat_json, "PUT",
         "/v1/chats/42/limits", "ad-token",
         {"max_active_jobs": 2, "balance_low_threshold": None}),
        (lambda c: c.set_premium(42, "2030-01-01T00:00:00Z"), chat_json, "PUT",
         "/v1/chats/42/premium", "ad-token", {"until": "2030-01-01T00:00:00Z"}),
        (lambda c: c.history(42, limit=5, before=9),
         {"chat": 42, "entries": [], "next_before": None, "truncated": False}, "GET",
         "/v1/chats/42/history?limit=5&before=9", "ad-token", None),
    ]
    for call, answer, method, path, token, sent_body in cases:
        t = FakeTransport(ok(answer))
        c, _ = client(t)
        call(c)
        r = t.sent[0]
        assert (r.method, r.path, r.token, body(r)) == (method, path, token, sent_body), path


def test_a_top_up_sends_exactly_the_terms_given_and_the_same_on_every_retry():
    t = FakeTransport(ChargeonceConnectionError("reset"),
                      ok(top_up_json(grant_id=12, source="promo", priority=10,
                                     expires_at="2027-01-31T12:00:00.500000Z")),
                      ok(top_up_json(payment_id="pay-2", expires_in_ms=86_400_000)),
                      ok(top_up_json(payment_id="pay-3")))
    c, _ = client(t)
    at = datetime(2027, 1, 31, 14, 0, 0, 500000, tzinfo=timezone(timedelta(hours=2)))
    top = c.top_up(42, 5, "pay-1", expires_at=at, priority=10, source="promo")
    c.top_up(42, 5, "pay-2", expires_in_ms=86_400_000)
    c.top_up(42, 5, "pay-3")
    terms = {"credits": 5, "payment_id": "pay-1", "expires_at": "2027-01-31T14:00:00.500000+02:00",
             "priority": 10, "source": "promo"}
    assert [body(r) for r in t.sent] == [
        terms, terms, {"credits": 5, "payment_id": "pay-2", "expires_in_ms": 86_400_000},
        {"credits": 5, "payment_id": "pay-3"}]
    assert {(r.method, r.path, r.token) for r in t.sent} == {
        ("POST", "/v1/chats/42/top-ups", "ad-token")}
    assert (top.grant_id, top.source, top.priority) == (12, "promo", 10)
    assert top.expires_at == datetime(2027, 1, 31, 12, 0, 0, 500000, tzinfo=timezone.utc)


def test_a_void_sends_its_route_and_the_same_on_every_retry():
    voided = ok(grant_json(id=12, source="promo", credits=50, priority=10,
                           payment_id="promo-42-welcome"))
    t = FakeTransport(ChargeonceConnectionError("reset"), voided,
                      error(503, "storage_unavailable"), voided)
    c, slept = client(t)
    by_id = c.void_grant(42, 12)
    by_payment = c.void_grant_by_payment(42, "promo-42-welcome")
    by_id_request = ("POST", "/v1/chats/42/grants/12/void", "ad-token", None)
    by_payment_request = ("POST", "/v1/chats/42/grants/void", "ad-token",
                          {"payment_id": "promo-42-welcome"})
    assert [(r.method, r.path, r.token, body(r)) for r in t.sent] == [
        by_id_request, by_id_request, by_payment_request, by_payment_request]
    assert len(slept) == 2
    for g in (by_id, by_payment):
        assert isinstance(g, Grant)
        assert (g.id, g.source, g.credits, g.left, g.priority, g.payment_id) == (
            12, "promo", 50, 0, 10, "promo-42-welcome")
        assert g.voided_at == datetime(2026, 12, 8, 9, 30, 0, 250000, tzinfo=timezone.utc)


def test_a_void_of_a_grant_the_chat_has_not_is_not_found():
    t = FakeTransport(error(404, "not_found"), error(404, "not_found"))
    c, slept = client(t)
    with pytest.raises(NotFoundError):
        c.void_grant(42, 77)
    with pytest.raises(NotFoundError):
        c.void_grant_by_payment(42, "pay-unknown")
    assert len(t.sent) == 2 and slept == [], "not_found is not retried"


def test_a_void_refuses_an_id_that_is_not_an_int_before_sending():
    t = FakeTransport()
    c, _ = client(t)
    with pytest.raises(TypeError):
        c.void_grant(42, "12")
    assert t.sent == []


def test_a_top_up_refuses_a_naive_expiry_before_sending():
    t = FakeTransport()
    c, _ = client(t)
    with pytest.raises(ValueError, match="naive"):
        c.top_up(42, 5, "pay-1", expires_at=datetime(2027, 1, 31))
    assert t.sent == []


def test_a_field_of_the_wrong_type_is_an_unexpected_response():
    t = FakeTransport(ok(reservation_json(id="7")))
    c, _ = client(t)
    with pytest.raises(UnexpectedResponseError, match='"id" is not an integer'):
        c.start(42, 7)


def test_an_id_that_is_not_an_int_is_refused_before_sending():
    c, _ = client(FakeTransport())
    with pytest.raises(TypeError):
        c.start(42, "7")
    with pytest.raises(TypeError):
        c.status(True)
