# SPDX-License-Identifier: Apache-2.0
"""How often and how long the client waits before trying a retry-safe
operation again after a transient error."""
from __future__ import annotations

import asyncio
import random as _random
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Optional

from .errors import ChargeonceError, TransientError


@dataclass(frozen=True)
class RetryPolicy:
    """At most `max_attempts` tries in all; the n-th retry after
    `base_delay` × 2^(n-1) seconds (at most `max_delay`), less up to `jitter`
    of it at random so that clients that failed together do not retry
    together, and never before the server's Retry-After (bounded by
    `max_delay` too). `sleep`, `async_sleep` and `random` are injectable so that tests wait
    for nothing."""
    max_attempts: int = 5
    base_delay: float = 0.1
    max_delay: float = 2.0
    jitter: float = 0.5
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    #: What AsyncClient awaits instead of `sleep`.
    async_sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, compare=False)
    random: Callable[[], float] = field(default=_random.random, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not 0 <= self.base_delay <= self.max_delay:
            raise ValueError("need 0 <= base_delay <= max_delay")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be in [0, 1]")

    @classmethod
    def never(cls) -> "RetryPolicy":
        """A policy that never retries."""
        return cls(max_attempts=1)

    def should_retry(self, error: ChargeonceError, attempt: int) -> bool:
        """True if try number `attempt` (1 for the first) failed with an error worth another try."""
        return isinstance(error, TransientError) and attempt < self.max_attempts

    def delay(self, retry: int, retry_after: Optional[int] = None) -> float:
        """Seconds to wait before retry number `retry` (1 for the first)."""
        backoff = min(self.max_delay, self.base_delay * 2 ** (retry - 1))
        backoff *= 1 - self.jitter * self.random()
        return max(backoff, min(float(retry_after or 0), self.max_delay))

    def wait(self, retry: int, retry_after: Optional[int] = None) -> float:
        """Waits before retry number `retry`; returns how long."""
        seconds = self.delay(retry, retry_after)
        self.sleep(seconds)
        return seconds

    async def async_wait(self, retry: int, retry_after: Optional[int] = None) -> float:
        """Awaits before retry number `retry`; returns how long."""
        seconds = self.delay(retry, retry_after)
        await self.async_sleep(seconds)
        return seconds
