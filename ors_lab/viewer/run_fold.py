"""A run's events folded: its outcomes, running figures, grid and live episodes (``RunFold``).

``RunFold`` is fed the agent events an evaluation publishes on its stream (the seed's vocabulary
in ``ors_lab.events``: ``start`` opens an episode, its deltas, tool calls, rewards and ``finish``
follow, ``episode`` ends it with its outcome) and made with the run's plan (``ors_lab.feed.plan.RunPlan``:
environment, split, agent, the (task, rollout) pairs) and the outcomes resumed from a trace. It keeps
what the dashboard is drawn from (``ors_lab.viewer.run_view``), in bounded memory:

- the outcomes, done / total, the running sums of the mean reward, its standard error, pass@k
  (per task, ``ors_lab.stats``) and the reward histogram, the mean over time, kept per episode;
  ``figures()`` (exact from every outcome once the run has ended), ``note()``, ``tokens()``, ``rate()``;
- the errors and the last ``MAX_ERRORS``;
- the tasks x rollouts grid as codes (``_LEVELS``);
- against a baseline (its ``baseline`` event), the running paired delta of the tasks that have ended
  (``ors_lab.viewer.run_baseline.LiveBaseline``) and each finished cell's delta code;
- each live episode (``LiveEpisode``): its parts in order, their deltas joined by
  ``ors_lab.transcript.AgentStream`` (the one joiner), at most ``MAX_PARTS`` parts;
- each finished episode's transcript, handed once to the front end (``INBOX_PER_SEND`` a send at
  most), the last ``KEEP_TRANSCRIPTS`` kept to answer it later.
"""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from ors_lab.events import AGENT_KINDS, BaselineEvent, EpisodeEvent, Event, StartEvent, UsageEvent, compact_json
from ors_lab.feed.plan import RunPlan
from ors_lab.html import fmt
from ors_lab.stats import mean, pass_at_k, stderr, success_note
from ors_lab.transcript import AgentStream, Part
from ors_lab.viewer.run_summary import MAX_ERRORS, TOKEN_NAMES

if TYPE_CHECKING:
    from ors_lab.viewer.run_baseline import LiveBaseline

__all__ = [
    "FOLD_KINDS",
    "HIST_BINS",
    "INBOX_PER_SEND",
    "KEEP_TRANSCRIPTS",
    "MAX_PARTS",
    "PART_CHARS",
    "SERIES_POINTS",
    "LiveEpisode",
    "RunFold",
    "cut",
    "tail",
]

FOLD_KINDS = tuple(
    kind for kind in AGENT_KINDS if kind not in ("block-end", "text-end", "reasoning-end", "tool-input-end")
)
"""The agent kinds a run's dashboard takes."""
_TAKEN = frozenset(FOLD_KINDS)
PART_CHARS = 1200
"""A transcript part's text at most: its first 800 characters and its last 400."""
MAX_PARTS = 60
"""A transcript's parts at most: the first 8 and the latest, with the count of those left out."""
INBOX_PER_SEND = 100
"""Finished transcripts handed to the front end in one update (the latest, when more finished)."""
KEEP_TRANSCRIPTS = 2_000
"""Finished transcripts kept here, to answer the front end after the run (the latest)."""
SERIES_POINTS = 200
"""Points of the reward-over-time line at most (every other one is dropped when full)."""
HIST_BINS = 10

_HEAD = 800
_TAIL = PART_CHARS - _HEAD
_FIRST_PARTS = 8
_LEVELS = 20
"""Grid codes: ``" "`` not planned, ``"."`` waiting, ``"~"`` running, ``"x"`` failed, ``"A"``..``"U"``
a reward clipped to [0, 1] in twentieths (the colour the front end gives ``level / 20``)."""


def cut(text: str) -> str:
    """A part's text as a transcript holds it: whole up to ``PART_CHARS``, else its first 800 characters
    and its last 400 around the count of those left out."""
    if len(text) <= PART_CHARS:
        return text
    return f"{text[:_HEAD]} … [{len(text) - PART_CHARS} characters] … {text[-_TAIL:]}"


def tail(text: str, chars: int) -> str:
    """The last ``chars`` characters of a part's text as a transcript holds it (what a live pane shows)."""
    if len(text) <= PART_CHARS or chars <= _TAIL:
        return text[-chars:]
    return cut(text)[-chars:]


