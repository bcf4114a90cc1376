"""What one test's replay is to do: its record mode, trace path and replay options, resolved.

The options come, first found first, from the test's ``@pytest.mark.ors_replay(...)``, the
``ors_replay_config`` fixture (a dict a ``conftest.py`` may override for a directory), and the
command line or environment (``--ors-upstream`` / ``$ORS_LAB_UPSTREAM``). A problem with them
(a missing trace, no upstream, a bad argument) is a ``Problem``: the test fails saying what to do.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

if TYPE_CHECKING:  # loading the plugin imports nothing heavy: the replay is imported when a test asks for it
    from ors_lab.replay.faults import Fault

__all__ = [
    "MARKER",
    "MARKER_ARGS",
    "MARKER_HELP",
    "MODES",
    "MODE_ENV",
    "MODE_HELP",
    "UPSTREAM_ENV",
    "Problem",
    "ReplaySettings",
    "action",
    "default_trace_path",
    "marker_options",
    "resolve",
    "shown",
    "trace_path",
]

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


class Problem(Exception):
    """A setup problem, reported as the test's failure."""


@dataclasses.dataclass(frozen=True)
class ReplaySettings:
    """Everything resolved for one test's replay."""

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


def marker_options(item: pytest.Item) -> dict[str, Any]:
    """The test's ``@pytest.mark.ors_replay`` arguments (``Problem`` for positional or unknown ones)."""
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return {}
    if marker.args:
        raise Problem(f"@pytest.mark.{MARKER} takes keyword arguments only: {', '.join(MARKER_ARGS)}")
    unknown = sorted(set(marker.kwargs) - set(MARKER_ARGS))
    if unknown:
        raise Problem(f"@pytest.mark.{MARKER} got {', '.join(unknown)}; valid arguments: {', '.join(MARKER_ARGS)}")
    return dict(marker.kwargs)


def trace_path(item: pytest.Item, config: Mapping[str, Any]) -> Path:
    """The test's trace: the marker's ``trace=`` (relative to the test file), the config's, or the default."""
    marker = item.get_closest_marker(MARKER)
    trace = (marker.kwargs.get("trace") if marker is not None else None) or config.get("trace")
    path = (item.path.parent / Path(trace)) if trace is not None else default_trace_path(item)
    return Path(os.path.normpath(path))


def resolve(item: pytest.Item, record_mode: str, config: Mapping[str, Any], path: Path) -> ReplaySettings:
    """The test's settings, from its marker, the ``ors_replay_config`` dict and the command line."""
    unknown = sorted(set(config) - set(MARKER_ARGS))
    if unknown:
        raise Problem(f"ors_replay_config holds {', '.join(unknown)}; valid keys: {', '.join(MARKER_ARGS)}")
    marker = marker_options(item)
    options = {**config, **marker}
    speed = options.get("speed", 0.0)
    if isinstance(speed, bool) or not isinstance(speed, int | float) or speed < 0:
        raise Problem(f"@pytest.mark.{MARKER}(speed={speed!r}): speed is 0 (no waiting) or more")
    upstream_option = options.get("upstream")
    upstream = upstream_option or item.config.getoption("ors_upstream") or os.environ.get(UPSTREAM_ENV) or None
    return ReplaySettings(
        nodeid=item.nodeid,
        trace_path=path,
        shown_path=shown(path, item.config.rootpath),
        record_mode=record_mode,
        speed=float(speed),
        faults=_faults(options.get("faults", ())),
        allow_repeats=bool(options.get("allow_repeats", False)),
        upstream=upstream,
        upstream_from_marker=upstream_option is not None,
        strict=bool(item.config.getoption("ors_strict_replay")),
    )


def _faults(given: Any) -> tuple[Fault, ...]:
    from ors_lab.replay.faults import Fault  # the replay loads pandas, pyarrow: only for a test using ors_replay

    items = [given] if isinstance(given, str | Fault) else list(given or ())
    faults = []
    for fault in items:
        try:
            # a copy: the engine counts a fault's uses on the object, and a marker's objects serve every test
            faults.append(dataclasses.replace(fault, used=0) if isinstance(fault, Fault) else Fault.parse(str(fault)))
        except ValueError as exc:
            raise Problem(f"@pytest.mark.{MARKER}(faults=...): {exc}") from None
    return tuple(faults)


def action(settings: ReplaySettings) -> Literal["replay", "record", "new_episodes"]:
    """What the test's traffic meets: its trace, a recording of the upstream, or the trace with the upstream behind."""
    exists = settings.trace_path.is_file()
    if settings.faults:
        if not exists:
            raise Problem(
                f"ors_replay: no trace at {settings.shown_path}; this test sets faults=, which only a replay can "
                "inject, so it always replays: record the trace first with a test without faults= (sharing it "
                "through trace=), or drop faults= and run with --ors-record-mode=once"
            )
        return "replay"
    mode = settings.record_mode
    if mode == "none" or (mode == "once" and exists):
        if not exists:
            raise Problem(missing_message(settings))
        return "replay"
    if not settings.upstream:
        raise Problem(
            f"ors_replay: record mode {mode!r} needs to record {settings.shown_path} but has no upstream ORS server: "
            f"pass --ors-upstream URL, set ${UPSTREAM_ENV}, or give @pytest.mark.{MARKER}(upstream=URL)"
        )
    if mode == "new_episodes" and exists:
        return "new_episodes"
    return "record"


def missing_message(settings: ReplaySettings) -> str:
    """What a missing trace fails its test with: the path and the command that records it."""
    if settings.upstream_from_marker:
        flags = "--ors-record-mode=once"
        hint = ""
    elif settings.upstream:
        flags = f"--ors-record-mode=once --ors-upstream {shlex.quote(settings.upstream)}"
        hint = ""
    else:
        flags = "--ors-record-mode=once --ors-upstream URL"
        hint = " (URL: the live ORS server to record from)"
    return (
        f"ors_replay: no trace at {settings.shown_path} (record mode 'none' only replays and never contacts a "
        f"server).\nRecord it from the rootdir with{hint}:\n    pytest {flags} {shlex.quote(settings.nodeid)}"
    )


def default_trace_path(item: pytest.Item) -> Path:
    """``<rootdir>/recordings/<module path without .py>/<test>.parquet``.

    ``<test>`` is the test's name, prefixed by its classes (``TestA.test_b``), with a parametrised
    id appended after ``-`` (``test_b[x-1]`` -> ``test_b-x-1``); an id with characters other than
    letters, digits, ``_ . -`` has them replaced by ``_`` and gets 8 hex digits of its hash, so ids
    never collide.
    """
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


def shown(path: Path, root: Path) -> str:
    """``path`` relative to the rootdir when it is under it, for messages."""
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)
