"""A real kernel from this venv, with every message a cell sends kept and timed by the kernel's clock.

What a notebook front end receives is what the kernel sends on iopub; this harness keeps it all,
so a test can say when the widget updates went out (while the cell ran, or only at its end) and
how many per second::

    with Kernel() as kernel:
        kernel.run(COUNTING_STATE)                                   # define what the cell uses
        cell = kernel.run("view = LiveView(Count()); view.show(); ...")
        model_id = cell.widget_models()[0]
        updates = cell.updates(model_id)                             # the comm_msg updates, timed
        assert sum(u.during for u in updates) >= 10

``Kernel.run`` returns once the cell's kernel went idle and ``grace`` seconds more passed (a
trailing update may follow the cell's end).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from queue import Empty
from typing import Any

from jupyter_client.manager import start_new_kernel

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

COUNTING_STATE = '''
import time

from ors_lab.events import EventStream, TextDeltaEvent
from ors_lab.notebook import LiveView, ViewState


class Count(ViewState):
    """Counts text deltas: the smallest view state there is."""

    name = "count"  # no renderer of that name: the front end shows the text form
    kinds = ("text-delta",)

    def __init__(self):
        self.n = 0

    def apply(self, event):
        self.n += 1
        return True

    def snapshot(self):
        return {"n": self.n}

    def text(self):
        return f"{self.n} events"

    def html(self):
        return f"<b>{self.n} events</b>"


def pump(stream, events=20_000, seconds=2.0):
    """Publish `events` text deltas over about `seconds`, from this thread, in bursts of 100."""
    pause = seconds / (events / 100)
    for i in range(events):
        stream.publish(TextDeltaEvent(id="t", delta="x"))
        if i % 100 == 99:
            time.sleep(pause)
'''
"""Kernel code: ``Count``, a minimal ``ViewState``, and ``pump``, a fast stream of events from the cell itself."""


@dataclass(frozen=True)
class Update:
    """One widget update the kernel sent: when (kernel clock), the state sent, and whether the cell still ran."""

    at: datetime
    state: dict[str, Any]
    during: bool


@dataclass
class Cell:
    """One executed cell: its reply and every iopub message it caused, in order."""

    code: str
    msg_id: str
    reply: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)

    def _date(self, kind: str, state: str | None = None) -> datetime:
        for message in self.messages:
            if message["msg_type"] == kind and (state is None or message["content"].get("execution_state") == state):
                date: datetime = message["header"]["date"]
                return date
        raise AssertionError(f"no {kind} {state or ''} message for the cell")

    @property
    def started(self) -> datetime:
        """When the kernel began the cell (its execute_input)."""
        return self._date("execute_input")

    @property
    def ended(self) -> datetime:
        """When the kernel went idle after the cell."""
        return self._date("status", "idle")

    @property
    def seconds(self) -> float:
        """The cell's run time, by the kernel's clock."""
        return (self.ended - self.started).total_seconds()

    def of(self, *kinds: str) -> list[dict[str, Any]]:
        """The cell's messages of these types."""
        return [message for message in self.messages if message["msg_type"] in kinds]

    def stdout(self) -> str:
        """What the cell printed."""
        return "".join(m["content"]["text"] for m in self.of("stream") if m["content"]["name"] == "stdout")

    def problems(self) -> list[str]:
        """Errors and stderr output, and a reply that is not ok."""
        found = [f"{m['content']['ename']}: {m['content']['evalue']}" for m in self.of("error")]
        found += [m["content"]["text"] for m in self.of("stream") if m["content"]["name"] == "stderr"]
        if self.reply.get("status") != "ok":
            found.append(f"reply status {self.reply.get('status')!r}")
        return found

    def outputs(self) -> list[dict[str, Any]]:
        """The mime bundles the cell displayed or returned (display_data, execute_result, update_display_data)."""
        return [m["content"]["data"] for m in self.of("display_data", "execute_result", "update_display_data")]

    def widget_models(self) -> list[str]:
        """The model ids of the widget views the cell's outputs hold, in order, each once."""
        ids = [data[WIDGET_MIME]["model_id"] for data in self.outputs() if WIDGET_MIME in data]
        return list(dict.fromkeys(ids))

    def updates(self, model_id: str) -> list[Update]:
        """The state updates sent to widget ``model_id`` (comm_msg ``update``), each timed."""
        ended = self.ended
        found = []
        for message in self.of("comm_msg"):
            content = message["content"]
            if content.get("comm_id") == model_id and content.get("data", {}).get("method") == "update":
                at = message["header"]["date"]
                found.append(Update(at=at, state=content["data"]["state"], during=at < ended))
        return found


def most_in_window(updates: list[Update], window: float = 1.0) -> int:
    """The largest number of updates sent within any ``window`` seconds."""
    times = [u.at.timestamp() for u in updates]
    most, first = 0, 0
    for last, t in enumerate(times):
        while t - times[first] > window:
            first += 1
        most = max(most, last - first + 1)
    return most


class Kernel:
    """A kernel from this venv (``python3``), started in ``cwd``; shut down on leaving the ``with``."""

    def __init__(self, cwd: Path | None = None) -> None:
        self.cwd = cwd
        self._manager: Any = None
        self._client: Any = None

    def __enter__(self) -> Kernel:
        cwd = str(self.cwd) if self.cwd is not None else None
        self._manager, self._client = start_new_kernel(kernel_name="python3", cwd=cwd)
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.stop_channels()
        self._manager.shutdown_kernel(now=True)

    def run(self, code: str, *, timeout: float = 120.0, grace: float = 0.5) -> Cell:
        """Execute ``code``; wait for the cell's idle status, then ``grace`` s more for late messages."""
        return self.finish(self.start(code), timeout=timeout, grace=grace)

    def start(self, code: str) -> Cell:
        """Send ``code`` to execute and return at once (the test does something meanwhile); then ``finish(cell)``."""
        return Cell(code=code, msg_id=self._client.execute(code, allow_stdin=False))

    def finish(self, cell: Cell, *, timeout: float = 120.0, grace: float = 0.5) -> Cell:
        """Wait for a started cell's idle status, then ``grace`` s more for late messages; its messages are kept."""
        client = self._client
        deadline = time.monotonic() + timeout
        idle_at: float | None = None
        while True:
            now = time.monotonic()
            if idle_at is not None and now >= idle_at + grace:
                break
            if now >= deadline:
                raise TimeoutError(f"the cell did not finish within {timeout:.0f} s: {cell.problems()}")
            try:
                message = client.get_iopub_msg(timeout=0.1)
            except Empty:
                continue
            if message["parent_header"].get("msg_id") != cell.msg_id:
                continue
            cell.messages.append(message)
            if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                idle_at = time.monotonic()
        reply = client.get_shell_msg(timeout=10)
        while reply["parent_header"].get("msg_id") != cell.msg_id:
            reply = client.get_shell_msg(timeout=10)
        cell.reply = reply["content"]
        return cell