class _Item:
    """One part of a live episode as its transcript lists it: a joined part's (``part``), or an event's ``text``."""

    __slots__ = ("kind", "label", "part", "seq", "text")

    def __init__(self, seq: int, kind: str, label: str = "", text: str = "", part: Part | None = None) -> None:
        self.seq, self.kind, self.label, self.text, self.part = seq, kind, label, text, part

    def whole(self) -> str:
        part = self.part
        if part is None:
            return self.text
        if part.kind == "tool-call":
            return part.arguments
        return part.text

    def wire(self, chars: int | None = None) -> list[Any]:
        label = (self.part.tool or "") if self.part is not None and self.part.kind == "tool-call" else self.label
        whole = self.whole()
        return [self.seq, self.kind, label, cut(whole) if chars is None else tail(whole, chars)]


class LiveEpisode:
    """A running episode: its key, its parts so far (the stream's parts and the events between them), the
    tokens its LLM calls reported."""

    __slots__ = ("elided", "items", "key", "reward", "seq", "shown", "sid", "started", "stream", "tokens")

    def __init__(self, sid: str, key: tuple[int, int] | None, started: float) -> None:
        self.sid = sid
        self.key = key
        self.started = started
        self.stream = AgentStream()
        self.items: list[_Item] = []
        self.shown: dict[int, _Item] = {}  # id() of a part of the stream -> its item
        self.seq = 0
        self.elided = 0
        self.reward: float | None = None
        self.tokens = [0, 0, 0, 0]

    def add(self, kind: str, label: str = "", text: str = "", part: Part | None = None) -> None:
        self.items.append(_Item(self.seq, kind, label, text, part))
        self.seq += 1
        if len(self.items) > MAX_PARTS:
            del self.items[_FIRST_PARTS]
            self.elided += 1

    def take(self, event: Event) -> None:
        """One agent event of this episode: its part joined by the stream, listed where it began."""
        kind = event.kind
        part = self.stream.take(event)
        if part is not None and kind in _JOINED:
            if id(part) not in self.shown:
                self.add("tool" if part.kind == "tool-call" else part.kind, part=part)
                self.shown[id(part)] = self.items[-1]
            return
        label = getattr(event, "tool", None) or ""
        if kind == "block-start":
            self.add("block", getattr(event, "block_name", ""))
        elif kind == "tool-output-available":
            output = getattr(event, "output", None)
            text = output.get("text") if isinstance(output, Mapping) else None
            self.add("output", label, text if isinstance(text, str) else compact_json(output))
            self._done(part)
        elif kind == "tool-output-error":
            self.add("tool-error", label, getattr(event, "error", ""))
            self._done(part)
        elif kind == "reward":
            self.reward = getattr(event, "reward", None)
            self.add("reward", "finished" if getattr(event, "finished", False) else "", fmt(self.reward))
        elif kind == "finish":
            self.add("finish", "", getattr(event, "finish_reason", ""))
        elif kind == "error":
            self.add("error", getattr(event, "error_type", ""), getattr(event, "message", ""))

    def _done(self, part: Part | None) -> None:
        """A tool call has its outcome: what its input streams next is a part of its own."""
        if part is not None:
            self.shown.pop(id(part), None)

    def wire_parts(self, chars: int | None = None) -> list[list[Any]]:
        parts = [item.wire(chars) for item in self.items]
        if self.elided:
            parts.insert(_FIRST_PARTS, [-1, "elided", "", f"{self.elided} parts not kept"])
        return parts


_JOINED = frozenset(("text-start", "text-delta", "reasoning-start", "reasoning-delta", "tool-input-start",
                     "tool-input-delta", "tool-input-available"))  # fmt: skip
"""The kinds whose events are pieces of one part: listed once, where the part began."""


@dataclass(slots=True)
class _Outcome:
    reward: float
    success: bool
    error: str | None
    tokens: tuple[int | None, int | None, int | None, int | None]
    error_type: str | None = None


