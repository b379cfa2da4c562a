# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

import os
import secrets
import sys
from dataclasses import dataclass

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@dataclass(frozen=True)
class Server:
    url: str
    gateway: str
    worker: str
    admin: str


@pytest.fixture(scope="session")
def server() -> Server:
    """The real server tests/clients/python.sh started (with
    --queue-notice-delay=1s --lease-duration=3s --sweep-interval=1s)."""
    names = ["CHARGEONCE_TEST_URL", "CHARGEONCE_TEST_GATEWAY_TOKEN",
             "CHARGEONCE_TEST_WORKER_TOKEN", "CHARGEONCE_TEST_ADMIN_TOKEN"]
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        # Never a skip: a run without a server must not look green.
        pytest.fail(f"integration tests need a server: {', '.join(missing)} unset "
                    "(tests/clients/python.sh sets them)")
    return Server(*(os.environ[n] for n in names))


@pytest.fixture
def chat() -> int:
    """A random 12-digit chat id, so reruns and other suites never collide."""
    return 100_000_000_000 + secrets.randbelow(900_000_000_000)
