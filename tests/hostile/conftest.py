"""The `hostile_server` fixture: a fresh `HostileServer` (tests/hostile/server.py) per test, on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.hostile.server import HostileServer


@pytest.fixture
def hostile_server() -> Iterator[HostileServer]:
    """A started HostileServer that answers normally until the test scripts it; stopped after the test."""
    with HostileServer() as server:
        yield server
