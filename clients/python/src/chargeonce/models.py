# SPDX-License-Identifier: Apache-2.0
"""The API's answers as typed, immutable objects (the JSON fields of
docs/clients.md, same names)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Mapping, Optional

from . import _json as j

#: The statuses of a job that still holds its price.
ACTIVE_STATUSES = ("queued", "in_progress", "outcome_unknown")


@dataclass(frozen=True)
class Pockets:
    """Amounts by pocket: the three built-in ones always (0 when the answer
    lacks them), and in `all` every pocket the server named, the catalog's
    own ones included."""
    daily_messages: int
    daily_images: int
    balance: int
    all: Dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, x: Mapping[str, Any]) -> "Pockets":
        everything = j.amounts({"pockets": x}, "pockets")
        return cls(everything.get("daily_messages", 0), everything.get("daily_images", 0),
                   everything.get("balance", 0), everything)

    def get(self, name: str) -> int:
        """The amount of pocket `name`; 0 for one the answer did not name."""
        return self.all.get(name, 0)


@dataclass(frozen=True)
class Reservation:
    """A job's hold on a chat's pockets (reserve, cancel, start, heartbeat,
    fail, uncertain)."""
    #: Name it to start, commit or fail the job.
    id: int
    chat: int
    kind: str
    #: queued or in_progress while active; committed, failed, cancelled,
    #: released; outcome_unknown.
    status: str
    #: The queue the chat's plan chose: dispatch the job there.
    queue: str
    held: Pockets
    #: The idempotency key: the caller's, or the client's own "auto:…" one.
    request_id: str
    created_at: datetime
    #: When the lease ends unless a heartbeat renews it; None before the first.
    lease_expires_at: Optional[datetime]
    #: The chat's slot it occupies; -1: none (outcome_unknown).
    slot: int
    ended_at: Optional[datetime]
    units: int
    #: The user cancelled the started job: stop, then fail or commit what was done.
    cancel_requested: bool
    #: The chat's window the hold was taken in.
    window: int
    provider_ref: Optional[str] = None
    uncertain_at: Optional[datetime] = None

    @classmethod
    def from_json(cls, x: Mapping[str, Any]) -> "Reservation":
        return cls(
            j.integer(x, "id"), j.integer(x, "chat"), j.string(x, "kind"),
            j.string(x, "status"), j.string(x, "queue"), Pockets.from_json(j.obj(x, "held")),
            j.string(x, "request_id"), j.time(x, "created_at"),
            j.time_or_none(x, "lease_expires_at"), j.integer(x, "slot"),
            j.time_or_none(x, "ended_at"), j.integer(x, "units"),
            j.boolean(x, "cancel_requested"), j.integer(x, "window"),
            j.string_or_none(x, "provider_ref"), j.time_or_none(x, "uncertain_at"))

    @property
    def active(self) -> bool:
        """True while the job holds a slot or its outcome is unknown."""
        return self.status in ACTIVE_STATUSES


@dataclass(frozen=True)
class ChatStatus:
    """A chat's pockets, plan, flags, limit and active jobs."""
    chat: int
    daily_messages: int
    daily_images: int
    balance: int
    #: Every pocket of the server's catalog, by name.
    pockets: Dict[str, int]
    plan: str
    premium: bool
    premium_until: Optional[datetime]
    started: bool
    blocked: bool
    banned: bool
    #: The current window: 0 when registered, one more at every refill.
    window: int
    window_started_at: Optional[datetime]
    last_activity_at: Optional[datetime]
    #: The oldest active job, or None.
    reservation: Optional[Reservation]
    max_active_jobs: int
    #: What the active holds take from the current pockets.
    held: Pockets
    #: The pockets less what is held.
    available: Pockets
    #: Every active job, oldest first.
    reservations: List[Reservation]
    #: The grants with credits left, in spending order (none from a server
    #: before credit grants).
    grants: List["Grant"] = field(default_factory=list)
    #: balance_low comes when the available balance falls below this: the
    #: chat's own threshold, else the server's; 0: never.
    balance_low_threshold: int = 0

    @classmethod
    def from_json(cls, x: Mapping[str, Any]) -> "ChatStatus":
        active = j.obj_or_none(x, "reservation")
        return cls(
            j.integer(x, "chat"), j.integer(x, "daily_messages"), j.integer(x, "daily_images"),
            j.integer(x, "balance"), j.amounts(x, "pockets"), j.string(x, "plan"),
            j.boolean(x, "premium"), j.time_or_none(x, "premium_until"),
            j.boolean(x, "started"), j.boolean(x, "blocked"), j.boolean(x, "banned"),
            j.integer(x, "window"), j.time_or_none(x, "window_started_at"),
            j.time_or_none(x, "last_activity_at"),
            None if active is None else Reservation.from_json(active),
            j.integer(x, "max_active_jobs"), Pockets.from_json(j.obj(x, "held")),
            Pockets.from_json(j.obj(x, "available")),
            [Reservation.from_json(r) for r in j.array(x, "reservations")],
            [Grant.from_json(g) for g in (j.array_or_none(x, "grants") or [])],
            j.integer_or_none(x, "balance_low_threshold") or 0)


