"""The evaluation dashboard's state: a run's progress, rewards, grid and live episodes, built from its events.

``RunState`` is fed the agent events an evaluation publishes on its stream (the seed's vocabulary
in ``ors_lab.events``: ``start`` opens an episode, its deltas, tool calls, rewards and ``finish``
follow, ``episode`` ends it with its outcome). It is made with the run's plan (environment,
split, agent, the (task, rollout) pairs, the outcomes resumed from a trace) and keeps:

- done / total, the rate of this run (resumed episodes not counted), its ETA;
- the running mean reward with its standard error, pass@1 and pass@rollouts so far (per task,
  ``ors_lab.stats``, the same code as ``EvalResult``'s frames, so the last figures are equal);
- tokens used and tokens per second, where the agent reports usage;
- the error count and the last ``MAX_ERRORS`` errors;
- a note when no episode succeeded though rewards are positive (``ors_lab.stats.success_note``:
  dense small rewards against the default ``success_threshold``), naming the argument;
- a tasks x rollouts grid coloured by reward (``ors_lab.html.colour`` / ``ORS.colour``);
- a reward histogram and the running mean over time, as numbers: the front end draws them as
  inline SVG with DOM calls (``static/run.js``), no charting library, so nothing is fetched and a
  saved notebook needs no extra package;
- "now running" panes: the last parts (reasoning, text, tool input as it streams, tool output,
  rewards, finish reason) of at most ``MAX_PANES`` live episodes, ``PANE_CHARS`` of each part;
- each finished episode's transcript (at most ``MAX_PARTS`` parts of ``PART_CHARS``), handed once
  to the front end through ``inbox()`` (at most ``INBOX_PER_SEND`` a send), because a kernel
  busy with the evaluation does not answer clicks: a grid cell opens its transcript from what the
  front end holds. The last ``KEEP_TRANSCRIPTS`` stay here for ``request({"transcript": key})``
  once the cell has ended.

``text()`` is the progress line ``ors-lab eval`` and a terminal show
(``eval lab/train: 6/6 episodes  12.0/s  mean reward 0.500  errors 0``; once the run has ended, the
note and the errors follow it on lines of their own); ``html()`` the static summary a saved
notebook keeps (``run_summary_html``, which ``EvalResult`` draws itself with too).
"""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ors_lab.events import (
    AGENT_KINDS,
    BlockStartEvent,
    EpisodeEvent,
    ErrorEvent,
    Event,
    FinishEvent,
    ReasoningDeltaEvent,
    ReasoningStartEvent,
    RewardEvent,
    StartEvent,
    TextDeltaEvent,
    TextStartEvent,
    ToolInputAvailableEvent,
    ToolInputDeltaEvent,
    ToolInputStartEvent,
    ToolOutputAvailableEvent,
    ToolOutputErrorEvent,
    UsageEvent,
    compact_json,
)
from ors_lab.html import Markup, card, colour, escape, fmt, styled, table
from ors_lab.notebook.state import ViewState
from ors_lab.stats import mean, pass_at_k, stderr, success_note

__all__ = [
    "GRID_CELLS",
    "INBOX_PER_SEND",
    "KEEP_TRANSCRIPTS",
    "MAX_ERRORS",
    "MAX_PANES",
    "MAX_PARTS",
    "PANE_CHARS",
    "PART_CHARS",
    "RunState",
    "RunSummary",
    "TaskRow",
    "run_summary_html",
    "task_table",
    "tokens_text",
]

MAX_PANES = 3
"""Live episodes shown at once."""
PANE_PARTS = 8
"""The last parts of a live episode a pane shows."""
PANE_CHARS = 400
"""The last characters of each part a pane shows."""
PART_CHARS = 1200
"""A transcript part's text at most: its first 800 characters and its last 400."""
MAX_PARTS = 60
"""A transcript's parts at most: the first 8 and the latest, with the count of those left out."""
MAX_ERRORS = 10
ERROR_CHARS = 2000
"""The most of an error's message the text of an ended run shows."""
"""The last errors listed."""
INBOX_PER_SEND = 100
"""Finished transcripts handed to the front end in one update (the latest, when more finished)."""
KEEP_TRANSCRIPTS = 2_000
"""Finished transcripts kept here, to answer the front end after the run (the latest)."""
GRID_CELLS = 20_000
"""Grid cells sent to the front end at most (whole tasks, the first ones)."""
SERIES_POINTS = 200
"""Points of the reward-over-time line at most (every other one is dropped when full)."""
HIST_BINS = 10
TABLE_TASKS = 50
"""Tasks listed in the static summary's table."""
HTML_CELLS = 2_000
"""Cells of the static summary's grid."""

