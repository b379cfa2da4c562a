# SPDX-License-Identifier: Apache-2.0
"""Retries against the real server: answers lost after the server acted
are retried with the same ids and find what the first try did; nothing is
held or charged twice."""
import json
import socket

import pytest

from chargeonce import ChargeonceConnectionError, Client, RetryPolicy
from support import http, make_client
from support import LosingTransport

pytestmark = pytest.mark.integration


@pytest.fixture
def slept():
    return []


@pytest.fixture
def retry(slept):
    # The server acted already: nothing to wait for.
    return RetryPolicy(max_attempts=5, sleep=slept.append)


def test_a_reserve_without_a_request_id_retried_after_lost_answers_is_one_job(server, chat, retry, slept):
    t = LosingTransport(http(server))
    c = make_client(server, retry, t)
    c.create_chat(chat, balance=2)
    t.lose_answers("POST", "/reservations", 2)
    job = c.reserve(chat, "image")
    sent = t.sent_to("POST", "/reservations")
    assert len(sent) == 3, "two answers lost, the third read"
    assert {json.loads(r.body)["request_id"] for r in sent} == {job.request_id}
    assert job.request_id.startswith("auto:")
    status = c.status(chat)
    assert [r.id for r in status.reservations] == [job.id] and status.held.balance == 1
    assert len(slept) == 2


def test_a_commit_retried_after_lost_answers_is_charged_once(server, chat, retry):
    t = LosingTransport(http(server))
    c = make_client(server, retry, t)
    c.create_chat(chat, balance=3)
    job = c.reserve(chat, "image", "commit-1")
    t.lose_answers("POST", "/start")
    assert c.start(chat, job.id, "worker-1").status == "in_progress", "the same worker on the retry"
    t.lose_answers("POST", "/commit", 2)
    receipt = c.commit(chat, job.id, worker="worker-1")
    assert len(t.sent_to("POST", "/commit")) == 3
    assert receipt.charged.balance == 1 and c.status(chat).balance == 2, "charged once"
    commits = [e for e in c.history(chat).entries if e.cause == "commit"]
    assert [e.reservation for e in commits] == [job.id]


def test_a_top_up_retried_is_credited_once(server, chat, retry):
    t = LosingTransport(http(server))
    c = make_client(server, retry, t)
    c.create_chat(chat)
    t.lose_answers("POST", "/top-ups")
    c.top_up(chat, 7, f"pay-{chat}")
    assert len(t.sent_to("POST", "/top-ups")) == 2 and c.status(chat).balance == 7


def test_a_cancel_whose_answer_is_lost_is_not_repeated(server, chat, retry, slept):
    t = LosingTransport(http(server))
    c = make_client(server, retry, t)
    c.create_chat(chat, balance=2)
    c.reserve(chat, "image", "cancel-1")
    t.lose_answers("DELETE", "/reservation")
    with pytest.raises(ChargeonceConnectionError, match="lost on purpose"):
        c.cancel(chat)
    assert len(t.sent_to("DELETE", "/reservation")) == 1 and slept == []
    assert c.status(chat).reservation is None, "the first try did cancel it"


def test_no_server_means_bounded_tries_then_a_connection_error(chat, slept):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # a port that was free a moment ago: connections are refused
    c = Client(f"http://127.0.0.1:{port}", "gw", retry=RetryPolicy(max_attempts=3, sleep=slept.append))
    with pytest.raises(ChargeonceConnectionError) as e:
        c.status(chat)
    assert (e.value.status, e.value.error) == (0, "connection") and len(slept) == 2


def test_a_kept_alive_connection_survives_the_servers_idle_timeout(server, chat):
    c = make_client(server, RetryPolicy.never())
    c.create_chat(chat)
    __import__("time").sleep(5.5)  # past http-timeout (5 s): the server closed it
    assert c.status(chat).chat == chat, "reconnected without a retry"
