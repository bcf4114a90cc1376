"""ors_lab's pytest plugin: a test's ORS traffic replayed from a Parquet trace, or recorded into one.

Installed with ors_lab (a ``pytest11`` entry point). A test asks for the ``ors_replay`` fixture and
points any ORS client, ours or an official one, at ``ors_replay.url``::

    @pytest.mark.ors_replay(speed=0.0, faults=(), allow_repeats=False, trace=None, upstream=None)
    def test_echo(ors_replay):
        with ors_lab.Client(ors_replay.url).environment("echo").session(split="dev", index=0) as s:
            assert s.call("echo", {"text": "hi"}).text == "hi"

The marker is optional; its arguments go to ``ReplayServer`` (``speed``, ``faults``,
``allow_repeats``) or name the trace and the upstream.

**The trace** is the marker's ``trace=`` (a relative path is relative to the test file's directory),
else ``<rootdir>/recordings/<module path relative to rootdir, without .py>/<test>.parquet``, where
``<test>`` is the test's name, prefixed by its classes (``TestA.test_b``), with a parametrised id
appended after ``-`` (``test_b[x-1]`` → ``test_b-x-1``); an id with characters other than letters,
digits, ``_ . -`` has them replaced by ``_`` and gets 8 hex digits of its hash, so ids never collide.

**The record mode**: ``--ors-record-mode``, else ``$ORS_LAB_RECORD_MODE``, else ``none``:

- ``none``: replay only, and never contact the upstream. A missing trace fails the test with the
  path and the command that records it.
- ``once``: record a missing trace; replay an existing one.
- ``new_episodes``: record a missing trace. With an existing one, replay it, and send what it cannot
  answer to the upstream through the recording proxy: a ``/create`` whose task has no unclaimed
  recorded session (a new episode: then every request of that session goes upstream too), and
  stateless requests (``/tools``, ``/tasks``, ...) the trace holds no answer to. If anything went
  upstream and the test passed, the new rows are appended to the trace at teardown (their ``seq``
  and ``exchange`` numbered on from the old rows; they keep their own ``run_id`` and ``t_ns``; the
  file takes the new recording's metadata, with the servers of both). An episode already in the
  trace is never re-sent: a request that differs inside it fails with ``ReplayMismatchError``, as
  in ``none``; re-record it with ``all``. With nothing new the trace file is left untouched.
- ``all``: record every trace again.

**Recording** runs the test against ``serve_proxy(upstream, Recorder(...))``, writing a hidden
temporary trace next to the final one; at teardown it is moved into place only if the recording
closed cleanly and the test passed, so a failed run never replaces (or creates) a trace. The
upstream is the marker's ``upstream=``, else ``--ors-upstream``, else ``$ORS_LAB_UPSTREAM``;
recording without one fails the test saying so. Faults cannot be injected into a live server: a
test whose marker sets ``faults=`` always replays, whatever the mode, and needs its trace recorded
first (typically by another test, shared through ``trace=``).

**At teardown** the recorded requests a replay never asked for are listed in the terminal summary
("ors_lab replay: unplayed interactions"); with ``--ors-strict-replay`` a test that passed but left
some unplayed fails at teardown. Traces written or not saved are listed under "ors_lab record".

A problem with the setup (a missing trace, no upstream, a bad marker argument) fails the test
itself with a message saying what to do, rather than erroring in a fixture.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import shlex
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

if TYPE_CHECKING:
    from ors_lab.recording.recorder import Recorder
    from ors_lab.recording.trace import Trace
    from ors_lab.replay.engine import Answer
    from ors_lab.replay.faults import Fault

__all__ = ["MODES", "ReplayFixture", "default_trace_path"]

MODES = ("none", "once", "new_episodes", "all")
MODE_ENV = "ORS_LAB_RECORD_MODE"
UPSTREAM_ENV = "ORS_LAB_UPSTREAM"
MARKER = "ors_replay"
MARKER_ARGS = ("trace", "speed", "faults", "allow_repeats", "upstream")
MARKER_HELP = (
    f"{MARKER}(trace=None, speed=0.0, faults=(), allow_repeats=False, upstream=None): how the "
    "ors_replay fixture replays or records this test's ORS traffic (see ors_lab.pytest_plugin)"
)
MODE_HELP = (
    "none (default): replay only, a missing trace fails the test; once: record missing traces, replay "
    "existing ones; new_episodes: record missing traces; replay existing ones and record, through the "
    "upstream, the episodes (sessions) and stateless requests they lack, appending them to the trace "
    "when the test passes; all: record every trace again. Default: $ORS_LAB_RECORD_MODE, else none."
)

_MODE = pytest.StashKey[str]()
_UNPLAYED = pytest.StashKey[list[tuple[str, list[str]]]]()
_RECORDED = pytest.StashKey[list[str]]()
_PROBLEM = pytest.StashKey[str]()
_CALL_REPORT = pytest.StashKey[pytest.TestReport]()


class ReplayFixture:
    """What ``ors_replay`` yields: the ``url`` to point a client at, ``mode``, ``trace_path``, ``unplayed()``.

    ``mode`` is ``"replay"`` (the trace answers; in ``new_episodes`` mode what it lacks goes
    upstream) or ``"record"`` (a recording proxy in front of the upstream); ``record_mode`` is the
    session's ``--ors-record-mode``.
    """

    def __init__(
        self,
        url: str,
        mode: Literal["replay", "record"],
        trace_path: Path,
        record_mode: str,
        unplayed: Callable[[], list[str]] | None = None,
    ) -> None:
        self.url = url
        self.mode = mode
        self.trace_path = trace_path
        self.record_mode = record_mode
        self._unplayed = unplayed

    def __repr__(self) -> str:
        return f"ReplayFixture(mode={self.mode!r}, trace={str(self.trace_path)!r}, url={self.url or None!r})"

    def unplayed(self) -> list[str]:
        """The recorded requests not asked for so far (always empty while recording)."""
        return self._unplayed() if self._unplayed is not None else []


# -- options, marker, hooks ----------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ors_lab", "ors_lab replay and recording of ORS traffic")
    group.addoption("--ors-record-mode", choices=MODES, default=None, help=MODE_HELP)
    group.addoption(
        "--ors-upstream",
        default=None,
        metavar="URL",
        help="the live ORS server to record from (default: $ORS_LAB_UPSTREAM; the marker's upstream= wins)",
    )
    group.addoption(
        "--ors-strict-replay",
        action="store_true",
        default=False,
        help="fail, at teardown, a passed test whose replay left recorded interactions unplayed",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    mode = config.getoption("ors_record_mode") or os.environ.get(MODE_ENV) or "none"
    if mode not in MODES:
        raise pytest.UsageError(f"{MODE_ENV}={mode!r} is not a record mode; valid modes are {', '.join(MODES)}")
    config.stash[_MODE] = mode
    config.stash[_UNPLAYED] = []
    config.stash[_RECORDED] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if report.when == "call":
        item.stash[_CALL_REPORT] = report
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    problem = item.stash.get(_PROBLEM, None)
    if problem is not None:
        pytest.fail(problem, pytrace=False)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    unplayed = config.stash.get(_UNPLAYED, [])
    if unplayed:
        terminalreporter.write_sep("=", "ors_lab replay: unplayed interactions")
        for nodeid, requests in unplayed:
            terminalreporter.write_line(f"{nodeid}: {len(requests)} recorded request(s) never asked for")
            for request in requests:
                terminalreporter.write_line(f"    {request}")
    recorded = config.stash.get(_RECORDED, [])
    if recorded:
        terminalreporter.write_sep("=", "ors_lab record")
        for line in recorded:
            terminalreporter.write_line(line)


# -- the fixture ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Plan:
    """Everything the fixture resolved for one test."""

    nodeid: str
    trace_path: Path
    shown_path: str
    record_mode: str
    speed: float
    faults: tuple[Fault, ...]
    allow_repeats: bool
    upstream: str | None
    upstream_from_marker: bool
    strict: bool


class _Problem(Exception):
    """A setup problem, reported as the test's failure."""