@dataclass(frozen=True)
class Receipt:
    """What a commit charged; a retried commit answers the first receipt."""
    reservation: int
    chat: int
    kind: str
    charged: Pockets
    committed_at: datetime
    #: The units charged: the hold's, or fewer.
    units: int
    #: What a commit of fewer units than held gave back.
    released: Pockets
    #: The window whose daily pockets paid: the hold's, also after a refill.
    window: int

    @classmethod
    def from_json(cls, x: Mapping[str, Any]) -> "Receipt":
        return cls(
            j.integer(x, "reservation"), j.integer(x, "chat"), j.string(x, "kind"),
            Pockets.from_json(j.obj(x, "charged")), j.time(x, "committed_at"),
            j.integer(x, "units"), Pockets.from_json(j.obj(x, "released")),
            j.integer(x, "window"))


@dataclass(frozen=True)
class Resolution:
    """How a job of unknown outcome was resolved; a retry answers the first."""
    reservation: int
    chat: int
    kind: str
    #: succeeded (charged like a commit) or failed (nothing charged).
    outcome: str
    charged: Pockets
    released: Pockets
    units: int
    resolved_at: datetime
    provider_ref: str
    window: int

    @classmethod
    def from_json(cls, x: Mapping[str, Any]) -> "Resolution":
        return cls(
            j.integer(x, "reservation"), j.integer(x, "chat"), j.string(x, "kind"),
            j.string(x, "outcome"), Pockets.from_json(j.obj(x, "charged")),
            Pockets.from_json(j.obj(x, "released")), j.integer(x, "units"),
            j.time(x, "resolved_at"), j.string(x, "provider_ref"), j.integer(x, "window"))


@dataclass(frozen=True)
class TopUp:
    """A purchase credited once per payment id, and the grant it made; a
    retry answers the first. An answer of a server before grants (no
    grant_id, source, priority, expires_at, expires_in_ms) reads as a
    purchase of priority 100 that never expires."""
    chat: int
    payment_id: str
    credits: int
    purchased_at: datetime
    #: None: a top-up made before grants, retried (or a server before them).
    grant_id: Optional[int] = None
    #: purchase, promo or admin.
    source: str = "purchase"
    #: Lower spends first.
    priority: int = 100
    #: None: never.
    expires_at: Optional[datetime] = None
    #: As the top-up gave it; None: not relative.
    expires_in_ms: Optional[int] = None

    @classmethod
    def from_json(cls, x: Mapping[str, Any]) -> "TopUp":
        return cls(j.integer(x, "chat"), j.string(x, "payment_id"),
                   j.integer(x, "credits"), j.time(x, "purchased_at"),
                   j.integer_or_none(x, "grant_id"),
                   j.string(x, "source") if "source" in x else "purchase",
                   j.integer(x, "priority") if "priority" in x else 100,
                   j.time_or_none(x, "expires_at"), j.integer_or_none(x, "expires_in_ms"))


