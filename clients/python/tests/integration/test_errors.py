# SPDX-License-Identifier: Apache-2.0
"""The server's errors arrive as their classes."""
import pytest

from chargeonce import (AlreadyExistsError, AlreadyStartedError, BusyError, ChatBannedError,
                        ChatBlockedError, Client, ExpiredError, ForbiddenError,
                        InsufficientFundsError,
                        InsufficientImagesError, InsufficientMessagesError, InvalidArgumentError,
                        InvalidStateError, MethodNotAllowedError, NoRouteError, NotFoundError,
                        TooLateError, UnauthorizedError)
from chargeonce.errors import from_response
from chargeonce.transport import Request
from support import http, make_client, wait_for

pytestmark = pytest.mark.integration


def test_busy_and_insufficient(server, chat):
    c = make_client(server)
    c.create_chat(chat, daily_messages=0, daily_images=1, balance=0)
    c.reserve(chat, "image", "a")
    with pytest.raises(BusyError) as busy:
        c.reserve(chat, "image", "b")
    assert busy.value.status == 409 and str(chat) in busy.value.message
    c.cancel(chat)
    c.reserve(chat, "image", "c")
    c.cancel(chat)
    c.start(chat, c.reserve(chat, "image", "d").id)
    other = chat + 1
    c.create_chat(other, daily_messages=0, daily_images=0, balance=0)
    with pytest.raises(InsufficientImagesError) as e:
        c.reserve(other, "image", "x")
    assert e.value.status == 402
    with pytest.raises(InsufficientMessagesError):
        c.reserve(other, "text", "y")


def test_not_found_already_exists_invalid_argument(server, chat):
    c = make_client(server)
    with pytest.raises(NotFoundError):
        c.status(chat)
    c.create_chat(chat, balance=1)
    with pytest.raises(AlreadyExistsError):
        c.create_chat(chat)
    with pytest.raises(InvalidArgumentError) as e:
        c.reserve(chat, "image", "r", units=0)
    assert e.value.status == 422
    with pytest.raises(InvalidArgumentError):
        c.reserve(chat, "no-such-kind", "r")


def test_a_second_worker_identity_is_already_started_and_a_committed_job_invalid_state(server, chat):
    c = make_client(server)
    c.create_chat(chat, balance=1)
    job = c.reserve(chat, "image", "s")
    c.start(chat, job.id, "delivery-1")
    with pytest.raises(AlreadyStartedError):
        c.start(chat, job.id, "delivery-2")
    with pytest.raises(AlreadyStartedError):
        c.commit(chat, job.id, worker="delivery-2")
    with pytest.raises(TooLateError):
        c.cancel(chat)  # the image kind refuses a cancel after start
    c.commit(chat, job.id, worker="delivery-1")
    with pytest.raises(InvalidStateError):
        c.start(chat, job.id, "delivery-1")


def test_a_job_whose_lease_ran_out_is_expired(server, chat):
    c = make_client(server)
    c.create_chat(chat, balance=1)
    job = c.reserve(chat, "image", "e")
    c.start(chat, job.id, "w")
    c.heartbeat(chat, job.id, "w")  # the lease: 3 s on the test server

    # No more heartbeats: the lease runs out and the sweep releases the job.
    wait_for("the sweep released the job", lambda: c.status(chat).reservations == [])
    with pytest.raises(ExpiredError) as e:
        c.commit(chat, job.id, worker="w")
    assert e.value.status == 410
    assert c.status(chat).balance == 1, "nothing charged"


def test_blocked_and_banned(server, chat):
    c = make_client(server)
    c.create_chat(chat, balance=1)
    c.set_flags(chat, blocked=True)
    with pytest.raises(ChatBlockedError):
        c.reserve(chat, "image", "b")
    c.set_flags(chat, blocked=False, banned=True)
    with pytest.raises(ChatBannedError):
        c.reserve(chat, "image", "b")


def test_the_http_layers_errors(server, chat):
    with pytest.raises(UnauthorizedError) as e:
        Client(server.url, gateway_token="not-a-token-of-this-server").status(chat)
    assert e.value.status == 401
    with pytest.raises(ForbiddenError):
        Client(server.url, gateway_token=server.worker).status(chat)  # another role's token
    t = http(server)
    for request, cls in [(Request("GET", "/v1/nowhere", server.gateway), NoRouteError),
                         (Request("PUT", "/v1/chats/1/touch", server.gateway), MethodNotAllowedError),
                         (Request("POST", "/v1/chats/1/reservations", server.gateway, b"{nope"),
                          __import__("chargeonce").MalformedJsonError)]:
        r = t.send(request)
        assert isinstance(from_response(r.status, r.body, r.headers), cls), request.path


def test_a_kind_no_pocket_pays_is_insufficient_funds(server, chat):
    # The test server's catalog: "voice" is paid only from daily_voice.
    c = make_client(server)
    c.create_chat(chat, balance=5)
    with pytest.raises(InsufficientFundsError) as e:
        c.reserve(chat, "voice", "v-1")
    assert e.value.status == 402
    other = chat + 1
    created = c.create_chat(other, pockets={"daily_voice": 1})
    assert created.pockets["daily_voice"] == 1
    job = c.reserve(other, "voice", "v-2")
    assert job.held.get("daily_voice") == 1 and job.queue == "voice_generation"