@pytest.fixture
def ors_replay(request: pytest.FixtureRequest) -> Iterator[ReplayFixture]:
    """The test's ORS traffic replayed from its trace, or recorded into it (see ``ors_lab.pytest_plugin``)."""
    item = request.node
    passed = functools.partial(_passed, item)  # asked at teardown, once the call has its report
    plan: _Plan | None = None
    try:
        plan = _plan(item)
        opened = _OPENERS[_action(plan)](plan, item, passed)
        fixture = opened.__enter__()
    except _Problem as problem:
        item.stash[_PROBLEM] = str(problem)  # pytest_runtest_call fails the test with it
        yield ReplayFixture("", "replay", plan.trace_path if plan else Path(), item.config.stash[_MODE])
        return
    try:
        yield fixture
    finally:
        opened.__exit__(None, None, None)


def _passed(item: pytest.Item) -> bool:
    report = item.stash.get(_CALL_REPORT, None)
    return report is not None and report.passed


def _plan(item: pytest.Item) -> _Plan:
    config = item.config
    marker = item.get_closest_marker(MARKER)
    options: dict[str, Any] = {}
    if marker is not None:
        if marker.args:
            raise _Problem(f"@pytest.mark.{MARKER} takes keyword arguments only: {', '.join(MARKER_ARGS)}")
        unknown = sorted(set(marker.kwargs) - set(MARKER_ARGS))
        if unknown:
            raise _Problem(f"@pytest.mark.{MARKER} got {', '.join(unknown)}; valid arguments: {', '.join(MARKER_ARGS)}")
        options = dict(marker.kwargs)
    trace = options.get("trace")
    path = (item.path.parent / Path(trace)) if trace is not None else default_trace_path(item)
    path = Path(os.path.normpath(path))
    speed = options.get("speed", 0.0)
    if isinstance(speed, bool) or not isinstance(speed, int | float) or speed < 0:
        raise _Problem(f"@pytest.mark.{MARKER}(speed={speed!r}): speed is 0 (no waiting) or more")
    marker_upstream = options.get("upstream")
    upstream = marker_upstream or config.getoption("ors_upstream") or os.environ.get(UPSTREAM_ENV) or None
    return _Plan(
        nodeid=item.nodeid,
        trace_path=path,
        shown_path=_shown(path, config.rootpath),
        record_mode=config.stash[_MODE],
        speed=float(speed),
        faults=_faults(options.get("faults", ())),
        allow_repeats=bool(options.get("allow_repeats", False)),
        upstream=upstream,
        upstream_from_marker=marker_upstream is not None,
        strict=bool(config.getoption("ors_strict_replay")),
    )