@dataclass(frozen=True)
class Grant:
    """One credit grant of a chat's balance, as a void answers it (a second
    void answers the same grant, nothing changed) and status lists it."""
    #: A top-up's grant_id.
    id: int
    chat: int
    #: purchase, promo or admin.
    source: str
    #: What it granted.
    credits: int
    #: credits - charged - expired - voided; held credits are still in it.
    left: int
    #: What open holds hold of it.
    held: int
    #: Lower spends first.
    priority: int
    #: None: never.
    expires_at: Optional[datetime]
    #: The top-up's that made it; None: not a top-up's (an opening balance).
    payment_id: Optional[str]
    created_at: datetime
    #: When its unheld credits expired; None: they did not.
    expired_at: Optional[datetime]
    #: None: not voided.
    voided_at: Optional[datetime]
    #: It pays nothing new: it expired (written or not) before any void.
    expired: bool = False
    #: It pays nothing new: it was voided before it expired.
    voided: bool = False

    @classmethod
    def from_json(cls, x: Mapping[str, Any]) -> "Grant":
        return cls(j.integer(x, "id"), j.integer(x, "chat"), j.string(x, "source"),
                   j.integer(x, "credits"), j.integer(x, "left"), j.integer(x, "held"),
                   j.integer(x, "priority"), j.time_or_none(x, "expires_at"),
                   j.string_or_none(x, "payment_id"), j.time(x, "created_at"),
                   j.time_or_none(x, "expired_at"), j.time_or_none(x, "voided_at"),
                   bool(j.boolean_or_none(x, "expired")), bool(j.boolean_or_none(x, "voided")))


@dataclass(frozen=True)
class UnresolvedPage:
    """The jobs of unknown outcome of every chat, by id (for reconcilers)."""
    reservations: List[Reservation]
    #: The next page's `after`; None on an empty page.
    next_after: Optional[int]

    @classmethod
    def from_json(cls, x: Mapping[str, Any]) -> "UnresolvedPage":
        return cls([Reservation.from_json(r) for r in j.array(x, "reservations")],
                   j.integer_or_none(x, "next_after"))


@dataclass(frozen=True)
class HistoryEntry:
    """One line of a chat's history: a ledger row (cause commit, top_up,
    refill or admin) or a reservation that did not end in a commit (cause
    reservation). Fields a cause does not have are None."""
    at: datetime
    cause: str
    detail: str
    window: Optional[int] = None
    ledger_id: Optional[int] = None
    #: Ledger rows: the signed change of each pocket it changed.
    change: Optional[Dict[str, int]] = None
    after: Optional[Pockets] = None
    reservation: Optional[int] = None
    kind: Optional[str] = None
    request_id: Optional[str] = None
    payment_id: Optional[str] = None
    units: Optional[int] = None
    released: Optional[Pockets] = None
    status: Optional[str] = None
    held: Optional[Pockets] = None
    created_at: Optional[datetime] = None
    #: An active reservation: when the sweep releases it.
    deadline: Optional[datetime] = None
    cancel_requested: Optional[bool] = None
    #: The balance's grants it concerns, grant id -> credits, in spending
    #: order: what a commit charged each, the grant a top-up made or an
    #: expire/void ended, what an active hold holds of each ({} from a
    #: server before grants).
    grants: Dict[int, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, x: Mapping[str, Any]) -> "HistoryEntry":
        def pockets(key: str) -> Optional[Pockets]:
            v = j.obj_or_none(x, key)
            return None if v is None else Pockets.from_json(v)
        return cls(
            j.time(x, "at"), j.string(x, "cause"), j.string(x, "detail"),
            j.integer_or_none(x, "window"), j.integer_or_none(x, "ledger_id"),
            None if x.get("change") is None else j.amounts(x, "change"), pockets("after"),
            j.integer_or_none(x, "reservation"), j.string_or_none(x, "kind"),
            j.string_or_none(x, "request_id"), j.string_or_none(x, "payment_id"),
            j.integer_or_none(x, "units"), pockets("released"), j.string_or_none(x, "status"),
            pockets("held"), j.time_or_none(x, "created_at"), j.time_or_none(x, "deadline"),
            j.boolean_or_none(x, "cancel_requested"),
            {j.integer(g, "grant"): j.integer(g, "credits")
             for g in (j.array_or_none(x, "grants") or [])})


