"""The recording proxy: any client's traffic into the trace format, streamed through unbuffered."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import ors_lab as ol
from ors_lab.replay.proxy import serve_proxy
from tests import official
from tests.envs import common

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def official_client(sdk: str, *flags: str) -> Iterator[Callable[[str], list[Any]]]:
    """An official client's process (tests/official.py) for the block, importing its SDK once: the function yielded
    runs the scripted session against a URL, with a new client, and returns what that client got."""
    command = [sys.executable, "-m", "tests.official", sdk, "-", *flags]
    with tempfile.TemporaryFile("w+") as stderr:  # a file, not a pipe: a chatty child never blocks on it

        def errors() -> str:
            stderr.seek(0)
            return stderr.read()[-2000:]

        with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
                              cwd=ROOT) as proc:  # fmt: skip
            assert proc.stdin is not None and proc.stdout is not None

            def run(url: str) -> list[Any]:
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(url + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
                assert line, f"the official client exited {proc.wait(timeout=120)}:\n{errors()}"
                return json.loads(line)  # type: ignore[no-any-return]

            try:
                yield run
            finally:
                proc.stdin.close()  # the child ends its loop and exits
                returncode = proc.wait(timeout=120)
            assert returncode == 0, errors()


def plain(values: Any) -> list[Any]:
    return [None if pd.isna(value) else value for value in values]


@pytest.mark.parametrize(
    ("sdk", "flags"),
    [("ors-sdk", ()), ("openreward", ()), ("openreward", ("--no-variant",))],
    ids=["ors-sdk", "openreward", "openreward-redirects"],
)
def test_official_client_through_the_proxy(
    request: pytest.FixtureRequest, tmp_path: Path, sdk: str, flags: tuple[str, ...]
) -> None:
    """An official client gets the same results through the proxy, and the trace holds every call."""
    reference_server = request.getfixturevalue(f"{sdk.replace('-', '_')}_server")
    path = tmp_path / "proxy.parquet"
    with official_client(sdk, *flags) as run_official:
        direct = run_official(reference_server.url)
        with ol.Recorder(path) as rec, serve_proxy(reference_server.url, rec) as url:
            proxied = run_official(url)
    assert proxied == direct
    trace = ol.load_trace(path)
    calls = trace.calls
    assert list(calls["tool"]) == [name for name, _ in official.CALLS]
    outcomes = direct[3:]
    assert plain(calls["reward"]) == [o.get("reward") for o in outcomes]
    assert plain(calls["finished"]) == [o.get("finished", False) for o in outcomes]
    assert plain(calls["ok"]) == ["raised" not in o for o in outcomes]
    events = trace.events
    for call in calls["call"]:
        names = list(events[(events["call"] == call) & (events["kind"] == "event")]["event"])
        assert names[0] == "task_id"
        assert names[-1] == "end"
    sessions = trace.sessions
    lab = sessions[sessions["environment"] == "lab"]
    assert len(lab) == 1
    assert lab.iloc[0]["calls"] == len(official.CALLS)
    assert lab.iloc[0]["closed"] is not None
    if flags:
        assert (events["status"] == 308).sum() >= 1  # the redirects went back to the client


async def test_pings_stream_through_unbuffered(quick_ping_ors_sdk_server: Any, tmp_path: Path) -> None:
    """A ping reaches the client through the proxy when the server sends it, not at the end."""
    seen: list[tuple[str, float]] = []
    ping_s = common.QUICK_PING_S

    def sink(event: Any) -> None:
        seen.append((event.kind, time.monotonic()))

    with ol.Recorder(tmp_path / "proxy.parquet") as rec, serve_proxy(quick_ping_ors_sdk_server.url, rec) as url:
        async with ol.AsyncClient(url, recorder=sink) as client:
            async with client.environment("lab").session(split="test", index=0) as session:
                started = time.monotonic()
                result = await session.call("slow", {"seconds": ping_s + 1.5})
    assert result.text == "slept"
    ping_at = next(at for kind, at in seen if kind == "comment") - started
    end_at = next(at for kind, at in seen if kind == "result") - started
    assert ping_s - 0.5 < ping_at < ping_s + 1.0
    assert end_at > ping_s + 1.4
    trace = ol.load_trace(tmp_path / "proxy.parquet")
    assert trace.calls.loc[0, "pings"] == 1


async def test_errors_pass_through_and_are_recorded(reference_server: Any, tmp_path: Path) -> None:
    """HTTP errors reach the client as the server sent them, and the trace keeps them."""
    path = tmp_path / "proxy.parquet"
    with ol.Recorder(path) as rec, serve_proxy(reference_server.url, rec) as url:
        async with ol.AsyncClient(url) as client:
            with pytest.raises(ol.ServerError) as caught:
                await client.environment("lab").tasks("nope")
            async with client.environment("lab").session(split="test", index=0) as session:
                with pytest.raises(ol.ToolError):
                    await session.call("crash")
    assert (caught.value.status_code, caught.value.detail) == (400, "Invalid split")
    events = ol.load_trace(path).events
    assert 400 in set(events["status"].dropna())
    assert list(events[events["kind"] == "call_error"]["tool"]) == ["crash"]


def test_upstream_down_is_a_502(tmp_path: Path) -> None:
    """With nothing listening upstream the proxy answers 502 and records the failure."""
    path = tmp_path / "proxy.parquet"
    with ol.Recorder(path) as rec, serve_proxy("http://127.0.0.1:9", rec) as url:
        client = ol.Client(url, retry=ol.RetryPolicy(attempts=1))
        with pytest.raises(ol.ServerError) as caught:
            client.environments()
        client.close()
    assert caught.value.status_code == 502
    events = ol.load_trace(path).events
    assert "ConnectError" in events[events["kind"] == "disconnect"].iloc[0]["error"]


@contextlib.contextmanager
def _proxy_command(upstream: str, out: Path, *options: str) -> Iterator[tuple[str, list[str]]]:
    """Run `ors-lab proxy`; yield its URL, and a list that gets the rest of its output once SIGTERM stopped it."""
    cmd = [sys.executable, "-m", "ors_lab.cli", "proxy", upstream, "--out", str(out), *options]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    rest: list[str] = []
    with proc.stdout:
        try:
            line = proc.stdout.readline()
            url = re.search(r"at (http://127\.0\.0\.1:\d+)", line)
            assert url, line
            yield url.group(1), rest
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
            rest.append(proc.stdout.read())
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_proxy_command_records_until_terminated(ors_sdk_server: Any, tmp_path: Path) -> None:
    """`ors-lab proxy` prints its URL, records a session, and writes the trace on SIGTERM."""
    out = tmp_path / "cli.parquet"
    with _proxy_command(ors_sdk_server.url, out) as (url, rest):
        with ol.Client(url) as client:
            with client.environment("echo").session(split="dev", index=0) as session:
                session.call("echo", {"text": "via the command line"})
    assert "trace written" in rest[0]
    trace = ol.load_trace(out)
    assert not trace.partial
    assert list(trace.calls["tool"]) == ["echo"]
    assert trace.episodes.loc[0, "total_reward"] == 0.5


def test_proxy_command_refuses_to_overwrite(ors_sdk_server: Any, tmp_path: Path) -> None:
    """`ors-lab proxy --out` an existing trace exits 1 and says why."""
    out = tmp_path / "exists.parquet"
    out.write_bytes(b"")
    cmd = [sys.executable, "-m", "ors_lab.cli", "proxy", ors_sdk_server.url, "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
    assert done.returncode == 1
    assert "already holds a trace" in done.stderr


def _record_through_the_proxy_command(upstream: str, out: Path, *options: str, headers: dict[str, str],
                                      query: str) -> str:  # fmt: skip
    """Run `ors-lab proxy` with `options`, send one GET through it, stop it; the trace's events as one text."""
    with _proxy_command(upstream, out, *options) as (url, _):
        request = urllib.request.Request(f"{url}/list_environments?{query}", headers=headers)
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
    events = ol.load_trace(out).events
    assert (events["kind"] == "request").sum() == 1
    return events.astype(str).to_csv()


def test_proxy_command_redacts_the_patterns_given(ors_sdk_server: Any, tmp_path: Path) -> None:
    """`ors-lab proxy --redact-pattern` takes each pattern's matches out of what it records."""
    text = _record_through_the_proxy_command(
        ors_sdk_server.url, tmp_path / "out.parquet", "--redact-pattern", "sk-[a-z0-9]+", "--redact-pattern", "pw=\\w+",
        headers={"X-Note": "key sk-abc123 here"}, query="pw=hunter2&plain=visible",
    )  # fmt: skip
    assert "sk-abc123" not in text and "hunter2" not in text
    assert "<redacted>" in text and "visible" in text


def test_proxy_command_redacts_the_names_given(ors_sdk_server: Any, tmp_path: Path) -> None:
    """`ors-lab proxy --redact NAME` redacts that header and query parameter, whatever their case."""
    text = _record_through_the_proxy_command(
        ors_sdk_server.url, tmp_path / "out.parquet", "--redact", "x-house-note", "--redact", "HOUSE_FIELD",
        headers={"X-House-Note": "hunter2"}, query="House_Field=hunter3&plain=visible",
    )  # fmt: skip
    assert "hunter2" not in text and "hunter3" not in text
    assert "visible" in text
