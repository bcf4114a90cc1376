"""Start an ORS reference server (ors-sdk or openreward) in a subprocess on 127.0.0.1.

    with serve() as server:                      # the bundled demo environments, ors-sdk server
        server.url                               # "http://127.0.0.1:PORT"
    with serve("tests.envs.openreward_envs:ENVIRONMENTS", sdk="openreward") as server: ...
    server = start()                             # the same, without a block (a notebook's first cell)
    server.stop()                                # ... and its last

The child is this module run as a script, which imports the environment list, builds the SDK's
`Server` and calls `.run(host="127.0.0.1", port=PORT)`:

    python -m ors_lab.demo.launch ors_lab.demo.env:ENVIRONMENTS --sdk ors-sdk --port 8080

`serve()` also passes `--parent-pid` so that the child stops by itself if its parent dies without
stopping it. Neither SDK has a CLI that serves an environment, hence this module (ors-protocol.md
section 1).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import importlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, get_args

__all__ = ["DEFAULT_ENVIRONMENTS", "HOST", "SDKS", "ServerProcess", "load_environments", "main", "serve", "start"]

Sdk = Literal["ors-sdk", "openreward"]
SDKS: tuple[str, ...] = get_args(Sdk)
HOST = "127.0.0.1"
DEFAULT_ENVIRONMENTS = "ors_lab.demo.env:ENVIRONMENTS"

# Set in every child unless the caller's `env` says otherwise: no PyPI version-check thread
# (openreward), and quiet SDK loggers (ors-sdk reads ORS_LOG_LEVEL/LOG_LEVEL, openreward
# OPENREWARD_LOG_LEVEL/LOG_LEVEL).
CHILD_ENV_DEFAULTS: Mapping[str, str] = {
    "OPENREWARD_DISABLE_UPDATE_CHECK": "1",
    "LOG_LEVEL": "WARNING",
    "ORS_LOG_LEVEL": "WARNING",
    "OPENREWARD_LOG_LEVEL": "WARNING",
}

_PORT_ATTEMPTS = 3  # a free port picked by us can be taken before the child binds it
_POLL_INTERVAL = 0.05
_TERM_GRACE = 5.0
_PARENT_POLL = 0.5
_TAIL_CHARS = 3000
_PORT_IN_USE_MARKERS = ("address already in use", "errno 98")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class ServerProcess:
    """A running reference server: its base URL, port, SDK, child pid and log file.

    The log file (the child's stdout and stderr) exists until the server stops (the end of the
    `serve()` block, or `stop()`).
    """

    url: str
    port: int
    sdk: str
    pid: int
    log_path: Path
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    def stop(self) -> None:
        """Stop the child (SIGTERM to its group, SIGKILL after 5 s) and remove its log; safe to call twice."""
        try:
            if self._proc is not None:
                _stop(self._proc)
        finally:
            self.log_path.unlink(missing_ok=True)


class _Runnable(Protocol):
    """What both SDKs' `Server` objects offer: a blocking `run(host, port)`."""

    def run(self, host: str = ..., port: int = ...) -> None:
        """Serve until the process is told to stop."""


@contextlib.contextmanager
def serve(
    environments: str = DEFAULT_ENVIRONMENTS,
    *,
    sdk: Sdk = "ors-sdk",
    port: int = 0,
    startup_timeout: float = 30.0,
    env: Mapping[str, str] | None = None,
) -> Iterator[ServerProcess]:
    """Run an ORS reference server on 127.0.0.1 for the duration of the block.

    `environments` is "module:attribute" naming a list of Environment classes; the first is the
    server's default env. `port=0` picks a free port (and retries with another one, up to 3
    times, if it was taken before the child could bind it). The block is entered once
    `GET /health` answers 200; a child that exits or does not answer within `startup_timeout`
    seconds raises RuntimeError with the tail of its output. `env` adds to (and overrides) the
    child's environment. On exit the child's process group gets SIGTERM, then SIGKILL after 5 s.
    """
    server = start(environments, sdk=sdk, port=port, startup_timeout=startup_timeout, env=env)
    try:
        yield server
    finally:
        server.stop()