class RunFold:
    """A run's events folded; see the module docstring.

    ``keys`` are the run's (task index, rollout) pairs in order; ``resumed`` the outcomes of those
    a trace already holds, as its ``episode`` rows record them (``EpisodeEvent.record()``: at least
    ``task_index``, ``rollout``, ``reward``, ``success``, ``error`` and the token counts).
    ``success_threshold`` is the run's, when known: the note names it (else the argument's default).
    """

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
        self.plan = plan = RunPlan(environment, split, keys, agent, label)
        self.environment = plan.environment
        self.split = plan.split
        self.agent = plan.agent
        self.label = plan.label
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
        self._planned = Counter(task for task, _ in keys)
        self.baseline: LiveBaseline | None = None  # the run against its baseline, once its baseline event came
        self._deltas = bytearray(b" " * len(self._grid))  # each finished cell's delta code (``delta_code``)
        self._per_task: dict[int, list[int]] = {task: [0, 0, 0] for task in self.tasks}  # episodes, successes, errors
        self.episodes = 0  # done: finished, resumed ones included
        self.resumed = 0
        self.errors = 0
        self.last_errors: deque[tuple[str, str, str]] = deque(maxlen=MAX_ERRORS)
        self._tokens: list[int | None] = [None, None, None, None]  # finished episodes' (input, output, ...)
        self._run_tokens = 0  # input + output tokens of this run's episodes (finished and live)
        self._running: dict[str, LiveEpisode] = {}
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
            "usage": self._usage,
            "episode": self._episode,
            "baseline": self._baseline,
        }
        self.resume(resumed)

    @classmethod
    def of(cls, plan: RunPlan, **options: Any) -> Self:
        """The state of the run ``plan`` (``options``: the rest of ``__init__``'s)."""
        return cls(plan.environment, plan.split, plan.keys, agent=plan.agent, label=plan.label, **options)

    def resume(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Count outcomes a trace already held (``resumed=`` at the start does this): done, not run now."""
        for record in records:
            key = (int(record["task_index"]), int(record["rollout"]))
            if key in self._cell:
                tokens = tuple(record.get(f"{name}_tokens") for name in TOKEN_NAMES)
                outcome = _Outcome(float(record["reward"]), bool(record["success"]), record.get("error"), tokens,  # type: ignore[arg-type]
                                   record.get("error_type"))  # fmt: skip
                self._record(key, outcome, resumed=True)

    # -- events -----------------------------------------------------------------------------------

    def apply(self, event: Event) -> bool:
        handle = self._handlers.get(event.kind)
        if handle is not None:
            return handle(event)
        live = self._live(event) if event.kind in _TAKEN else None
        if live is None:
            return False
        live.take(event)
        return True

    def _start(self, event: StartEvent) -> bool:
        key = None if event.task_index is None or event.rollout is None else (event.task_index, event.rollout)
        self._running[event.message_id] = LiveEpisode(event.message_id, key, self.clock())
        index = self._cell.get(key) if key is not None else None
        if index is not None and self._outcomes[index] is None:
            self._grid[index] = ord("~")
        return True

    def _baseline(self, event: BaselineEvent) -> bool:
        """The baseline of this run (of its environment and split; another's is ignored): the tasks and cells
        already done compared at once."""
        if (event.environment, event.split) != (self.environment, self.split):
            return False
        from ors_lab.viewer.run_baseline import LiveBaseline  # deferred: paired statistics, for runs with a baseline

        self.baseline = LiveBaseline(event, self._planned)
        for (task, _), index in list(self._cell.items()):
            if index < len(self._grid) and self._outcomes[index] is not None:
                self._compare(task, index)
        self._version += 1
        return True

    def _compare(self, task: int, index: int) -> None:
        """A finished cell against the baseline: its delta code; its task compared when all its rollouts ended."""
        baseline = self.baseline
        assert baseline is not None
        outcome = self._outcomes[index]
        base = baseline.means.get(task)
        if outcome is None or base is None:
            return
        from ors_lab.viewer.run_baseline import delta_code

        self._deltas[index] = ord(delta_code(outcome.reward - base))
        if self._per_task[task][0] >= self._planned[task]:
            cells = [self._outcomes[self._cell[key]] for key in ((task, r) for r in range(self.rollouts))
                     if key in self._cell]  # fmt: skip
            if all(o is not None for o in cells):
                baseline.task_done(task, [o.reward for o in cells if o is not None])

    def _live(self, event: Event) -> LiveEpisode | None:
        return self._running.get(event.session_id) if event.session_id is not None else None

    def _usage(self, event: UsageEvent) -> bool:
        live = self._live(event)
        if live is None or event.scope != "call":  # an episode's totals come with its outcome
            return False
        counts = (event.input_tokens, event.output_tokens, event.reasoning_tokens, event.cached_tokens)
        for n, value in enumerate(counts):
            live.tokens[n] += value or 0
        self._run_tokens += (event.input_tokens or 0) + (event.output_tokens or 0)
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
            "tokens": dict(zip(TOKEN_NAMES, tokens, strict=True)) if any(t is not None for t in tokens) else None,
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
            if self.baseline is not None:
                self._compare(key[0], index)
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
        return dict(zip(TOKEN_NAMES, self._tokens, strict=True))

    def rate(self) -> float:
        """Episodes a second of this run (resumed ones not counted)."""
        return (self.episodes - self.resumed) / max(self.elapsed(), 1e-9)