def _faults(given: Any) -> tuple[Fault, ...]:
    from ors_lab.replay.faults import Fault

    items = [given] if isinstance(given, str | Fault) else list(given or ())
    faults = []
    for fault in items:
        try:
            # a copy: the engine counts a fault's uses on the object, and a marker's objects serve every test
            faults.append(dataclasses.replace(fault, used=0) if isinstance(fault, Fault) else Fault.parse(str(fault)))
        except ValueError as exc:
            raise _Problem(f"@pytest.mark.{MARKER}(faults=...): {exc}") from None
    return tuple(faults)


def _action(plan: _Plan) -> Literal["replay", "record", "new_episodes"]:
    exists = plan.trace_path.is_file()
    if plan.faults:
        if not exists:
            raise _Problem(
                f"ors_replay: no trace at {plan.shown_path}; this test sets faults=, which only a replay can inject, "
                "so it always replays: record the trace first with a test without faults= (sharing it through "
                "trace=), or drop faults= and run with --ors-record-mode=once"
            )
        return "replay"
    mode = plan.record_mode
    if mode == "none" or (mode == "once" and exists):
        if not exists:
            raise _Problem(_missing_message(plan))
        return "replay"
    if not plan.upstream:
        raise _Problem(
            f"ors_replay: record mode {mode!r} needs to record {plan.shown_path} but has no upstream ORS server: "
            f"pass --ors-upstream URL, set ${UPSTREAM_ENV}, or give @pytest.mark.{MARKER}(upstream=URL)"
        )
    if mode == "new_episodes" and exists:
        return "new_episodes"
    return "record"


def _missing_message(plan: _Plan) -> str:
    if plan.upstream_from_marker:
        flags = "--ors-record-mode=once"
        hint = ""
    elif plan.upstream:
        flags = f"--ors-record-mode=once --ors-upstream {shlex.quote(plan.upstream)}"
        hint = ""
    else:
        flags = "--ors-record-mode=once --ors-upstream URL"
        hint = " (URL: the live ORS server to record from)"
    return (
        f"ors_replay: no trace at {plan.shown_path} (record mode 'none' only replays and never contacts a server).\n"
        f"Record it from the rootdir with{hint}:\n"
        f"    pytest {flags} {shlex.quote(plan.nodeid)}"
    )


def default_trace_path(item: pytest.Item) -> Path:
    """``<rootdir>/recordings/<module path without .py>/<test>.parquet`` (see the module docstring)."""
    root = item.config.rootpath
    try:
        module = item.path.relative_to(root)
    except ValueError:
        module = Path(item.path.name)
    classes = [node.name for node in item.listchain() if isinstance(node, pytest.Class)]
    name = getattr(item, "originalname", None) or item.name
    test = ".".join([*classes, name])
    if item.name != name and item.name.startswith(name + "[") and item.name.endswith("]"):
        test += "-" + _safe_id(item.name[len(name) + 1 : -1])
    return root / "recordings" / module.with_suffix("") / f"{test}.parquet"


