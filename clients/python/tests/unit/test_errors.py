# SPDX-License-Identifier: Apache-2.0
import json

import pytest

import chargeonce
from chargeonce.errors import ERROR_CLASSES, from_response

# Every error name docs/http.md documents, each with its class.
DOCUMENTED = {
    "busy": "BusyError", "too_late": "TooLateError", "invalid_state": "InvalidStateError",
    "already_exists": "AlreadyExistsError", "already_started": "AlreadyStartedError",
    "insufficient_messages": "InsufficientMessagesError",
    "insufficient_images": "InsufficientImagesError",
    "insufficient_funds": "InsufficientFundsError", "not_found": "NotFoundError",
    "expired": "ExpiredError", "invalid_argument": "InvalidArgumentError",
    "chat_blocked": "ChatBlockedError", "chat_banned": "ChatBannedError",
    "storage_unavailable": "StorageUnavailableError", "overloaded": "OverloadedError",
    "request_timeout": "RequestTimeoutError", "internal": "InternalError",
    "malformed_json": "MalformedJsonError", "bad_request": "BadRequestError",
    "unauthorized": "UnauthorizedError", "forbidden": "ForbiddenError",
    "no_route": "NoRouteError", "method_not_allowed": "MethodNotAllowedError",
    "payload_too_large": "PayloadTooLargeError", "too_many_streams": "TooManyStreamsError",
    "not_ready": "NotReadyError",
}


def test_every_documented_error_name_has_its_own_exported_class():
    assert sorted(ERROR_CLASSES) == sorted(DOCUMENTED)
    for name, class_name in DOCUMENTED.items():
        cls = getattr(chargeonce, class_name)
        assert ERROR_CLASSES[name] is cls and cls.ERROR == name
        assert issubclass(cls, chargeonce.ChargeonceError)


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_an_error_answer_becomes_its_class_with_name_message_and_status(name):
    e = from_response(409, json.dumps({"error": name, "message": "chat 42 has 1"}).encode(), {})
    assert type(e).__name__ == DOCUMENTED[name]
    assert (e.error, e.message, e.status) == (name, "chat 42 has 1", 409)


def test_exactly_the_transient_ones_are_transient():
    transient = {n for n, c in ERROR_CLASSES.items() if issubclass(c, chargeonce.TransientError)}
    assert transient == {"storage_unavailable", "overloaded", "request_timeout"}
    assert issubclass(chargeonce.ChargeonceConnectionError, chargeonce.TransientError)


def test_retry_after_is_read():
    e = from_response(503, b'{"error":"overloaded","message":""}', {"retry-after": "1"})
    assert isinstance(e, chargeonce.OverloadedError) and e.retry_after == 1


def test_an_unknown_name_is_the_base_class_with_its_name():
    e = from_response(418, b'{"error":"teapot","message":"short"}', {})
    assert type(e) is chargeonce.ChargeonceError and e.error == "teapot"


def test_a_page_that_is_not_the_servers_is_an_unexpected_response():
    e = from_response(502, b"<html>Bad Gateway</html>", {})
    assert isinstance(e, chargeonce.UnexpectedResponseError) and e.status == 502
    assert "Bad Gateway" in e.message