def start(
    environments: str = DEFAULT_ENVIRONMENTS,
    *,
    sdk: Sdk = "ors-sdk",
    port: int = 0,
    startup_timeout: float = 30.0,
    env: Mapping[str, str] | None = None,
) -> ServerProcess:
    """Start a server as `serve()` does and return it running; `stop()` it when done.

    For code with no block to put it in (a notebook: `server = start()` in the first cell,
    `server.stop()` in the last). The child also stops by itself when this process ends.
    """
    _check_spec(environments)
    if sdk not in SDKS:
        raise ValueError(f"unknown sdk {sdk!r}; valid options are {', '.join(map(repr, SDKS))}")
    if not 0 <= port <= 65535:
        raise ValueError(f"port must be 0 (pick a free one) or 1-65535, not {port}")
    return _start(environments, sdk, port, startup_timeout, _child_environment(env))


def load_environments(spec: str) -> list[type]:
    """Import "module:attribute" and return it as a list of classes (the child's first step)."""
    module_name, attribute = _check_spec(spec)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"cannot import module {module_name!r} (from {spec!r}): {exc}") from exc
    target: object = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise AttributeError(f"{module_name!r} has no attribute {attribute!r} (from {spec!r})") from exc
    if not isinstance(target, list | tuple) or not target:
        raise TypeError(f"{spec!r} must name a non-empty list of Environment classes, not {target!r}")
    not_classes = [item for item in target if not isinstance(item, type)]
    if not_classes:
        raise TypeError(f"{spec!r} must hold Environment classes; these are not classes: {not_classes!r}")
    return list(target)


def main(argv: Sequence[str] | None = None) -> int:
    """Child entry point: import the environments, build the SDK's Server, serve on 127.0.0.1."""
    parser = argparse.ArgumentParser(
        prog="python -m ors_lab.demo.launch",
        description="Serve ORS environments with a reference server on 127.0.0.1.",
    )
    parser.add_argument("environments", help='"module:attribute" naming a list of Environment classes')
    parser.add_argument("--sdk", choices=SDKS, default="ors-sdk", help="which reference server to run")
    parser.add_argument("--port", type=int, default=8080, help="port on 127.0.0.1")
    parser.add_argument("--parent-pid", type=int, help="stop when this process stops being our parent")
    args = parser.parse_args(argv)
    if args.parent_pid is not None:
        _exit_with_parent(args.parent_pid)
    for name, value in CHILD_ENV_DEFAULTS.items():
        os.environ.setdefault(name, value)
    try:
        server = _build_server(args.sdk, load_environments(args.environments))
    except Exception as exc:
        traceback.print_exc()
        print(f"ors_lab.demo.launch: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 2
    server.run(host=HOST, port=args.port)
    return 0


def _exit_with_parent(parent_pid: int) -> None:
    """Stop this process (SIGTERM, then SIGKILL after 5 s) once `parent_pid` is no longer its parent.

    `serve()` passes its own pid, so a server outlives neither a killed test run nor a crashed kernel.
    """

    def watch() -> None:
        """Poll the parent pid; signal ourselves when we have been re-parented."""
        while os.getppid() == parent_pid:
            time.sleep(_PARENT_POLL)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(_TERM_GRACE)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="ors-lab-parent-watch", daemon=True).start()