_HEAD = 800
_TAIL = PART_CHARS - _HEAD
_FIRST_PARTS = 8
_LEVELS = 20
"""Grid codes: ``" "`` not planned, ``"."`` waiting, ``"~"`` running, ``"x"`` failed, ``"A"``..``"U"``
a reward clipped to [0, 1] in twentieths (the colour the front end gives ``level / 20``)."""


class _Part:
    """One piece of a transcript: reasoning, text, a tool call's input, its output, a reward, ..."""

    __slots__ = ("head", "kind", "label", "seq", "skipped", "tail")

    def __init__(self, seq: int, kind: str, label: str = "", text: str = "") -> None:
        self.seq = seq
        self.kind = kind
        self.label = label
        self.head = ""
        self.tail = ""
        self.skipped = 0
        if text:
            self.add(text)

    def add(self, delta: str) -> None:
        """Append ``delta``, keeping the first ``_HEAD`` and the last ``_TAIL`` characters beyond ``PART_CHARS``."""
        if not self.skipped and len(self.head) + len(delta) <= PART_CHARS:
            self.head += delta
            return
        if not self.skipped:
            whole = self.head + delta
            self.head, rest = whole[:_HEAD], whole[_HEAD:]
        else:
            rest = self.tail + delta
        self.tail = rest[-_TAIL:]
        self.skipped += len(rest) - len(self.tail)

    def text(self) -> str:
        if not self.skipped:
            return self.head
        return f"{self.head} … [{self.skipped} characters] … {self.tail}"

    def end(self, chars: int) -> str:
        """The last ``chars`` characters (what a live pane shows)."""
        if not self.skipped:
            return self.head[-chars:]
        return self.tail[-chars:] if len(self.tail) >= chars else self.text()[-chars:]

    def wire(self, chars: int | None = None) -> list[Any]:
        return [self.seq, self.kind, self.label, self.text() if chars is None else self.end(chars)]


class _Live:
    """A running episode: its key, its parts so far, the tokens its LLM calls reported."""

    __slots__ = ("elided", "key", "parts", "reward", "seq", "sid", "started", "streams", "tokens")

    def __init__(self, sid: str, key: tuple[int, int] | None, started: float) -> None:
        self.sid = sid
        self.key = key
        self.started = started
        self.parts: list[_Part] = []
        self.streams: dict[str, _Part] = {}  # text / reasoning part id, or tool call id -> its part
        self.seq = 0
        self.elided = 0
        self.reward: float | None = None
        self.tokens = [0, 0, 0, 0]

    def part(self, kind: str, label: str = "", text: str = "") -> _Part:
        part = _Part(self.seq, kind, label, text)
        self.seq += 1
        self.parts.append(part)
        if len(self.parts) > MAX_PARTS:
            del self.parts[_FIRST_PARTS]
            self.elided += 1
        return part

    def stream(self, ident: str, kind: str, label: str = "") -> _Part:
        found = self.streams.get(ident)
        if found is None:
            found = self.streams[ident] = self.part(kind, label)
        return found

    def wire_parts(self, chars: int | None = None) -> list[list[Any]]:
        parts = [part.wire(chars) for part in self.parts]
        if self.elided:
            parts.insert(_FIRST_PARTS, [-1, "elided", "", f"{self.elided} parts not kept"])
        return parts


@dataclass(slots=True)
class _Outcome:
    reward: float
    success: bool
    error: str | None
    tokens: tuple[int | None, int | None, int | None, int | None]
    error_type: str | None = None


_TOKEN_NAMES = ("input", "output", "reasoning", "cached")


@dataclass
class TaskRow:
    """One task's line of a run's summary."""

    task: Any
    episodes: int
    mean: float | None
    stderr: float | None
    success_rate: float | None
    passes: list[float | None]
    errors: int


@dataclass
class RunSummary:
    """A run's figures as the static summary shows them (from a ``RunState`` or an ``EvalResult``)."""

    environment: str
    split: str
    agent: str | None
    episodes: int
    total: int | None
    tasks: int
    rollouts: int
    mean: float | None
    stderr: float | None
    ks: list[int]
    passes: list[float | None]
    success_rate: float | None
    errors: int
    last_errors: list[tuple[str, str, str]] = field(default_factory=list)
    """(task/rollout, error type, message) of the last errors."""
    tokens: dict[str, int | None] | None = None
    elapsed_s: float | None = None
    rate: float | None = None
    resumed: int = 0
    status: str | None = None
    task_rows: list[TaskRow] = field(default_factory=list)
    grid: list[tuple[Any, list[tuple[float | None, bool]]]] = field(default_factory=list)
    """(task, [(reward or None, failed) per rollout]) for the first tasks."""
    ids: list[tuple[str, str]] = field(default_factory=list)
    note: str | None = None
    """Why success and pass@k are 0 though rewards are positive (``ors_lab.stats.success_note``), or None."""


