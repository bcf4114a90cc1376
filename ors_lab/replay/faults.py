"""Faults the replay can inject into ``/call`` answers, to test how agent code copes.

A fault is written ``KIND[:VALUE][,tool=NAME][,times=N]`` (the command line's ``--fault``):

- ``cut:K``: send the first K events of the stream, then drop the connection (a resume with the
  task_id then gets the recorded result);
- ``stall:S``: wait S seconds after the response head before the stream goes on;
- ``status:CODE``: answer CODE before any stream (``status:429`` comes with ``Retry-After: 1``,
  ``status:503-starting`` is openreward's ``503`` with ``x-backend-state: starting``); the recorded
  answer is kept for the retry, which the client sends only after a ``429`` or a ``503-starting``
  (any other 5xx to a first ``/call`` is an ``OutcomeUnknownError``: the tool may have run);
- ``malformed``: the ``end`` event carries a payload that is not JSON;
- ``no-pings``: the stream's ``: ping`` comments are left out.

``tool=`` limits a fault to calls of that tool; ``times=`` to its first N uses (default 1;
``times=0`` means every matching call).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["KINDS", "Fault"]

KINDS = ("cut", "stall", "status", "malformed", "no-pings")
_NEEDS_VALUE = {"cut", "stall", "status"}


@dataclass
class Fault:
    """One fault to inject; see the module docstring for the kinds."""

    kind: str
    value: str | None = None
    tool: str | None = None
    times: int = 1
    used: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault {self.kind!r}; valid kinds are {', '.join(KINDS)}")
        if self.kind in _NEEDS_VALUE and not self.value:
            raise ValueError(f"fault {self.kind!r} needs a value, as in {self.kind}:1")
        if self.kind == "cut" and not str(self.value).isdigit():
            raise ValueError(f"cut takes a number of events, not {self.value!r}")
        if self.kind == "stall":
            try:
                float(str(self.value))
            except ValueError:
                raise ValueError(f"stall takes seconds, not {self.value!r}") from None
        if self.kind == "status" and self.value not in ("503-starting",) and not str(self.value).isdigit():
            raise ValueError(f"status takes an HTTP status code or 503-starting, not {self.value!r}")
        if self.times < 0:
            raise ValueError("times must be 0 (every call) or more")

    @classmethod
    def parse(cls, text: str) -> Fault:
        """``cut:1,tool=submit,times=2`` → Fault("cut", "1", tool="submit", times=2)."""
        head, *options = [part.strip() for part in text.split(",")]
        kind, _, value = head.partition(":")
        fault = {"kind": kind, "value": value or None}
        extra: dict[str, str] = {}
        for option in options:
            name, equals, setting = option.partition("=")
            if not equals or name not in ("tool", "times"):
                raise ValueError(f"fault option {option!r}: expected tool=NAME or times=N")
            extra[name] = setting
        times = extra.get("times", "1")
        if not times.isdigit():
            raise ValueError(f"times takes a whole number, not {times!r}")
        return cls(fault["kind"] or "", fault["value"], tool=extra.get("tool"), times=int(times))

    def take(self, tool: str | None) -> bool:
        """True (and counted) when this fault applies to a call of ``tool`` now."""
        if self.tool is not None and self.tool != tool:
            return False
        if self.times and self.used >= self.times:
            return False
        self.used += 1
        return True
