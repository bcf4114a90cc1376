"""ors_lab's pytest plugin: a test's ORS traffic replayed from a Parquet trace, or recorded into one.

Installed with ors_lab (a ``pytest11`` entry point). A test asks for the ``ors_replay`` fixture and
points any ORS client, ours or an official one, at ``ors_replay.url``::

    @pytest.mark.ors_replay(speed=0.0, faults=(), allow_repeats=False, trace=None, upstream=None)
    def test_echo(ors_replay):
        with ors_lab.Client(ors_replay.url).environment("echo").session(split="dev", index=0) as s:
            assert s.call("echo", {"text": "hi"}).text == "hi"

or, in process with no socket, ``ors_replay_transport``::

    def test_echo_offline(ors_replay_transport):
        with ors_lab.Client("http://ors.replay", transport=ors_replay_transport) as client: ...

The fixtures, each overridable in a ``conftest.py`` as pytest-recording's are:

- ``ors_record_mode``: the record mode (``--ors-record-mode``, else ``$ORS_LAB_RECORD_MODE``, else ``none``);
- ``ors_replay_config``: a dict of defaults for the marker's arguments (``speed``, ``faults``,
  ``allow_repeats``, ``upstream``, ``trace``) for every test it reaches; ``{}`` by default;
- ``ors_trace_path``: the test's trace: the marker's ``trace=`` (relative to the test file), else
  the config's, else ``<rootdir>/recordings/<module path, without .py>/<test>.parquet``
  (``<test>`` prefixed by its classes, a parametrised id after ``-``; see ``settings.default_trace_path``);
- ``ors_replay``: the URL to point a client at, replaying or recording as the mode says;
- ``ors_replay_transport``: the trace as an in-process ``ReplayTransport`` (replay only).

**The record modes**:

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

**Recording** runs the test against a recording proxy in front of the upstream (the marker's
``upstream=``, else the config's, else ``--ors-upstream``, else ``$ORS_LAB_UPSTREAM``; recording
without one fails the test saying so); the trace replaces the old one only if the recording closed
cleanly and the test passed. Faults cannot be injected into a live server: a test that sets
``faults=`` always replays, whatever the mode, and needs its trace recorded first (typically by
another test, shared through ``trace=``).

**At teardown** the recorded requests a replay never asked for are listed in the terminal summary
("ors_lab replay: unplayed interactions"); with ``--ors-strict-replay`` a test that passed but left
some unplayed fails at teardown. Traces written or not saved are listed under "ors_lab record".

A problem with the setup (a missing trace, no upstream, a bad marker argument) fails the test
itself with a message saying what to do, rather than erroring in a fixture.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ors_lab.protocol.errors import TraceFormatError as _TraceFormatError
from ors_lab.pytest_plugin.runs import OPENERS as _OPENERS
from ors_lab.pytest_plugin.runs import Outcome as _Outcome
from ors_lab.pytest_plugin.runs import ReplayFixture
from ors_lab.pytest_plugin.settings import MARKER_HELP as _MARKER_HELP
from ors_lab.pytest_plugin.settings import MODE_ENV as _MODE_ENV
from ors_lab.pytest_plugin.settings import MODE_HELP as _MODE_HELP
from ors_lab.pytest_plugin.settings import MODES, default_trace_path
from ors_lab.pytest_plugin.settings import Problem as _Problem
from ors_lab.pytest_plugin.settings import ReplaySettings as _ReplaySettings
from ors_lab.pytest_plugin.settings import action as _action
from ors_lab.pytest_plugin.settings import resolve as _resolve
from ors_lab.pytest_plugin.settings import trace_path as _trace_path

if TYPE_CHECKING:  # loading the plugin imports nothing heavy: the replay is imported when a test asks for it
    from ors_lab.replay.serve import ReplayTransport

__all__ = ["MODES", "ReplayFixture", "default_trace_path"]

_MODE = pytest.StashKey[str]()
_UNPLAYED = pytest.StashKey[list[tuple[str, list[str]]]]()
_RECORDED = pytest.StashKey[list[str]]()
_PROBLEM = pytest.StashKey[str]()
_CALL_REPORT = pytest.StashKey[pytest.TestReport]()


# -- options, marker, hooks ----------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ors_lab", "ors_lab replay and recording of ORS traffic")
    group.addoption("--ors-record-mode", choices=MODES, default=None, help=_MODE_HELP)
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
    config.addinivalue_line("markers", _MARKER_HELP)
    mode = config.getoption("ors_record_mode") or os.environ.get(_MODE_ENV) or "none"
    if mode not in MODES:
        raise pytest.UsageError(f"{_MODE_ENV}={mode!r} is not a record mode; valid modes are {', '.join(MODES)}")
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


# -- the fixtures --------------------------------------------------------------------------------


@pytest.fixture
def ors_record_mode(request: pytest.FixtureRequest) -> str:
    """The record mode: ``--ors-record-mode``, else ``$ORS_LAB_RECORD_MODE``, else ``none``."""
    return request.config.stash[_MODE]


@pytest.fixture
def ors_replay_config() -> dict[str, Any]:
    """Defaults for the ``ors_replay`` marker's arguments: override it in a ``conftest.py`` for a directory."""
    return {}