def _check_spec(spec: str) -> tuple[str, str]:
    """Split "module:attribute", or raise ValueError saying what the form is."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(
            f"environments must be 'module:attribute' naming a list of Environment classes, "
            f"e.g. {DEFAULT_ENVIRONMENTS!r}; got {spec!r}"
        )
    return module_name, attribute


def _build_server(sdk: str, environments: list[type]) -> _Runnable:
    """Build `ors.Server` or `openreward.environments.Server` over the environment classes."""
    if sdk == "ors-sdk":
        import ors  # the reference server SDKs are optional: the one asked for, when asked

        return ors.Server(environments)
    if sdk == "openreward":
        from openreward.environments import Server  # optional, as above

        return Server(environments)  # type: ignore[no-any-return]
    raise ValueError(f"unknown sdk {sdk!r}; valid options are {', '.join(map(repr, SDKS))}")


def _child_environment(extra: Mapping[str, str] | None) -> dict[str, str]:
    """The child's environment: ours, the quiet defaults, the caller's `extra`, and PYTHONPATH.

    PYTHONPATH gains the current directory (so "tests.envs.x" specs import from the repo root)
    and the directory this `ors_lab` was imported from (so the child runs the same code).
    """
    environ = dict(os.environ)
    environ.update(CHILD_ENV_DEFAULTS)
    environ.update(extra or {})
    package_root = str(Path(__file__).resolve().parents[2])
    paths = [os.getcwd(), package_root, *environ.get("PYTHONPATH", "").split(os.pathsep)]
    environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    return environ


def _free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _start(spec: str, sdk: str, port: int, startup_timeout: float, child_env: Mapping[str, str]) -> ServerProcess:
    """Spawn the child and wait for /health, retrying on a taken port when we picked it."""
    attempts = _PORT_ATTEMPTS if port == 0 else 1
    for attempt in range(1, attempts + 1):
        chosen = port or _free_port()
        url = f"http://{HOST}:{chosen}"
        command = [sys.executable, "-m", "ors_lab.demo.launch", spec, "--sdk", sdk, "--port", str(chosen)]
        fd, log_name = tempfile.mkstemp(prefix=f"ors-lab-{sdk}-{chosen}-", suffix=".log")
        log_path = Path(log_name)
        try:
            proc = subprocess.Popen(
                [*command, "--parent-pid", str(os.getpid())],
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=subprocess.STDOUT,
                env=dict(child_env),
                start_new_session=True,  # its own process group, out of reach of the terminal's ^C
            )
        except BaseException:
            log_path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        try:
            outcome = _wait_ready(proc, url, startup_timeout)
        except BaseException:
            _stop(proc)
            log_path.unlink(missing_ok=True)
            raise
        if outcome == "ready":
            return ServerProcess(url=url, port=chosen, sdk=sdk, pid=proc.pid, log_path=log_path, _proc=proc)
        _stop(proc)
        tail = _tail(log_path)
        log_path.unlink(missing_ok=True)
        port_taken = any(marker in tail.lower() for marker in _PORT_IN_USE_MARKERS)
        if outcome == "exited" and port_taken and attempt < attempts:
            continue
        if outcome == "exited":
            what = f"exited with code {proc.returncode} before GET {url}/health answered"
            if port_taken:
                what += f" (port {chosen} was already in use; tried {attempt} port(s))"
        else:
            what = f"did not answer GET {url}/health within {startup_timeout:g} s (startup_timeout)"
        raise RuntimeError(
            f"the {sdk} server for {spec!r} {what}.\n"
            f"To watch it start by hand, run: {shlex.join(command)}\n"
            f"--- last lines of its output ---\n{tail}"
        )
    raise AssertionError("unreachable: the last attempt either returns or raises")


def _wait_ready(proc: subprocess.Popen[bytes], url: str, timeout: float) -> Literal["ready", "exited", "timeout"]:
    """Poll GET /health every 50 ms until it answers 200, the child exits, or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            return "exited"
        if _health_ok(url):
            return "ready"
        if time.monotonic() >= deadline:
            return "timeout"
        time.sleep(_POLL_INTERVAL)


def _health_ok(url: str) -> bool:
    """True if GET {url}/health answers 200 (no proxy is consulted)."""
    try:
        with _NO_PROXY.open(f"{url}/health", timeout=1.0) as response:
            return bool(response.status == 200)
    except (OSError, http.client.HTTPException):
        return False


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Send `sig` to the child's process group, if the child has not been reaped yet."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the child's group, wait 5 s, then SIGKILL; reap it even on KeyboardInterrupt."""
    try:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=_TERM_GRACE)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
    except BaseException:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
        raise


def _tail(path: Path) -> str:
    """The last few thousand characters of the child's log."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"(log {path} unreadable: {exc})"
    text = text.strip()
    if len(text) > _TAIL_CHARS:
        text = "…" + text[-_TAIL_CHARS:]
    return text or "(no output)"


if __name__ == "__main__":
    sys.exit(main())
