# SPDX-License-Identifier: Apache-2.0
"""Every route of the HTTP API with the role whose token it needs and
whether a repeat is safe."""
from __future__ import annotations

import enum
from typing import Optional


class Operation(enum.Enum):
    TOUCH = "touch"
    RESERVE = "reserve"
    CANCEL = "cancel"
    CANCEL_RESERVATION = "cancel-reservation"
    STATUS = "status"
    EVENTS = "events"
    START = "start"
    HEARTBEAT = "heartbeat"
    COMMIT = "commit"
    FAIL = "fail"
    UNCERTAIN = "uncertain"
    RESOLVE = "resolve"
    UNRESOLVED = "unresolved"
    CREATE_CHAT = "create-chat"
    TOP_UP = "top-up"
    VOID_GRANT = "void-grant"
    SET_PREMIUM = "set-premium"
    SET_FLAGS = "set-flags"
    SET_LIMITS = "set-limits"
    HISTORY = "history"
    EXPLAIN = "explain"
    HEALTHZ = "healthz"
    READYZ = "readyz"
    METRICS = "metrics"

    @property
    def role(self) -> Optional[str]:
        """gateway, worker or admin: whose token the route needs; None: none."""
        return _ROLES.get(self)

    @property
    def retry_safe(self) -> bool:
        """True if sending it again after an unknown outcome (no answer,
        storage_unavailable, request_timeout) or a refusal that changed
        nothing (overloaded) answers and changes what sending it once would:
        exactly the set docs/clients.md names."""
        return self in _RETRY_SAFE


_ROLES = {
    **{op: "gateway" for op in (Operation.TOUCH, Operation.RESERVE, Operation.CANCEL,
                                Operation.CANCEL_RESERVATION, Operation.STATUS, Operation.EVENTS)},
    **{op: "worker" for op in (Operation.START, Operation.HEARTBEAT, Operation.COMMIT,
                               Operation.FAIL, Operation.UNCERTAIN, Operation.RESOLVE,
                               Operation.UNRESOLVED)},
    **{op: "admin" for op in (Operation.CREATE_CHAT, Operation.TOP_UP, Operation.VOID_GRANT,
                              Operation.SET_PREMIUM, Operation.SET_FLAGS, Operation.SET_LIMITS,
                              Operation.HISTORY, Operation.EXPLAIN)},
}

_RETRY_SAFE = frozenset({
    # Reads.
    Operation.STATUS, Operation.UNRESOLVED, Operation.HISTORY, Operation.EXPLAIN,
    # A repeat finds the chat registered and its window just opened.
    Operation.TOUCH,
    # By its request id (the client makes one when the caller gave none): a
    # repeat returns the job the first try made.
    Operation.RESERVE,
    # By reservation: a repeat returns the same reservation, the first
    # receipt or resolution, or finds the job ended; the worker identity, the
    # same on every try, is the one the start recorded.
    Operation.START, Operation.HEARTBEAT, Operation.COMMIT, Operation.FAIL,
    Operation.UNCERTAIN, Operation.RESOLVE,
    # By payment id: a repeat returns the first receipt.
    Operation.TOP_UP,
    # By grant (or the payment id that made it): a repeat answers the voided
    # grant again and voids nothing more.
    Operation.VOID_GRANT,
    # Absolute values: a repeat sets the same ones.
    Operation.SET_PREMIUM, Operation.SET_FLAGS, Operation.SET_LIMITS,
})
# Never repeated: a bare cancel names the chat, not a job (repeated after the
# first took effect it could cancel the user's next job; a named one would
# answer not_found for the job it did cancel); create-chat would answer
# already_exists, hiding that this call created it; the event stream is
# reopened after the last id instead; probes report what they see, now.
