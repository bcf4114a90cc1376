"""serve(): a reference server in a child process on 127.0.0.1, started, checked and always stopped."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ors_lab.demo import launch
from ors_lab.demo.launch import ServerProcess, serve, start
from tests import wire
from tests.envs import common

REPO_ROOT = Path(__file__).resolve().parents[2]


def _gone(pid: int) -> bool:
    """True when no process has this pid any more, or it is a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def _wait_gone(pid: int, timeout: float) -> bool:
    """Poll until the process is gone or `timeout` seconds pass; True if it is gone."""
    deadline = time.monotonic() + timeout
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _children() -> set[int]:
    """The pids of this process's children."""
    pids: set[int] = set()
    for path in Path("/proc/self/task").glob("*/children"):
        pids.update(int(pid) for pid in path.read_text().split())
    return pids


def _listening_addresses(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net shows them) of sockets listening on `port`."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, _, hex_port = fields[1].rpartition(":")
            if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.append(address)
    return found


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 held by a listening socket for the test's duration."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_serve_answers_health_and_reaps_the_child() -> None:
    """serve() yields once /health answers 200 and leaves no process or log file behind."""
    with serve() as server:
        assert server.url == f"http://127.0.0.1:{server.port}"
        assert server.sdk == "ors-sdk"
        assert wire.get_json(server.url, "/health") == {"status": "ok"}
        assert server.log_path.exists()
        assert not _gone(server.pid)
        assert os.getpgid(server.pid) == server.pid  # its own process group
    assert _gone(server.pid)
    assert not server.log_path.exists()


def test_start_runs_until_stop_and_stop_is_idempotent() -> None:
    """start() returns a running server; stop() reaps the child and its log, and can be called again."""
    server = start()
    try:
        assert wire.get_json(server.url, "/health") == {"status": "ok"}
        assert not _gone(server.pid)
    finally:
        server.stop()
    assert _gone(server.pid)
    assert not server.log_path.exists()
    server.stop()


def test_keyboard_interrupt_still_stops_the_child() -> None:
    """A KeyboardInterrupt inside the block stops the child before it propagates."""
    with pytest.raises(KeyboardInterrupt), serve() as server:
        pid = server.pid
        raise KeyboardInterrupt
    assert _gone(pid)


def test_servers_bind_loopback_only(demo_server: ServerProcess, reference_server: ServerProcess) -> None:
    """Every server listens on 127.0.0.1 only, not on 0.0.0.0 or ::."""
    for server in (demo_server, reference_server):
        assert _listening_addresses(server.port) == ["0100007F"], server


def test_child_environment_is_quiet(demo_server: ServerProcess) -> None:
    """The child runs with the update check off and the SDK loggers at WARNING."""
    raw = Path(f"/proc/{demo_server.pid}/environ").read_bytes()
    environ = dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
    assert environ["OPENREWARD_DISABLE_UPDATE_CHECK"] == "1"
    assert environ["LOG_LEVEL"] == "WARNING"
    assert environ["ORS_LOG_LEVEL"] == "WARNING"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("tests.envs.nope:ENVIRONMENTS", "No module named 'tests.envs.nope'"),
        ("tests.envs.common:NOPE", "has no attribute 'NOPE'"),
        ("tests.envs.common:ECHO_REWARD", "must name a non-empty list of Environment classes"),
    ],
)
def test_bad_spec_raises_with_the_childs_error(spec: str, message: str) -> None:
    """A spec the child cannot load raises RuntimeError quoting the child's own error."""
    before = _children()
    with pytest.raises(RuntimeError, match="exited with code 2") as caught, serve(spec):
        pass
    assert message in str(caught.value)
    assert _children() <= before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"environments": "tests.envs.ors_sdk_envs"}, "must be 'module:attribute'"),
        ({"sdk": "nope"}, "valid options are 'ors-sdk', 'openreward'"),
        ({"port": 70000}, "port must be"),
    ],
)
def test_bad_arguments_are_refused_before_spawning(kwargs: dict[str, object], message: str) -> None:
    """Malformed specs, unknown SDKs and bad ports raise ValueError without starting anything."""
    before = _children()
    with pytest.raises(ValueError, match=message), serve(**kwargs):  # type: ignore[arg-type]
        pass
    assert _children() <= before


def test_startup_timeout_stops_the_child() -> None:
    """A server that does not answer in time raises RuntimeError and is stopped."""
    before = _children()
    with pytest.raises(RuntimeError, match=r"did not answer GET .*/health within 0 s"), serve(startup_timeout=0):
        pass
    assert _children() <= before


def test_explicit_taken_port_fails_clearly(taken_port: int) -> None:
    """An explicit port that is in use is reported, not retried."""
    with pytest.raises(RuntimeError, match=f"port {taken_port} was already in use"), serve(port=taken_port):
        pass


def test_picked_port_taken_meanwhile_is_retried(taken_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the picked free port is taken before the child binds it, serve() retries another port."""
    real_free_port = launch._free_port
    picks = iter([taken_port])
    monkeypatch.setattr(launch, "_free_port", lambda: next(picks, None) or real_free_port())
    with serve() as server:
        assert server.port != taken_port
        assert wire.get_json(server.url, "/list_environments") == ["arithmetic", "guessing"]


def test_test_envs_import_from_the_repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """With cwd at the repo root and no PYTHONPATH, a `tests.envs.*` spec loads in the child."""
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    with serve("tests.envs.ors_sdk_envs:ENVIRONMENTS") as server:
        assert wire.get_json(server.url, "/list_environments") == common.ENV_NAMES


def test_server_stops_when_its_parent_is_killed() -> None:
    """A server whose parent dies without cleaning up (SIGKILL) stops by itself."""
    script = (
        "import time\n"
        "from ors_lab.demo.launch import serve\n"
        "with serve() as server:\n"
        "    print(server.pid, server.log_path, flush=True)\n"
        "    time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=REPO_ROOT)
    with parent:
        assert parent.stdout is not None
        pid, log_path = parent.stdout.readline().decode().split()
        parent.kill()
    try:
        assert _wait_gone(int(pid), timeout=10)
    finally:
        Path(log_path).unlink(missing_ok=True)


def test_child_ignoring_sigterm_is_killed_after_the_grace_period() -> None:
    """A child that ignores SIGTERM gets SIGKILL after 5 s and is reaped."""
    script = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, start_new_session=True)
    with proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"up\n"
        started = time.monotonic()
        launch._stop(proc)
        elapsed = time.monotonic() - started
    assert proc.returncode == -signal.SIGKILL
    assert 4.5 < elapsed < 15