def _safe_id(text: str, limit: int = 96) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", text)
    if safe == text and len(text) <= limit:
        return text
    return f"{safe[:limit]}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def _shown(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _temporary(path: Path, what: str) -> Path:
    return path.with_name(f".{path.stem}.{what}-{uuid.uuid4().hex[:8]}.parquet")


# -- the three ways to run: replay, record, new episodes -----------------------------------------


@contextlib.contextmanager
def _replaying(plan: _Plan, item: pytest.Item, passed: Callable[[], bool]) -> Iterator[ReplayFixture]:
    from ors_lab.protocol.errors import TraceFormatError
    from ors_lab.replay.serve import ReplayServer

    try:
        server = ReplayServer(plan.trace_path, speed=plan.speed, faults=plan.faults, allow_repeats=plan.allow_repeats)
    except TraceFormatError as exc:
        raise _Problem(f"ors_replay: cannot replay {plan.shown_path}: {exc}; record it again with "
                       "--ors-record-mode=all") from None  # fmt: skip
    with server:
        yield ReplayFixture(server.url, "replay", plan.trace_path, plan.record_mode, server.unplayed)
        unplayed = server.unplayed()
    _report_unplayed(plan, item, unplayed, passed())


@contextlib.contextmanager
def _recording(plan: _Plan, item: pytest.Item, passed: Callable[[], bool]) -> Iterator[ReplayFixture]:
    from ors_lab.recording.proxy import serve_proxy
    from ors_lab.recording.recorder import Recorder

    assert plan.upstream is not None
    temporary = _temporary(plan.trace_path, "recording")
    recorder = Recorder(temporary)
    served = False
    try:
        with serve_proxy(plan.upstream, recorder) as url:
            yield ReplayFixture(url, "record", plan.trace_path, plan.record_mode)
        served = True
    finally:
        _close(recorder, plan, keep=served)
    _install(plan, item, temporary, passed(), f"recorded {plan.shown_path} from {plan.upstream}")


@contextlib.contextmanager
def _new_episodes(plan: _Plan, item: pytest.Item, passed: Callable[[], bool]) -> Iterator[ReplayFixture]:
    from ors_lab.asgi import serve_app
    from ors_lab.protocol.errors import TraceFormatError
    from ors_lab.recording.proxy import RecordingProxy
    from ors_lab.recording.recorder import Recorder
    from ors_lab.recording.trace import load_trace
    from ors_lab.replay.serve import _Cut  # the replay's deliberate connection drop, kept out of the log

    assert plan.upstream is not None
    try:
        old = load_trace(plan.trace_path)
        engine = _new_episode_engine(old, plan)
    except TraceFormatError as exc:
        raise _Problem(f"ors_replay: cannot replay {plan.shown_path}: {exc}; record it again with "
                       "--ors-record-mode=all") from None  # fmt: skip
    temporary = _temporary(plan.trace_path, "new-episodes")
    recorder = Recorder(temporary)
    proxy = RecordingProxy(plan.upstream, recorder)
    forwarded = [0]
    served = False
    try:
        with serve_app(_new_episodes_app(engine, proxy.app, forwarded), quiet=(_Cut,)) as url:
            yield ReplayFixture(url, "replay", plan.trace_path, plan.record_mode, engine.unplayed)
            unplayed = engine.unplayed()
        served = True
    finally:
        _close(recorder, plan, keep=served and forwarded[0] > 0)
    if forwarded[0]:
        if passed():
            merged = _temporary(plan.trace_path, "merged")
            _write_appended(old, load_trace(temporary), merged)
            temporary.unlink()
            temporary = merged
        what = f"appended {forwarded[0]} request(s) from {plan.upstream} to {plan.shown_path}"
        _install(plan, item, temporary, passed(), what)
    _report_unplayed(plan, item, unplayed, passed())


_OPENERS: Mapping[str, Callable[[_Plan, pytest.Item, Callable[[], bool]], contextlib.AbstractContextManager[Any]]] = {
    "replay": _replaying,
    "record": _recording,
    "new_episodes": _new_episodes,
}