@pytest.fixture
def ors_trace_path(request: pytest.FixtureRequest, ors_replay_config: dict[str, Any]) -> Path:
    """The test's trace (see the module docstring)."""
    return _trace_path(request.node, ors_replay_config)


def _passed(item: pytest.Item) -> bool:
    report = item.stash.get(_CALL_REPORT, None)
    return report is not None and report.passed


def _settings(item: pytest.Item, mode: str, config: dict[str, Any], path: Path) -> _ReplaySettings | None:
    """The test's settings; a problem with them is stashed to fail the test with (None)."""
    try:
        return _resolve(item, mode, config, path)
    except _Problem as problem:
        item.stash[_PROBLEM] = str(problem)
        return None


def _report(settings: _ReplaySettings, item: pytest.Item, outcome: _Outcome) -> None:
    item.config.stash[_RECORDED].extend(outcome.recorded)
    if not outcome.unplayed:
        return
    item.config.stash[_UNPLAYED].append((settings.nodeid, outcome.unplayed))
    if settings.strict and outcome.passed():
        listed = "\n".join(f"    {request}" for request in outcome.unplayed)
        pytest.fail(
            f"ors_replay (--ors-strict-replay): {len(outcome.unplayed)} recorded request(s) in {settings.shown_path} "
            f"were never asked for:\n{listed}",
            pytrace=False,
        )


@pytest.fixture
def ors_replay(
    request: pytest.FixtureRequest, ors_record_mode: str, ors_replay_config: dict[str, Any], ors_trace_path: Path
) -> Iterator[ReplayFixture]:
    """The test's ORS traffic replayed from its trace, or recorded into it (see ``ors_lab.pytest_plugin``)."""
    item = request.node
    settings = _settings(item, ors_record_mode, ors_replay_config, ors_trace_path)
    outcome = _Outcome(functools.partial(_passed, item))  # asked at teardown, once the call has its report
    try:
        if settings is None:
            raise _Problem(item.stash[_PROBLEM])
        opened = _OPENERS[_action(settings)](settings, outcome)
        fixture = opened.__enter__()
    except _Problem as problem:
        item.stash[_PROBLEM] = str(problem)  # pytest_runtest_call fails the test with it
        yield ReplayFixture("", "replay", ors_trace_path, ors_record_mode)
        return
    try:
        yield fixture
    finally:
        opened.__exit__(None, None, None)
    _report(settings, item, outcome)


@pytest.fixture
def ors_replay_transport(
    request: pytest.FixtureRequest, ors_record_mode: str, ors_replay_config: dict[str, Any], ors_trace_path: Path
) -> Iterator[ReplayTransport | None]:
    """The test's trace as an in-process ``ReplayTransport``: ``Client(url, transport=ors_replay_transport)``.

    It replays whatever the record mode (it opens no socket, so it cannot record: record the
    trace with the ``ors_replay`` fixture). A missing trace fails the test, naming the command that
    records it.
    """
    from ors_lab.replay.serve import ReplayTransport  # pandas, pyarrow: only when a test asks for it

    item = request.node
    settings = _settings(item, ors_record_mode, ors_replay_config, ors_trace_path)
    transport = None
    if settings is not None:
        if not settings.trace_path.is_file():
            item.stash[_PROBLEM] = (
                f"ors_replay_transport: no trace at {settings.shown_path}; the in-process transport only replays: "
                "record the trace with a test that uses the ors_replay fixture on the same trace (trace=), run "
                "with --ors-record-mode=once --ors-upstream URL"
            )
        else:
            try:
                transport = ReplayTransport(settings.trace_path, speed=settings.speed, faults=settings.faults,
                                            allow_repeats=settings.allow_repeats)  # fmt: skip
            except _TraceFormatError as exc:
                item.stash[_PROBLEM] = f"ors_replay_transport: cannot replay {settings.shown_path}: {exc}"
    yield transport
    if transport is not None and settings is not None:
        _report(settings, item, _Outcome(functools.partial(_passed, item), unplayed=transport.unplayed()))
