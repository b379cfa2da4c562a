# SPDX-License-Identifier: Apache-2.0
"""One exception class per error name of the HTTP API (docs/http.md).

Every error the client raises is a ChargeonceError carrying the API's error
name, the server's message and the HTTP status (0 when no answer came). An
error name this client does not know (a newer server's) arrives as
ChargeonceError itself with its name in `error`.
"""
from __future__ import annotations

import json
from typing import Dict, Mapping, Optional, Type


class ChargeonceError(Exception):
    """Every error of the client: a server's answer or no answer at all."""

    #: The error name this class stands for; the base class: any.
    ERROR = ""

    def __init__(self, error: str, message: str, status: int,
                 retry_after: Optional[int] = None) -> None:
        super().__init__(f"{error}: {message}" if message else error)
        self.error = error
        self.message = message
        self.status = status
        #: The Retry-After header's seconds, when the server sent one.
        self.retry_after = retry_after


class TransientError(ChargeonceError):
    """The same call may succeed later: no answer, storage_unavailable,
    request_timeout (the outcome is unknown) or overloaded (nothing was
    done). The client retries these for the retry-safe operations; a caller
    that still sees one retries later with the same ids (reserve with the same
    request id, commit the same reservation), never with new ones."""


class BusyError(ChargeonceError):
    """409: every slot of the chat is taken (one job at a time on the free plan)."""
    ERROR = "busy"


class TooLateError(ChargeonceError):
    """409: the job has started and its kind refuses a cancel after start; nothing changed."""
    ERROR = "too_late"


class InvalidStateError(ChargeonceError):
    """409: the job is not in a state for this call (never started, ended, not uncertain)."""
    ERROR = "invalid_state"


class AlreadyExistsError(ChargeonceError):
    """409: create-chat of a chat that is registered."""
    ERROR = "already_exists"


class AlreadyStartedError(ChargeonceError):
    """409: another worker identity started the job: a second delivery, drop it."""
    ERROR = "already_started"


class InsufficientMessagesError(ChargeonceError):
    """402: neither the daily messages nor the balance pay for a text job."""
    ERROR = "insufficient_messages"


class InsufficientImagesError(ChargeonceError):
    """402: neither the daily images nor the balance pay for an image job."""
    ERROR = "insufficient_images"


class InsufficientFundsError(ChargeonceError):
    """402: a kind of the server's own catalog cannot be paid."""
    ERROR = "insufficient_funds"


class NotFoundError(ChargeonceError):
    """404: no such chat or job (a cancelled job is gone: drop it)."""
    ERROR = "not_found"


class ExpiredError(ChargeonceError):
    """410: the sweep released the job (lease or deadline passed): drop it, never commit."""
    ERROR = "expired"


class InvalidArgumentError(ChargeonceError):
    """422: a value out of range, a missing or unknown field; nothing changed."""
    ERROR = "invalid_argument"


class ChatBlockedError(ChargeonceError):
    """403: the chat is blocked."""
    ERROR = "chat_blocked"


class ChatBannedError(ChargeonceError):
    """403: the chat is banned."""
    ERROR = "chat_banned"


class StorageUnavailableError(TransientError):
    """503: Postgres did not answer; the operation may or may not be written."""
    ERROR = "storage_unavailable"


class OverloadedError(TransientError):
    """503: back-pressure; nothing was done."""
    ERROR = "overloaded"


class RequestTimeoutError(TransientError):
    """503: the answer was lost inside the server; the outcome is unknown."""
    ERROR = "request_timeout"


class InternalError(ChargeonceError):
    """500: a bug; the message names the server's log line. Not retried."""
    ERROR = "internal"


class MalformedJsonError(ChargeonceError):
    """400: the body is not JSON."""
    ERROR = "malformed_json"


class BadRequestError(ChargeonceError):
    """400: a broken request line or body."""
    ERROR = "bad_request"


class UnauthorizedError(ChargeonceError):
    """401: no bearer token, or an unknown one."""
    ERROR = "unauthorized"


class ForbiddenError(ChargeonceError):
    """403: a token of another role, or the route's role has no token configured."""
    ERROR = "forbidden"


class NoRouteError(ChargeonceError):
    """404: no such route."""
    ERROR = "no_route"


class MethodNotAllowedError(ChargeonceError):
    """405: the route exists, not with this method."""
    ERROR = "method_not_allowed"


class PayloadTooLargeError(ChargeonceError):
    """413: the body is larger than http-max-body."""
    ERROR = "payload_too_large"


class TooManyStreamsError(ChargeonceError):
    """503: http-max-streams event streams are open."""
    ERROR = "too_many_streams"


class NotReadyError(ChargeonceError):
    """503 of /readyz: the actors or Postgres do not answer."""
    ERROR = "not_ready"


class ChargeonceConnectionError(TransientError):
    """No answer: the connection could not be made, broke, or the request
    timed out. The outcome is unknown: retry with the same ids. Its error
    name is "connection" (the CLI's), its status 0."""
    ERROR = "connection"

    def __init__(self, message: str) -> None:
        super().__init__(self.ERROR, message, 0)


class UnexpectedResponseError(ChargeonceError):
    """An answer that is not the server's (a proxy's page?) or a field of
    another type than documented: the client and server drifted apart."""
    ERROR = "unexpected_response"

    def __init__(self, message: str, status: int) -> None:
        super().__init__(self.ERROR, message, status)


#: Every error name with a class of its own.
ERROR_CLASSES: Dict[str, Type[ChargeonceError]] = {
    cls.ERROR: cls for cls in (
        BusyError, TooLateError, InvalidStateError, AlreadyExistsError,
        AlreadyStartedError, InsufficientMessagesError, InsufficientImagesError,
        InsufficientFundsError, NotFoundError, ExpiredError, InvalidArgumentError,
        ChatBlockedError, ChatBannedError, StorageUnavailableError, OverloadedError,
        RequestTimeoutError, InternalError, MalformedJsonError, BadRequestError,
        UnauthorizedError, ForbiddenError, NoRouteError, MethodNotAllowedError,
        PayloadTooLargeError, TooManyStreamsError, NotReadyError)
}


def class_of(error: str) -> Type[ChargeonceError]:
    """The class of error name `error`; ChargeonceError for an unknown name."""
    return ERROR_CLASSES.get(error, ChargeonceError)


def from_response(status: int, body: bytes, headers: Mapping[str, str]) -> ChargeonceError:
    """The exception an answer with a status of 400 or more stands for."""
    try:
        decoded = json.loads(body)
    except ValueError:
        decoded = None
    if not isinstance(decoded, dict) or not isinstance(decoded.get("error"), str):
        text = body[:200].decode("utf-8", "replace").strip()
        return UnexpectedResponseError(f"HTTP {status} without an error object: {text}", status)
    retry_after_text = headers.get("retry-after")
    retry_after = int(retry_after_text) if retry_after_text and retry_after_text.isdigit() else None
    message = decoded.get("message")
    name = decoded["error"]
    cls = class_of(name)
    return cls(name, message if isinstance(message, str) else "", status, retry_after)
