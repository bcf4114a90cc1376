"""Faults the replay injects: every replay given a fault injects it, whoever else was given it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import ors_lab as ol


def test_one_fault_list_serves_every_replay_given_it(tmp_path: Path, ors_sdk_server: Any) -> None:
    """Two replays given the same Fault objects both inject the fault: an engine does not use up its caller's faults."""
    path = tmp_path / "echo.parquet"
    with ol.Recorder(path) as rec, ol.Client(ors_sdk_server.url, recorder=rec) as client:
        with client.environment("echo").session(split="dev", index=0) as session:
            session.call("echo", {"text": "hi"})
    faults = [ol.Fault("malformed")]
    for _ in range(2):
        with ol.Client("http://replay.invalid", transport=ol.ReplayTransport(path, faults=faults)) as client:
            with client.environment("echo").session(split="dev", index=0) as session:
                with pytest.raises(ol.MalformedStreamError):
                    session.call("echo", {"text": "hi"})