def _pm(value: float | None, err: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" + (f" ± {err:.3f}" if err is not None else "")


def _f3(value: float | None) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def tokens_text(tokens: Mapping[str, int | None] | None) -> str | None:
    """Tokens as a person reads them (``840 in, 786 out (636 reasoning, 640 cached)``); None when none were reported."""
    if not tokens or all(tokens.get(name) is None for name in _TOKEN_NAMES):
        return None
    main = f"{tokens.get('input') or 0} in, {tokens.get('output') or 0} out"
    extra = [f"{tokens[name]} {name}" for name in ("reasoning", "cached") if tokens.get(name)]
    return main + (f" ({', '.join(extra)})" if extra else "")


def _grid_html(grid: Sequence[tuple[Any, Sequence[tuple[float | None, bool]]]], more: int) -> str:
    """One column of cells per task (its rollouts downwards), the columns wrapping, as the dashboard draws it."""
    if not grid:
        return ""
    columns = []
    for task, row in grid:
        cells = []
        for rollout, (reward, failed) in enumerate(row):
            what = "failed" if failed else "not run" if reward is None else f"reward {fmt(reward)}"
            style = f"background:{colour(reward, error=failed)}"
            cells.append(f'<div class="ol-cell" style="{style}" title="task {escape(task)} rollout {rollout}: {what}">'
                         "</div>")  # fmt: skip
        columns.append(f'<div class="ol-grid" title="task {escape(task)}">{"".join(cells)}</div>')
    note = f'<div class="ol-dim">and {more} more tasks</div>' if more else ""
    flow = "display:flex; flex-wrap:wrap; gap:2px; margin:4px 0; max-width:620px"
    return f'<div style="{flow}">{"".join(columns)}</div>{note}'


def task_table(rows: Sequence[TaskRow], ks: Sequence[int]) -> Markup:
    """One line per task: its episodes, mean reward ± stderr, success rate, pass@k and errors."""
    headers = ["task", "episodes", "mean reward", "success rate", *[f"pass@{k}" for k in ks], "errors"]
    lines = [(r.task, r.episodes, _pm(r.mean, r.stderr), _f3(r.success_rate), *map(_f3, r.passes), r.errors)
             for r in rows]  # fmt: skip
    return table(headers, lines, numeric=[False, True, True, True, *[True] * len(ks), True])


def run_summary_html(summary: RunSummary) -> Markup:
    """A run's static summary: a card (rewards and errors first, ids last), the errors, a small grid, the tasks."""
    s = summary
    rows: list[tuple[str, Any]] = [("mean reward", _pm(s.mean, s.stderr))]
    rows += [(f"pass@{k}", _f3(value)) for k, value in zip(s.ks, s.passes, strict=True)]
    rows.append(("success rate", _f3(s.success_rate)))
    if s.note is not None:
        rows.append(("note", s.note))
    rows.append(("errors", s.errors))
    total = f" of {s.total}" if s.total is not None and s.total != s.episodes else ""
    resumed = f", {s.resumed} resumed" if s.resumed else ""
    rows.append(("episodes", f"{s.episodes}{total} ({s.tasks} tasks x {s.rollouts} rollouts{resumed})"))
    tokens = tokens_text(s.tokens)
    if tokens is not None:
        rows.append(("tokens", tokens))
    if s.elapsed_s is not None:
        rate = f", {s.rate:.1f}/s" if s.rate is not None else ""
        rows.append(("time", f"{s.elapsed_s:.1f} s{rate}"))
    if s.agent:
        rows.append(("agent", s.agent))
    rows += s.ids
    subtitle = s.status if s.status not in (None, "finished") else None
    errors = ""
    if s.last_errors:
        errors = '<div class="ol-title" style="margin-top:6px">last errors</div>' + table(
            ["task/rollout", "type", "error"], [(key, kind, message[:300]) for key, kind, message in s.last_errors]
        )
    more_tasks = max(s.tasks - len(s.task_rows), 0)
    tasks = Markup("")
    if s.task_rows:
        tasks = task_table(s.task_rows, s.ks)
        if more_tasks:
            tasks = Markup(tasks + f'<div class="ol-dim">and {more_tasks} more tasks</div>')
    grid = _grid_html(s.grid, max(s.tasks - len(s.grid), 0))
    return styled(card(f"eval {s.environment}/{s.split}", rows, subtitle=subtitle, extra=errors + grid + tasks))


# -- the state ------------------------------------------------------------------------------------


class RunState(ViewState):
    """An evaluation as its dashboard shows it; see the module docstring.

    ``keys`` are the run's (task index, rollout) pairs in order; ``resumed`` the outcomes of those
    a trace already holds, as its ``episode`` rows record them (``EpisodeEvent.record()``: at least
    ``task_index``, ``rollout``, ``reward``, ``success``, ``error`` and the token counts).
    ``success_threshold`` is the run's, when known: the note names it (else the argument's default).
    """

    name: ClassVar[str] = "run"
    kinds: ClassVar[Iterable[str] | None] = tuple(
        kind for kind in AGENT_KINDS if kind not in ("block-end", "text-end", "reasoning-end", "tool-input-end")
    )

    def __init__(
        self,
        environment: str,
        split: str,
        keys: Sequence[tuple[int, int]],
        *,
        agent: str | None = None,
        resumed: Iterable[Mapping[str, Any]] = (),
        label: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        success_threshold: float | None = None,
    ) -> None:
        self.id = uuid.uuid4().hex  # the front end keeps what its views of this run hold under it
        self.success_threshold = success_threshold
        self.environment = environment
        self.split = split
        self.agent = agent
        self.label = label if label is not None else f"eval {environment}/{split}"
        self.clock = clock
        self.started = clock()
        self.ended: float | None = None
        self.status = "running"
        self.total = len(keys)
        self.rollouts = max((rollout for _, rollout in keys), default=-1) + 1
        self.ks = sorted({1, max(self.rollouts, 1)})
        self.tasks: list[int] = list(dict.fromkeys(task for task, _ in keys))
        row = {task: n for n, task in enumerate(self.tasks)}
        self._cell = {(task, rollout): row[task] * self.rollouts + rollout for task, rollout in keys}
        self._grid = bytearray(b" " * (len(self.tasks) * self.rollouts))
        for index in self._cell.values():
            self._grid[index] = ord(".")
        self._outcomes: list[_Outcome | None] = [None] * len(self._grid)
        self._per_task: dict[int, list[int]] = {task: [0, 0, 0] for task in self.tasks}  # episodes, successes, errors
        self.episodes = 0  # done: finished, resumed ones included
        self.resumed = 0
        self.errors = 0
        self.last_errors: deque[tuple[str, str, str]] = deque(maxlen=MAX_ERRORS)
        self._tokens: list[int | None] = [None, None, None, None]  # finished episodes' (input, output, ...)
        self._run_tokens = 0  # input + output tokens of this run's episodes (finished and live)
        self._running: dict[str, _Live] = {}
        self._shown: list[str] = []
        self._transcripts: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._pending: deque[dict[str, Any]] = deque(maxlen=INBOX_PER_SEND)
        # running figures, kept up to date per episode (exact ones are computed at the end)
        self._sum = 0.0
        self._squares = 0.0
        self._rewarded = 0  # episodes with a finite reward: those the sums hold
        self._successes = 0
        self._pass_sum = [0.0] * len(self.ks)
        self._pass_known = [0] * len(self.ks)
        self._hist = [0] * HIST_BINS
        self._hist_range = (0.0, 1.0)
        self._series_t: list[float] = []
        self._series_v: list[float] = []
        self._stride = 1
        self._version = 0
        self._exact_at = -1
        self._exact: dict[str, Any] = {}
        self._note_at = -1
        self._note: str | None = None
        self._handlers: dict[str, Callable[[Any], bool]] = {
            "start": self._start,
            "block-start": self._block,
            "text-start": self._text_start,
            "text-delta": self._delta,
            "reasoning-start": self._text_start,
            "reasoning-delta": self._delta,
            "tool-input-start": self._tool_start,
            "tool-input-delta": self._tool_delta,
            "tool-input-available": self._tool_input,
            "tool-output-available": self._tool_output,
            "tool-output-error": self._tool_error,
            "reward": self._reward,
            "usage": self._usage,
            "finish": self._finish,
            "error": self._error,
            "episode": self._episode,
        }
        self.resume(resumed)

    def __repr__(self) -> str:
        return f"RunState({self.text()!r})"

    def resume(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Count outcomes a trace already held (``resumed=`` at the start does this): done, not run now."""
        for record in records:
            key = (int(record["task_index"]), int(record["rollout"]))
            if key in self._cell:
                tokens = tuple(record.get(f"{name}_tokens") for name in _TOKEN_NAMES)
                outcome = _Outcome(float(record["reward"]), bool(record["success"]), record.get("error"), tokens,  # type: ignore[arg-type]
                                   record.get("error_type"))  # fmt: skip
                self._record(key, outcome, resumed=True)

    # -- events -----------------------------------------------------------------------------------

    def apply(self, event: Event) -> bool:
        handle = self._handlers.get(event.kind)
        return handle(event) if handle is not None else False

    def _start(self, event: StartEvent) -> bool:
        key = None if event.task_index is None or event.rollout is None else (event.task_index, event.rollout)
        self._running[event.message_id] = _Live(event.message_id, key, self.clock())
        index = self._cell.get(key) if key is not None else None
        if index is not None and self._outcomes[index] is None:
            self._grid[index] = ord("~")
        return True

    def _live(self, event: Event) -> _Live | None:
        return self._running.get(event.session_id) if event.session_id is not None else None

    def _block(self, event: BlockStartEvent) -> bool:
        live = self._live(event)
        if live is None:
            return False
        live.part("block", event.block_name)
        return True

    def _text_start(self, event: TextStartEvent | ReasoningStartEvent) -> bool:
        live = self._live(event)
        if live is None:
            return False
        live.stream(event.id, "text" if event.kind == "text-start" else "reasoning")
        return True

    def _delta(self, event: TextDeltaEvent | ReasoningDeltaEvent) -> bool:
        live = self._live(event)
        if live is None:
            return False
        live.stream(event.id, "text" if event.kind == "text-delta" else "reasoning").add(event.delta)
        return True

    def _tool_start(self, event: ToolInputStartEvent) -> bool:
        live = self._live(event)
        if live is None:
            return False
        live.stream(event.tool_call_id, "tool", event.tool_name)
        return True

    def _tool_delta(self, event: ToolInputDeltaEvent) -> bool:
        live = self._live(event)
        if live is None:
            return False
        live.stream(event.tool_call_id, "tool").add(event.input_text_delta)
        return True

    def _tool_input(self, event: ToolInputAvailableEvent) -> bool:
        live = self._live(event)
        if live is None:
            return False
        part = live.stream(event.tool_call_id, "tool", event.tool_name)
        part.label = event.tool_name
        if not part.head:  # not streamed: the whole input at once
            part.add(compact_json(event.input))
        return True

    def _tool_output(self, event: ToolOutputAvailableEvent) -> bool:
        live = self._live(event)
        if live is None:
            return False
        output = event.output
        text = output.get("text") if isinstance(output, Mapping) else None
        live.part("output", event.tool or "", text if isinstance(text, str) else compact_json(output))
        live.streams.pop(event.tool_call_id, None)
        return True

    def _tool_error(self, event: ToolOutputErrorEvent) -> bool:
        live = self._live(event)
        if live is None:
            return False
        live.part("tool-error", event.tool or "", event.error)
        live.streams.pop(event.tool_call_id, None)
        return True

    def _reward(self, event: RewardEvent) -> bool:
        live = self._live(event)
        if live is None:
            return False
        live.reward = event.reward
        live.part("reward", "finished" if event.finished else "", fmt(event.reward))
        return True

    def _usage(self, event: UsageEvent) -> bool:
        live = self._live(event)
        if live is None or event.scope != "call":  # an episode's totals come with its outcome
            return False
        counts = (event.input_tokens, event.output_tokens, event.reasoning_tokens, event.cached_tokens)
        for n, value in enumerate(counts):
            live.tokens[n] += value or 0
        self._run_tokens += (event.input_tokens or 0) + (event.output_tokens or 0)
        return True

    def _finish(self, event: FinishEvent) -> bool:
        live = self._live(event)
        if live is None:
            return False
        live.part("finish", "", event.finish_reason)
        return True

    def _error(self, event: ErrorEvent) -> bool:
        live = self._live(event)
        if live is None:
            return False
        live.part("error", event.error_type, event.message)
        return True

    def _episode(self, event: EpisodeEvent) -> bool:
        key = (event.task_index, event.rollout if event.rollout is not None else 0)
        live = self._running.pop(event.session_id, None) if event.session_id is not None else None
        tokens = (event.input_tokens, event.output_tokens, event.reasoning_tokens, event.cached_tokens)
        if live is not None:  # its calls' tokens, counted live, give way to the episode's totals
            self._run_tokens -= live.tokens[0] + live.tokens[1]
        self._run_tokens += (event.input_tokens or 0) + (event.output_tokens or 0)
        self._record(key, _Outcome(event.reward, event.success, event.error, tokens, event.error_type), resumed=False)
        if event.error is not None:
            self.last_errors.append((f"{key[0]}/{key[1]}", event.error_type or "error", event.error))
        name = f"{key[0]}/{key[1]}"
        transcript: dict[str, Any] = {
            "key": name,
            "task": key[0],
            "rollout": key[1],
            "session_id": event.session_id,
            "reward": event.reward,
            "success": event.success,
            "finished": event.finished,
            "finish_reason": event.finish_reason,
            "steps": event.steps,
            "duration_s": round(event.duration_s, 3),
            "error": event.error,
            "error_type": event.error_type,
            "tokens": dict(zip(_TOKEN_NAMES, tokens, strict=True)) if any(t is not None for t in tokens) else None,
            "parts": live.wire_parts() if live is not None else [],
        }
        self._transcripts[name] = transcript
        self._transcripts.move_to_end(name)
        if len(self._transcripts) > KEEP_TRANSCRIPTS:
            self._transcripts.popitem(last=False)
        self._pending.append(transcript)
        return True

    def _record(self, key: tuple[int, int], outcome: _Outcome, *, resumed: bool) -> None:
        """Count one finished episode (a second outcome for the same pair replaces the first)."""
        index = self._cell.get(key)
        if index is None:  # not of this run's plan: counted, but not on the grid
            index = len(self._outcomes)
            self._cell[key] = index
            self._outcomes.append(None)
            self._per_task.setdefault(key[0], [0, 0, 0])
        old = self._outcomes[index]
        task = self._per_task[key[0]]
        self._count_pass(task, -1)
        if old is not None:
            self._count(old, task, -1)
        self._outcomes[index] = outcome
        self._count(outcome, task, 1)
        self._count_pass(task, 1)
        self.resumed += resumed
        for n, value in enumerate(outcome.tokens):
            if value is not None:
                self._tokens[n] = (self._tokens[n] or 0) + value
        if index < len(self._grid):
            if outcome.error is not None:
                self._grid[index] = ord("x")
            else:
                level = min(max(outcome.reward, 0.0), 1.0) if math.isfinite(outcome.reward) else 0.0
                self._grid[index] = ord("A") + round(level * _LEVELS)
        self._version += 1
        if not resumed:
            self._point()

    def _count(self, outcome: _Outcome, task: list[int], sign: int) -> None:
        """Add (``sign`` 1) or take away (-1) an outcome from the running counts."""
        failed = outcome.error is not None
        self.episodes += sign
        task[0] += sign
        task[1] += sign * outcome.success
        task[2] += sign * failed
        self.errors += sign * failed
        self._successes += sign * outcome.success
        reward = outcome.reward
        if not math.isfinite(reward):
            return
        self._sum += sign * reward
        self._squares += sign * reward * reward
        self._rewarded += sign
        lo, hi = self._hist_range
        if lo <= reward <= hi:
            self._hist[min(int((reward - lo) / (hi - lo) * HIST_BINS), HIST_BINS - 1)] += sign
        else:  # a reward beyond the range so far: the bins widen to hold it (rare: rewards are mostly in [0, 1])
            self._hist_range = (min(lo, reward), max(hi, reward))
            self._rebin()

    def _rebin(self) -> None:
        lo, hi = self._hist_range
        counts = [0] * HIST_BINS
        for o in self._outcomes:
            if o is not None and math.isfinite(o.reward):
                counts[min(int((o.reward - lo) / (hi - lo) * HIST_BINS), HIST_BINS - 1)] += 1
        self._hist = counts

    def _count_pass(self, task: list[int], sign: int) -> None:
        """Add or take away a task's pass@k from the sums the running mean over tasks is made of."""
        if not task[0]:
            return
        for n, k in enumerate(self.ks):
            value = pass_at_k(task[0], task[1], k)
            if value is not None:
                self._pass_sum[n] += sign * value
                self._pass_known[n] += sign

    def _point(self) -> None:
        """A point of the running mean over time, every ``_stride`` episodes (the line stays short)."""
        if (self.episodes - self.resumed) % self._stride or not self.episodes:
            return
        self._series_t.append(round(self.clock() - self.started, 3))
        self._series_v.append(round(self._sum / max(self._rewarded, 1), 4))
        if len(self._series_t) > SERIES_POINTS:
            self._series_t, self._series_v = self._series_t[::2], self._series_v[::2]
            self._stride *= 2

    def end(self, status: str = "finished") -> None:
        """The run is over (``finished``, ``interrupted`` or ``failed``): the clock stops, no episode is running."""
        if self.ended is None:
            self.ended = self.clock()
        self.status = status
        for live in self._running.values():
            index = self._cell.get(live.key) if live.key is not None else None
            if index is not None and index < len(self._grid) and self._outcomes[index] is None:
                self._grid[index] = ord(".")
        self._running.clear()
        self._shown.clear()
        self._version += 1

    # -- figures ----------------------------------------------------------------------------------

    def elapsed(self) -> float:
        """Seconds since the run started (until it ended)."""
        return (self.ended if self.ended is not None else self.clock()) - self.started

    def figures(self) -> dict[str, Any]:
        """The mean reward, its stderr, the success rate and pass@k (the mean over tasks) of the episodes done.

        While the run goes on they come from running sums, kept per episode (no pass over the
        episodes at each update); once it has ended, from ``ors_lab.stats`` over every episode, as
        ``EvalResult``'s frames compute them, so the last figures are the result's to the last digit.
        """
        n, rewarded = self.episodes, self._rewarded
        if self.ended is None:
            variance = (self._squares - self._sum * self._sum / rewarded) / (rewarded - 1) if rewarded > 1 else None
            sums = zip(self._pass_sum, self._pass_known, strict=True)
            return {
                "mean": self._sum / rewarded if rewarded else None,
                "stderr": math.sqrt(max(variance, 0.0) / rewarded) if variance is not None else None,
                "success_rate": self._successes / n if n else None,
                "pass": [total / known if known else None for total, known in sums],
            }
        if self._exact_at != self._version:
            outcomes = [o for o in self._outcomes if o is not None]
            rewards = [o.reward for o in outcomes if math.isfinite(o.reward)]  # as the running sums, and pandas' mean
            passes = []
            for k in self.ks:
                known = [p for n, c, _ in self._per_task.values() if n and (p := pass_at_k(n, c, k)) is not None]
                passes.append(mean(known) if known else None)
            self._exact = {
                "mean": mean(rewards),
                "stderr": stderr(rewards),
                "success_rate": sum(o.success for o in outcomes) / len(outcomes) if outcomes else None,
                "pass": passes,
            }
            self._exact_at = self._version
        return self._exact

    def note(self) -> str | None:
        """Why success and pass@k are 0 though rewards are positive, naming ``success_threshold=``; None when
        an episode succeeded or none earned a reward (made once per change of the outcomes)."""
        if self._note_at != self._version:
            self._note = None
            if not self._successes and self._rewarded:
                rewards = [o.reward for o in self._outcomes if o is not None and o.error is None]
                self._note = success_note(self.episodes, self._successes, rewards, self.success_threshold)
            self._note_at = self._version
        return self._note

    def tokens(self) -> dict[str, int | None] | None:
        """Tokens of the finished episodes (input, output, reasoning, cached; None when never reported)."""
        if all(value is None for value in self._tokens):
            return None
        return dict(zip(_TOKEN_NAMES, self._tokens, strict=True))

    def rate(self) -> float:
        """Episodes a second of this run (resumed ones not counted)."""
        return (self.episodes - self.resumed) / max(self.elapsed(), 1e-9)

    # -- what is drawn ----------------------------------------------------------------------------

    def done(self) -> bool:
        return self.ended is not None

    def snapshot(self) -> dict[str, Any]:
        figures = self.figures()
        elapsed = self.elapsed()
        rate = self.rate()
        left = self.total - self.episodes
        tokens = self.tokens()
        rows = max(GRID_CELLS // max(self.rollouts, 1), 1)
        shown_tasks = self.tasks[:rows]
        return {
            "id": self.id,
            "label": self.label,
            "environment": self.environment,
            "split": self.split,
            "agent": self.agent,
            "status": self.status,
            "done": self.episodes,
            "total": self.total,
            "resumed": self.resumed,
            "running": len(self._running),
            "elapsed_s": round(elapsed, 3),
            "rate": round(rate, 3),
            "eta_s": round(left / rate, 1) if rate > 0 and left > 0 and self.ended is None else None,
            "mean": figures["mean"],
            "stderr": figures["stderr"],
            "success_rate": figures["success_rate"],
            "pass": [[k, value] for k, value in zip(self.ks, figures["pass"], strict=True)],
            "note": self.note(),
            "errors": self.errors,
            "last_errors": [list(error) for error in self.last_errors],
            "tokens": tokens,
            "tokens_per_s": round(self._run_tokens / max(elapsed, 1e-9), 1) if tokens or self._run_tokens else None,
            "grid": {
                "rollouts": self.rollouts,
                "tasks": _ranges(shown_tasks),
                "cells": self._grid[: len(shown_tasks) * self.rollouts].decode("ascii"),
                "more_tasks": len(self.tasks) - len(shown_tasks),
            },
            "hist": {"lo": self._hist_range[0], "hi": self._hist_range[1], "counts": list(self._hist)},
            "series": {"t": list(self._series_t), "mean": list(self._series_v)},
            "panes": self._panes(),
            "kept": len(self._transcripts),
        }

    def _panes(self) -> list[dict[str, Any]]:
        """The live episodes shown: those already shown first (panes do not jump), then the latest started."""
        running = self._running
        shown = [sid for sid in self._shown if sid in running]
        if len(shown) < MAX_PANES:
            for sid in reversed(running):
                if len(shown) >= MAX_PANES:
                    break
                if sid not in shown:
                    shown.append(sid)
        self._shown = shown
        now = self.clock()
        panes = []
        for sid in shown:
            live = running[sid]
            parts = live.parts[-PANE_PARTS:]
            panes.append({
                "session_id": sid,
                "key": None if live.key is None else f"{live.key[0]}/{live.key[1]}",
                "elapsed_s": round(now - live.started, 1),
                "reward": live.reward,
                "parts": [part.wire(PANE_CHARS) for part in parts],
            })  # fmt: skip
        return panes

    def inbox(self) -> list[Any]:
        items = list(self._pending)
        self._pending.clear()
        return items

    def request(self, message: dict[str, Any]) -> dict[str, Any] | None:
        key = message.get("transcript")
        if not isinstance(key, str):
            return None
        found = self._transcripts.get(key)
        if found is not None:
            return {"transcript": found}
        index = self._cell.get(_parse_key(key)) if _parse_key(key) is not None else None  # type: ignore[arg-type]
        outcome = self._outcomes[index] if index is not None else None
        why = ("resumed from the trace: its events are in the trace" if outcome is not None and index is not None
               else "not run yet" if index is not None else "not an episode of this run")  # fmt: skip
        if outcome is not None and self.episodes - self.resumed > KEEP_TRANSCRIPTS:
            why = f"not kept (the last {KEEP_TRANSCRIPTS} are): its events are in the trace, if the run recorded one"
        return {"transcript": {"key": key, "missing": why}}

    def text(self) -> str:
        figures = self.figures()
        done, ran = self.episodes, self.episodes - self.resumed
        average = _f3(figures["mean"])
        resumed = f" ({self.resumed} resumed)" if self.resumed else ""
        line = (
            f"{self.label}: {done}/{self.total} episodes{resumed}  {ran / max(self.elapsed(), 1e-9):.1f}/s  "
            f"mean reward {average}  errors {self.errors}"
        )
        tokens = self.tokens()
        if tokens is not None:
            line += f"  tokens {(tokens['input'] or 0) + (tokens['output'] or 0)}"
        note = self.note() if self.status != "running" else None
        if note is not None:
            line += f"\n  {note}"
        if self.status != "running" and self.errors and self.last_errors:
            line += "\n" + self._errors_text()
        return line

    def _errors_text(self) -> str:
        """The run's errors once it has ended: their types with their counts, and the last one's message."""
        kinds = Counter(o.error_type or "error" for o in self._outcomes if o is not None and o.error is not None)
        key, kind, message = self.last_errors[-1]
        if len(message) > ERROR_CHARS:
            message = message[: ERROR_CHARS - 1] + "…"
        counts = ", ".join(f"{name} ×{count}" for name, count in kinds.most_common())
        last = "\n".join("    " + line for line in f"{kind}: {message}".splitlines())
        return f"  errors: {counts}; the last, of task/rollout {key}:\n{last}"

    def summary(self) -> RunSummary:
        """The figures of the static summary."""
        figures = self.figures()
        task_rows = []
        grid: list[tuple[Any, list[tuple[float | None, bool]]]] = []
        for n, task in enumerate(self.tasks):
            cells = self._outcomes[n * self.rollouts : (n + 1) * self.rollouts]
            done = [o for o in cells if o is not None]
            if n < TABLE_TASKS:
                episodes, successes, errors = self._per_task[task]
                rewards = [o.reward for o in done]
                passes = [pass_at_k(episodes, successes, k) if episodes else None for k in self.ks]
                task_rows.append(TaskRow(task, episodes, mean(rewards), stderr(rewards),
                                         successes / episodes if episodes else None, passes, errors))  # fmt: skip
            if (n + 1) * self.rollouts <= HTML_CELLS:
                grid.append((task, [(None, False) if o is None else (o.reward, o.error is not None) for o in cells]))
        return RunSummary(
            environment=self.environment,
            split=self.split,
            agent=self.agent,
            episodes=self.episodes,
            total=self.total,
            tasks=len(self.tasks),
            rollouts=self.rollouts,
            mean=figures["mean"],
            stderr=figures["stderr"],
            ks=list(self.ks),
            passes=list(figures["pass"]),
            success_rate=figures["success_rate"],
            errors=self.errors,
            last_errors=list(self.last_errors),
            tokens=self.tokens(),
            elapsed_s=self.elapsed(),
            rate=self.rate(),
            resumed=self.resumed,
            status=self.status,
            task_rows=task_rows,
            grid=grid,
            note=self.note(),
        )

    def html(self) -> str:
        return run_summary_html(self.summary())


def _ranges(values: Sequence[int]) -> list[list[int]]:
    """Consecutive runs of integers as ``[first, last]`` pairs (the grid's task indices, compactly)."""
    out: list[list[int]] = []
    for value in values:
        if out and value == out[-1][1] + 1:
            out[-1][1] = value
        else:
            out.append([value, value])
    return out


def _parse_key(key: str) -> tuple[int, int] | None:
    task, _, rollout = key.partition("/")
    try:
        return int(task), int(rollout)
    except ValueError:
        return None
