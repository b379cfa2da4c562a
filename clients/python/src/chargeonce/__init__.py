# SPDX-License-Identifier: Apache-2.0
"""chargeonce's HTTP API for Python.

    from chargeonce import Client, BusyError
    client = Client("http://127.0.0.1:8080", gateway_token=..., worker_token=...)
    job = client.reserve(42, "image", request_id="msg-18-upscale")

Client is blocking and needs only the standard library; AsyncClient
(asyncio, over aiohttp) is imported on first use; the Celery integration is
chargeonce.celery_tasks.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._routes import auto_request_id
from .client import Client, EventStream
from .errors import (ERROR_CLASSES, AlreadyExistsError, AlreadyStartedError, BadRequestError,
                     BusyError, ChargeonceConnectionError, ChargeonceError, ChatBannedError,
                     ChatBlockedError, ExpiredError, ForbiddenError, InsufficientFundsError,
                     InsufficientImagesError, InsufficientMessagesError, InternalError,
                     InvalidArgumentError, InvalidStateError, MalformedJsonError,
                     MethodNotAllowedError, NoRouteError, NotFoundError, NotReadyError,
                     OverloadedError, PayloadTooLargeError, RequestTimeoutError,
                     StorageUnavailableError, TooLateError, TooManyStreamsError, TransientError,
                     UnauthorizedError, UnexpectedResponseError)
from .models import (ChatStatus, Event, Explanation, Grant, HistoryEntry, HistoryPage, Pockets,
                     Receipt, Reservation, Resolution, TopUp, UnresolvedPage)
from .operations import Operation
from .retry import RetryPolicy

if TYPE_CHECKING:
    from .aio import AsyncClient, AsyncEventStream

__version__ = "0.2.0"


def __getattr__(name: str) -> Any:
    # aiohttp only for those who use the asyncio client.
    if name in ("AsyncClient", "AsyncEventStream"):
        from . import aio
        return getattr(aio, name)
    raise AttributeError(f"module 'chargeonce' has no attribute {name!r}")


__all__ = [
    "AlreadyExistsError", "AlreadyStartedError", "AsyncClient", "AsyncEventStream",
    "BadRequestError", "BusyError", "ChargeonceConnectionError", "ChargeonceError",
    "ChatBannedError", "ChatBlockedError", "ChatStatus", "Client", "ERROR_CLASSES", "Event",
    "EventStream", "ExpiredError", "Explanation", "ForbiddenError", "Grant", "HistoryEntry",
    "HistoryPage", "InsufficientFundsError", "InsufficientImagesError",
    "InsufficientMessagesError", "InternalError", "InvalidArgumentError", "InvalidStateError",
    "MalformedJsonError", "MethodNotAllowedError", "NoRouteError", "NotFoundError",
    "NotReadyError", "Operation", "OverloadedError", "PayloadTooLargeError", "Pockets",
    "Receipt", "RequestTimeoutError", "Reservation", "Resolution", "RetryPolicy",
    "StorageUnavailableError", "TooLateError", "TooManyStreamsError", "TopUp",
    "TransientError", "UnauthorizedError", "UnexpectedResponseError", "UnresolvedPage",
    "auto_request_id",
]