@dataclass(frozen=True)
class HistoryPage:
    """One page of a chat's history, newest first."""
    chat: int
    entries: List[HistoryEntry]
    #: The next page's `before`; None on the last.
    next_before: Optional[int]
    #: More than 1,000 reservations between two ledger rows: the oldest left out.
    truncated: bool

    @classmethod
    def from_json(cls, x: Mapping[str, Any]) -> "HistoryPage":
        return cls(j.integer(x, "chat"), [HistoryEntry.from_json(e) for e in j.array(x, "entries")],
                   j.integer_or_none(x, "next_before"), j.boolean(x, "truncated"))


@dataclass(frozen=True)
class Explanation:
    """The support view: status, plan and why, next refill, deadlines, the
    last 10 history entries."""
    chat: int
    status: ChatStatus
    plan: str
    plan_reason: str
    window_started_at: Optional[datetime]
    #: None: no window is open, the next activity opens one.
    next_refill_at: Optional[datetime]
    refill_interval_ms: int
    #: Each active job's deadline, by reservation id.
    deadlines: Dict[int, Optional[datetime]]
    history: List[HistoryEntry]

    @classmethod
    def from_json(cls, x: Mapping[str, Any]) -> "Explanation":
        by_id = j.obj(x, "deadlines")
        return cls(
            j.integer(x, "chat"), ChatStatus.from_json(j.obj(x, "status")), j.string(x, "plan"),
            j.string(x, "plan_reason"), j.time_or_none(x, "window_started_at"),
            j.time_or_none(x, "next_refill_at"), j.integer(x, "refill_interval_ms"),
            {int(k): j.time_or_none(by_id, k) for k in by_id},
            [HistoryEntry.from_json(e) for e in j.array(x, "history")])


@dataclass(frozen=True)
class Event:
    """One event of the stream (GET /v1/events). The durable ones
    (reservation_released, cancel_requested, reconcile_needed,
    limits_refilled, credits_expired, credits_expiring, balance_low) carry
    an `event_id`: store the last one handled and resume after it.
    queue_notice has none (a timer, sent at most once); overflow and
    subscription_ended end the stream. An event this version does not know
    comes as it is (its name and `data`): skip it, do not stop."""
    event: str
    chat: Optional[int]
    reservation: Optional[int]
    event_id: Optional[int]
    #: reservation_released: lease_expired, sweep_timeout, …
    reason: Optional[str]
    #: reconcile_needed: the key the worker gave its provider.
    provider_ref: Optional[str]
    #: subscription_ended: the last event the server sent.
    last_event_id: Optional[int]
    #: The whole JSON object.
    data: Dict[str, Any]
    #: credits_expired, credits_expiring: the grant.
    grant: Optional[int] = None
    #: credits_expired: the credits that left the balance (those jobs still
    #: hold expire when the jobs end, unless charged); credits_expiring:
    #: what the grant has left.
    credits: Optional[int] = None
    #: credits_expiring: when the grant expires.
    expires_at: Optional[datetime] = None
    #: balance_low: the available balance after the fall, the threshold it
    #: fell below, and why: reserve (then `reservation` is the job), expire
    #: or void.
    available: Optional[int] = None
    threshold: Optional[int] = None
    cause: Optional[str] = None

    @classmethod
    def from_frame(cls, name: str, data: Mapping[str, Any], frame_id: Optional[str]) -> "Event":
        event_id = j.integer_or_none(data, "event_id")
        if event_id is None and frame_id is not None and frame_id.isdigit():
            event_id = int(frame_id)
        return cls(name or j.string(data, "event"), j.integer_or_none(data, "chat"),
                   j.integer_or_none(data, "reservation"), event_id,
                   j.string_or_none(data, "reason"), j.string_or_none(data, "provider_ref"),
                   j.integer_or_none(data, "last_event_id"), dict(data),
                   j.integer_or_none(data, "grant"), j.integer_or_none(data, "credits"),
                   j.time_or_none(data, "expires_at"), j.integer_or_none(data, "available"),
                   j.integer_or_none(data, "threshold"), j.string_or_none(data, "cause"))

    @property
    def ends_stream(self) -> bool:
        """True for the events after which the server closes the stream."""
        return self.event in ("overflow", "subscription_ended")