def _close(recorder: Recorder, plan: _Plan, *, keep: bool) -> None:
    """Close the recorder; its temporary trace is removed unless ``keep`` (and kept only if it closed)."""
    try:
        recorder.close()
    except RuntimeError as exc:
        recorder.path.unlink(missing_ok=True)
        pytest.fail(f"ors_replay: the recording for {plan.shown_path} failed ({exc}); the trace is unchanged",
                    pytrace=False)  # fmt: skip
    if not keep:
        recorder.path.unlink(missing_ok=True)


def _install(plan: _Plan, item: pytest.Item, temporary: Path, passed: bool, what: str) -> None:
    recorded = item.config.stash[_RECORDED]
    if not passed:
        temporary.unlink(missing_ok=True)
        recorded.append(f"{plan.nodeid}: not saved (the test did not pass); {plan.shown_path} is unchanged")
        return
    os.replace(temporary, plan.trace_path)
    recorded.append(f"{plan.nodeid}: {what}")


def _report_unplayed(plan: _Plan, item: pytest.Item, unplayed: list[str], passed: bool) -> None:
    if not unplayed:
        return
    item.config.stash[_UNPLAYED].append((plan.nodeid, unplayed))
    if plan.strict and passed:
        listed = "\n".join(f"    {request}" for request in unplayed)
        pytest.fail(
            f"ors_replay (--ors-strict-replay): {len(unplayed)} recorded request(s) in {plan.shown_path} "
            f"were never asked for:\n{listed}",
            pytrace=False,
        )


# -- new_episodes: the replay engine with a way out to the upstream ------------------------------


class _Forward(Exception):
    """Raised by the new-episodes engine for a request the upstream must answer."""


def _new_episode_engine(trace: Trace, plan: _Plan) -> Any:
    """A ``ReplayEngine`` whose ``handle`` raises ``_Forward`` for what the trace cannot answer.

    The class is made here so that loading the plugin does not import the engine (and pyarrow).
    """
    from ors_lab.replay.engine import MISMATCH_HEADER, ROOT_STATELESS, STATELESS, ReplayEngine

    class NewEpisodeEngine(ReplayEngine):
        """Replays recorded episodes; new episodes and unknown stateless requests go upstream."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.forwarded_sessions: set[str] = set()

        def handle(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> Answer:
            sid = (headers.get("x-session-id") or "").strip()
            if sid and sid in self.forwarded_sessions:
                raise _Forward
            answer = super().handle(method, path, headers, body)
            if dict(answer.headers).get(MISMATCH_HEADER) != "mismatch":
                return answer
            if path == "/create" and sid:
                self.forwarded_sessions.add(sid)
                raise _Forward
            if path in ROOT_STATELESS or path.endswith(STATELESS):
                raise _Forward
            return answer  # a step inside a recorded episode that differs: a mismatch, as in replay

    return NewEpisodeEngine(trace, speed=plan.speed, faults=plan.faults, allow_repeats=plan.allow_repeats)


def _new_episodes_app(engine: Any, proxy_app: Any, forwarded: list[int]) -> Any:
    """An ASGI app: the replay answers first; on ``_Forward`` the recording proxy takes the request."""
    from ors_lab.asgi import read_body
    from ors_lab.replay.serve import replay_app

    replay = replay_app(engine)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await proxy_app(scope, receive, send)  # lifespan: the proxy closes its upstream client at shutdown
            return
        body = await read_body(receive)

        def again() -> Any:
            given = False

            async def receive_again() -> dict[str, Any]:
                nonlocal given
                if not given:
                    given = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return dict(await receive())

            return receive_again

        try:
            await replay(scope, again(), send)
        except _Forward:
            forwarded[0] += 1
            await proxy_app(scope, again(), send)

    return app


def _write_appended(old: Trace, new: Trace, out: Path) -> None:
    """Write ``old``'s rows, then ``new``'s with ``seq`` and ``exchange`` numbered on, to ``out``."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from ors_lab.recording.schema import METADATA_SERVERS

    table = new.table
    for column in ("seq", "exchange"):
        top = pc.max(old.table[column]).as_py()
        base = 0 if top is None else int(top) + (1 if column == "seq" else 0)
        index = table.schema.get_field_index(column)
        table = table.set_column(index, table.schema.field(column), pc.add(table[column], base))
    metadata = dict(new.table.schema.metadata or {})
    servers = _unique([*old.metadata["servers"], *new.metadata["servers"]])
    metadata[METADATA_SERVERS] = json.dumps(servers).encode()
    merged = pa.concat_tables([old.table.replace_schema_metadata(metadata), table.replace_schema_metadata(metadata)])
    pq.write_table(merged, out, compression="zstd")


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(values))
