"""The evaluation dashboard's state (RunState) from event sequences, and evaluate() drawing it.

Synthetic sequences of the seed's agent events pin the bookkeeping; real evaluations against the
reference servers (and the replay server) pin that the dashboard's last figures are the
EvalResult's, that the live view stays within its bounds, and the text line ``ors-lab eval`` prints.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import ors_lab as ol
from ors_lab.agents.policy import Observation, ToolCall
from ors_lab.demo.launch import ServerProcess
from ors_lab.events import (
    BlockEndEvent,
    BlockStartEvent,
    EpisodeEvent,
    ErrorEvent,
    Event,
    EventStream,
    FinishEvent,
    ReasoningDeltaEvent,
    ReasoningEndEvent,
    ReasoningStartEvent,
    RewardEvent,
    StartEvent,
    TextDeltaEvent,
    TextEndEvent,
    TextStartEvent,
    ToolInputAvailableEvent,
    ToolInputDeltaEvent,
    ToolInputEndEvent,
    ToolInputStartEvent,
    ToolOutputAvailableEvent,
    UsageEvent,
)
from ors_lab.notebook import LiveView
from ors_lab.stats import mean, pass_at_k, stderr
from ors_lab.viewer import run as dashboard
from ors_lab.viewer.run import RunState
from tests.envs.common import LAB_TASKS
from tests.evaluation.policies import answer_for, expected_reward, lab_policy, slow_lab_policy
from tests.llm_server import LLMServer

pytestmark = pytest.mark.timeout(120)


# -- synthetic episodes -------------------------------------------------------------------------------


def episode(
    task: int,
    rollout: int,
    reward: float,
    *,
    error: str | None = None,
    thought: str = "The answer is four.",
    tokens: tuple[int, int] | None = None,
    ended: bool = True,
) -> list[Event]:
    """One episode's agent events as the harness publishes them: a turn that reasons, says, streams a
    tool call's input and gets its output and reward; then finish, usage and the outcome."""
    sid = f"s-{task}-{rollout}"
    words = thought.split(" ")
    events: list[Event] = [
        StartEvent(message_id=sid, environment="lab", split="test", task_index=task),
        BlockStartEvent(block_id="block-1", block_name="turn 1"),
        ReasoningStartEvent(id="reasoning-2"),
        *[ReasoningDeltaEvent(id="reasoning-2", delta=(" " if n else "") + word) for n, word in enumerate(words)],
        ReasoningEndEvent(id="reasoning-2"),
        TextStartEvent(id="text-3"),
        TextDeltaEvent(id="text-3", delta="Submitting."),
        TextEndEvent(id="text-3"),
        ToolInputStartEvent(tool_call_id="call-4", tool_name="submit"),
        ToolInputDeltaEvent(tool_call_id="call-4", input_text_delta='{"answer":'),
        ToolInputDeltaEvent(tool_call_id="call-4", input_text_delta=' "4"}'),
        ToolInputEndEvent(tool_call_id="call-4"),
        ToolInputAvailableEvent(tool_call_id="call-4", tool_name="submit", input={"answer": "4"}),
        ToolOutputAvailableEvent(
            tool_call_id="call-4", tool="submit", call=1, output={"text": "Correct!", "blocks": [], "metadata": None}
        ),
        RewardEvent(tool_call_id="call-4", tool="submit", call=1, reward=reward, finished=True),
    ]
    if tokens is not None:
        events.append(UsageEvent(scope="call", input_tokens=tokens[0], output_tokens=tokens[1]))
    events.append(BlockEndEvent(block_id="block-1"))
    if error is not None:
        events.append(ErrorEvent(error_type="internal_error", message=error, source="platform", code="RuntimeError"))
    if not ended:
        return _stamped(events, sid, rollout)
    events.append(FinishEvent(finish_reason="error" if error else "stop"))
    if tokens is not None:
        events.append(UsageEvent(scope="episode", input_tokens=tokens[0], output_tokens=tokens[1]))
    events.append(
        EpisodeEvent(
            environment="lab",
            split="test",
            task_index=task,
            reward=0.0 if error else reward,
            total_reward=reward,
            final_reward=reward,
            finished=error is None,
            success=error is None and reward >= 1.0,
            finish_reason="error" if error else "stop",
            steps=1,
            started=time.time(),
            duration_s=0.01,
            error=error,
            error_type="RuntimeError" if error else None,
            input_tokens=None if tokens is None else tokens[0],
            output_tokens=None if tokens is None else tokens[1],
        )
    )
    return _stamped(events, sid, rollout)


def _stamped(events: list[Event], sid: str, rollout: int) -> list[Event]:
    for event in events:
        event.session_id = sid
        event.rollout = rollout  # type: ignore[attr-defined]  # every agent event has one
    return events


def feed(state: RunState, events: list[Event]) -> None:
    """Apply the events the state subscribes to, as its LiveView would."""
    kinds = set(state.kinds or ())
    for event in events:
        if event.kind in kinds:
            state.apply(event)


KEYS = [(task, rollout) for task in range(2) for rollout in range(3)]


def test_synthetic_events_build_the_figures_the_grid_and_the_transcripts() -> None:
    """done/total, mean ± stderr, pass@1 and pass@3, errors, tokens, grid codes and transcripts from seed events."""
    state = RunState("lab", "test", KEYS, agent="scripted")
    assert state.snapshot()["grid"] == {"rollouts": 3, "tasks": [[0, 1]], "cells": "......", "more_tasks": 0}
    rewards = {(0, 0): 1.0, (0, 1): 0.0, (0, 2): 1.0, (1, 0): 0.5, (1, 1): 0.0}
    for (task, rollout), reward in rewards.items():
        feed(state, episode(task, rollout, reward, tokens=(10, 5)))
    feed(state, episode(1, 2, 1.0, error="the tool crashed", tokens=(7, 0)))
    values = [*rewards.values(), 0.0]
    passes = [[1, (pass_at_k(3, 2, 1) + pass_at_k(3, 0, 1)) / 2],  # type: ignore[operator]
              [3, (pass_at_k(3, 2, 3) + pass_at_k(3, 0, 3)) / 2]]  # type: ignore[operator]  # fmt: skip
    running = state.snapshot()  # from running sums while the run goes on
    assert running["mean"] == pytest.approx(mean(values)) and running["stderr"] == pytest.approx(stderr(values))
    assert [value for _, value in running["pass"]] == pytest.approx([value for _, value in passes])
    assert running["success_rate"] == pytest.approx(2 / 6)
    state.end()
    snap = state.snapshot()  # exact once it has ended: ors_lab.stats over every episode
    assert (snap["done"], snap["total"], snap["errors"], snap["running"]) == (6, 6, 1, 0)
    assert snap["mean"] == mean(values) and snap["stderr"] == stderr(values) and snap["pass"] == passes
    assert snap["tokens"] == {"input": 57, "output": 25, "reasoning": None, "cached": None}
    assert snap["last_errors"] == [["1/2", "RuntimeError", "the tool crashed"]]
    assert snap["grid"]["cells"] == "UAUKAx"  # 1.0, 0.0, 1.0, 0.5, 0.0, failed
    assert snap["hist"]["counts"] == [3, 0, 0, 0, 0, 1, 0, 0, 0, 2]
    inbox = state.inbox()
    assert [t["key"] for t in inbox] == ["0/0", "0/1", "0/2", "1/0", "1/1", "1/2"] and state.inbox() == []
    first = inbox[0]
    assert (first["reward"], first["success"], first["finish_reason"], first["steps"]) == (1.0, True, "stop", 1)
    assert [part[1:] for part in first["parts"]] == [
        ["block", "turn 1", ""],
        ["reasoning", "", "The answer is four."],
        ["text", "", "Submitting."],
        ["tool", "submit", '{"answer": "4"}'],  # the streamed input, as it streamed
        ["output", "submit", "Correct!"],
        ["reward", "finished", "1"],
        ["finish", "", "stop"],
    ]
    assert [p[1] for p in inbox[-1]["parts"]][-2:] == ["error", "finish"] and inbox[-1]["error"] == "the tool crashed"
    assert state.request({"transcript": "1/2"}) == {"transcript": inbox[-1]}
    line, *errors = state.text().splitlines()  # an ended run's text names its errors after the progress line
    assert line.startswith("eval lab/test: 6/6 episodes  ")
    assert line.endswith("/s  mean reward 0.417  errors 1  tokens 82")
    assert errors == ["  errors: RuntimeError ×1; the last, of task/rollout 1/2:", "    RuntimeError: the tool crashed"]


def test_small_rewards_that_never_succeed_say_why_on_the_dashboard() -> None:
    """Rewards of 0.15 and no success: the dashboard's state carries a note naming success_threshold= (the one
    the run used, when given), the ended run's text line and its static summary say it; a success drops it."""
    state = RunState("port", "test", KEYS)
    for task, rollout in KEYS[:4]:
        feed(state, episode(task, rollout, 0.15))
    note = state.snapshot()["note"]
    assert note == (
        "success and pass@k are 0: no episode reached the success threshold (success_threshold=, 1.0 by default), "
        "though 4 of 4 earned a positive reward (the highest 0.15); pass evaluate(..., success_threshold=) the "
        "reward a success earns"
    )
    assert note not in state.text()  # a running line stays one line
    state.end()
    assert state.snapshot()["note"] == note and state.text().splitlines()[1:] == [f"  {note}"]
    assert note in state.html()
    given = RunState("port", "test", KEYS, success_threshold=0.5)
    feed(given, episode(0, 0, 0.15))
    assert "no episode reached success_threshold=0.5, though 1 of 1 earned" in given.snapshot()["note"]
    feed(state, episode(1, 1, 1.0))
    assert state.snapshot()["note"] is None and "success_threshold" not in state.text() + state.html()


def test_live_episodes_stream_into_panes_and_the_grid() -> None:
    """A running episode's reasoning, tool input deltas and tokens show as they arrive; its cell is running."""
    state = RunState("lab", "test", KEYS)
    events = episode(0, 1, 1.0, thought="one two three", tokens=(3, 4), ended=False)
    cut = next(n for n, e in enumerate(events) if isinstance(e, ToolInputDeltaEvent)) + 1
    feed(state, events[:cut])
    snap = state.snapshot()
    assert snap["running"] == 1 and snap["grid"]["cells"] == ".~...."
    [pane] = snap["panes"]
    assert pane["key"] == "0/1"
    assert [p[1:] for p in pane["parts"]][1:] == [["reasoning", "", "one two three"], ["text", "", "Submitting."],
                                                  ["tool", "submit", '{"answer":']]  # fmt: skip
    feed(state, events[cut:])
    pane = state.snapshot()["panes"][0]
    assert pane["reward"] == 1.0 and pane["parts"][-1][1:] == ["reward", "finished", "1"]
    assert state.snapshot()["tokens_per_s"] > 0 and state.snapshot()["tokens"] is None  # live: not finished yet
    assert state.request({"transcript": "0/1"}) == {"transcript": {"key": "0/1", "missing": "not run yet"}}


def test_panes_transcripts_and_inbox_stay_bounded() -> None:
    """Long streams, many parts, many live and finished episodes: what is kept and sent has a ceiling."""
    keys = [(task, 0) for task in range(3_000)]
    state = RunState("lab", "test", keys)
    for task in range(10):  # ten live episodes at once
        feed(state, episode(task, 0, 1.0, ended=False)[:3])
    live = "s-0-0"
    for _ in range(5_000):  # 100,000 characters of reasoning into one part
        state.apply(ReasoningDeltaEvent(session_id=live, id="reasoning-2", delta="x" * 19 + " "))
    for n in range(300):  # and 300 more parts
        state.apply(TextStartEvent(session_id=live, id=f"t{n}"))
        state.apply(TextDeltaEvent(session_id=live, id=f"t{n}", delta=f"part {n}"))
    snap = state.snapshot()
    assert len(snap["panes"]) == dashboard.MAX_PANES and snap["running"] == 10
    for pane in snap["panes"]:
        assert len(pane["parts"]) <= dashboard.PANE_PARTS
        assert all(len(part[3]) <= dashboard.PANE_CHARS for part in pane["parts"])
    # the 3,000 episodes end (the ten live ones among them)
    for task in range(3_000):
        feed(state, episode(task, 0, 1.0, error="boom" if task % 7 == 0 else None)[-1:])
    inbox = state.inbox()
    assert len(inbox) == dashboard.INBOX_PER_SEND and inbox[-1]["key"] == "2999/0"  # the latest
    long = state.request({"transcript": "0/0"})
    assert long is not None and "missing" in long["transcript"]  # older than the last KEEP_TRANSCRIPTS
    kept = state.request({"transcript": "2999/0"})
    assert kept is not None and kept["transcript"]["key"] == "2999/0"
    assert len(state.last_errors) == dashboard.MAX_ERRORS and state.errors == len(range(0, 3_000, 7))
    assert len(state.snapshot()["series"]["t"]) <= dashboard.SERIES_POINTS
    assert len(json.dumps(state.snapshot())) < 40_000


def test_one_transcript_is_bounded_in_parts_and_characters() -> None:
    """A finished episode's transcript keeps MAX_PARTS parts and PART_CHARS characters of each, with marks."""
    state = RunState("lab", "test", [(0, 0)])
    events = episode(0, 0, 1.0)
    feed(state, events[:3])
    for _ in range(5_000):
        state.apply(ReasoningDeltaEvent(session_id="s-0-0", id="reasoning-2", delta="y" * 20))
    for n in range(200):
        state.apply(TextStartEvent(session_id="s-0-0", id=f"t{n}"))
    feed(state, events[-1:])
    [transcript] = state.inbox()
    parts = transcript["parts"]
    assert len(parts) == dashboard.MAX_PARTS + 1 and parts[8][1:] == ["elided", "", "142 parts not kept"]
    reasoning = parts[1][3]
    assert reasoning.startswith("y" * 800) and reasoning.endswith("y" * 400)
    assert "[98800 characters]" in reasoning and len(reasoning) < dashboard.PART_CHARS + 40
    assert len(json.dumps(transcript)) < dashboard.MAX_PARTS * (dashboard.PART_CHARS + 100)


def test_resumed_outcomes_count_as_done_and_fill_the_grid() -> None:
    """Outcomes resumed from a trace are done, on the grid and in the figures, but not in the rate."""
    resumed = [{"task_index": 0, "rollout": 0, "reward": 1.0, "success": True, "error": None, "input_tokens": 5,
                "output_tokens": 2}]  # fmt: skip
    ticks = iter([0.0])  # the run starts at 0, and it is 2.0 from then on
    state = RunState("lab", "test", [(0, 0), (0, 1)], resumed=resumed, clock=lambda: next(ticks, 2.0))
    snap = state.snapshot()
    assert (snap["done"], snap["resumed"], snap["grid"]["cells"], snap["mean"]) == (1, 1, "U.", 1.0)
    assert snap["rate"] == 0 and snap["tokens"] == {"input": 5, "output": 2, "reasoning": None, "cached": None}
    assert state.text() == "eval lab/test: 1/2 episodes (1 resumed)  0.0/s  mean reward 1.000  errors 0  tokens 7"
    assert state.request({"transcript": "0/0"}) == {
        "transcript": {"key": "0/0", "missing": "resumed from the trace: its events are in the trace"}
    }


def test_static_summary_html_shows_rewards_first_and_the_tasks() -> None:
    """html(): the summary card (mean ± stderr, pass@k, errors before the episodes), the grid, the per-task table."""
    state = RunState("lab", "test", KEYS, agent="scripted")
    for task, rollout in KEYS[:-1]:
        feed(state, episode(task, rollout, 1.0 if rollout == 0 else 0.0))
    feed(state, episode(1, 2, 0.0, error="the <tool> crashed"))
    state.end()
    html = state.html()
    assert html.startswith('<div class="ors-lab"><style>')
    html = html[html.index("</style>") :]
    order = [html.index(text) for text in ("mean reward", "pass@1", "pass@3", "errors", "episodes", "agent")]
    assert order == sorted(order)
    assert "0.333 ± 0.211" in html and "6 (2 tasks x 3 rollouts)" in html
    assert "the &lt;tool&gt; crashed" in html and "<tool>" not in html
    assert html.count('class="ol-cell"') == 6 and "#82071e" in html  # the failed episode's colour
    assert html.count("<tr>") >= 3 + 2  # the card's rows, the errors and the two tasks


# -- real evaluations -----------------------------------------------------------------------------------


def slow_then_submit(obs: Observation) -> ToolCall | None:
    """`slow` for 0.2 s, then the lab policy's answer: an episode whose server time a replay can repeat."""
    if obs.step == 0:
        return ToolCall("slow", {"seconds": 0.2})
    if obs.step == 1:
        assert obs.split is not None and obs.index is not None
        return ToolCall("submit", {"answer": answer_for(obs.split, obs.index, obs.rollout)})
    return None


def crashing_policy(obs: Observation) -> ToolCall | None:
    """The lab policy, but task 1's episodes raise (an agent error: the episode fails, the run goes on)."""
    if obs.index == 1:
        raise RuntimeError("the agent fell over")
    return lab_policy(obs)


def figures(result: ol.EvalResult) -> dict[str, Any]:
    """What the dashboard shows, as the result's frames say it."""
    row = result.summary().iloc[0]

    def value(x: Any) -> Any:
        return None if pd.isna(x) else x

    return {
        "done": len(result.episodes),
        "mean": value(row["mean_reward"]),
        "stderr": value(row["stderr"]),
        "pass": [[k, value(row[f"pass@{k}"])] for k in sorted({1, result.rollouts})],
        "errors": int(row["errors"]),
        "tokens": None if pd.isna(row["input_tokens"]) else {
            name.removesuffix("_tokens"): value(row[name])
            for name in ("input_tokens", "output_tokens", "reasoning_tokens", "cached_tokens")
        },
    }  # fmt: skip


def watched(env: ol.Environment, agent: Any, **options: Any) -> tuple[RunState, LiveView, ol.EvalResult]:
    """evaluate(), with a dashboard (text mode, to a buffer) fed by `subscribe=` as evaluate feeds its own."""
    split, rollouts = options.pop("split", "train"), options.get("rollouts", 1)
    keys = [(task, rollout) for task in range(len(LAB_TASKS[split])) for rollout in range(rollouts)]
    state = RunState(env.name, split, keys)
    view = LiveView(state, mode="text", text_stream=io.StringIO())
    result = ol.evaluate(env, agent, split=split, subscribe=view, progress=False, **options)
    state.end()
    view.close()
    return state, view, result


@pytest.fixture
def lab(ors_sdk_server: ServerProcess) -> Iterator[ol.Environment]:
    """The `lab` environment on the ors-sdk reference server."""
    with ol.Client(ors_sdk_server.url) as client:
        yield client.environment("lab")


def test_final_figures_equal_the_eval_result(lab: ol.Environment) -> None:
    """After a real run, the dashboard's done, mean, stderr, pass@k, errors and grid are the EvalResult's."""
    state, _, result = watched(lab, crashing_policy, rollouts=3, concurrency=4)
    snap = state.snapshot()
    assert {name: snap[name] for name in ("done", "mean", "stderr", "pass", "errors", "tokens")} == figures(result)
    assert snap["errors"] == 3 and snap["status"] == "finished"
    assert "x" * 3 in snap["grid"]["cells"] and "." not in snap["grid"]["cells"]
    for row in result.episodes.itertuples():
        code = snap["grid"]["cells"][row.task_index * 3 + row.rollout]
        assert code == ("x" if row.task_index == 1 else chr(65 + round(20 * row.reward)))
    inbox = {t["key"]: t for t in state.inbox()}
    assert len(inbox) == 9
    assert inbox["0/0"]["parts"][-1][1:] == ["finish", "", "stop"] and inbox["0/0"]["reward"] == expected_reward(
        "train", 0, 0
    )
    assert "the agent fell over" in inbox["1/0"]["error"]


def test_tokens_equal_the_eval_result(ors_sdk_server: ServerProcess) -> None:
    """With an agent that reports usage (the OpenAI-compatible agent), the tokens are the result's."""
    answers = {task["question"]: task["answer"] for task in LAB_TASKS["train"]}
    with LLMServer(answers, usage=True) as llm, ol.Client(ors_sdk_server.url) as client:
        agent = ol.OpenAIAgent(llm.model, base_url=llm.url + "/v1", api_key=llm.api_key)
        state, _, result = watched(client.environment("lab"), agent, rollouts=2)
    snap = state.snapshot()
    assert snap["tokens"] is not None and snap["tokens"]["output"] > 0
    assert {name: snap[name] for name in ("done", "mean", "stderr", "pass", "errors", "tokens")} == figures(result)
    assert snap["tokens_per_s"] > 0
    kinds = {part[1] for t in state.inbox() for part in t["parts"]}
    assert {"reasoning", "text", "tool", "output", "reward", "finish"} <= kinds


def test_the_throttle_bounds_the_updates_of_a_fast_run(lab: ol.Environment) -> None:
    """300 quick episodes (thousands of events): at most about 10 updates a second, and the last state sent."""
    started = time.monotonic()
    state, view, result = watched(lab, lab_policy, rollouts=100, concurrency=16)
    took = time.monotonic() - started
    assert len(result.episodes) == 300 and state.snapshot()["done"] == 300
    assert 2 <= view.updates <= took / 0.1 + 2


def test_a_replay_at_speed_1_shows_the_run_again_as_it_happened(lab: ol.Environment, tmp_path: Path) -> None:
    """ReplayServer(trace, speed=1): the dashboard advances at the recorded pace and ends as the recorded run did."""
    path = tmp_path / "run.parquet"
    first, _, recorded = watched(lab, slow_then_submit, rollouts=2, concurrency=2, record=path)
    lines = Lines()
    with ol.ReplayServer(path, speed=1) as server, ol.Client(server.url) as client:
        keys = [(task, rollout) for task in range(3) for rollout in range(2)]
        state = RunState("lab", "train", keys)
        view = LiveView(state, mode="text", text_stream=lines)
        started = time.monotonic()
        again = ol.evaluate(client.environment("lab"), slow_then_submit, split="train", rollouts=2, concurrency=2,
                            subscribe=view, progress=False)  # fmt: skip
        took = time.monotonic() - started
        state.end()
        view.close()
    assert took >= 3 * 0.2 * 0.9  # three waves of two episodes, each waiting for its recorded 0.2 s
    snap, before = state.snapshot(), first.snapshot()
    names = ("done", "mean", "stderr", "pass", "errors", "tokens")
    assert {k: snap[k] for k in names} == {k: before[k] for k in names} == figures(recorded) == figures(again)
    assert snap["grid"]["cells"] == before["grid"]["cells"]
    said = {t["key"]: [p[1:] for p in t["parts"]] for t in state.inbox()}
    assert said == {t["key"]: [p[1:] for p in t["parts"]] for t in first.inbox()}
    done = [int(line.split(": ")[1].split("/")[0]) for line in lines.seen]
    assert done == sorted(done) and any(0 < n < 6 for n in done) and done[-1] == 6  # seen part-way, in order


class Lines(io.StringIO):
    """A terminal for a TextLine: it rewrites one line; every version written is kept."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        shown = text.strip("\r\n ")
        if shown:
            self.seen.append(shown)
        return super().write(text)


def test_an_ended_runs_errors_follow_its_line_on_a_terminal() -> None:
    """On a terminal the progress line is rewritten in place; when the run ends, its errors follow it on lines
    of their own (the types with their counts, the last error's message), not cut to the first line."""
    state = RunState("lab", "test", [(0, 0), (1, 0)])
    terminal = Lines()
    view = LiveView(state, mode="text", text_stream=terminal)
    view.attach(stream := EventStream())
    view.show()
    for event in [*episode(0, 0, 1.0), *episode(1, 0, 0.0, error="no recorded request matches\nwhat differs: x")]:
        stream.publish(event)
    state.end()
    view.close()
    assert terminal.getvalue().endswith(
        "errors 1\n  errors: RuntimeError ×1; the last, of task/rollout 1/0:\n"
        "    RuntimeError: no recorded request matches\n    what differs: x\n"
    )


# -- evaluate's own view ----------------------------------------------------------------------------------


@pytest.fixture
def views() -> Iterator[Any]:
    """ol.live_views, set back afterwards."""
    before = ol.live_views()
    yield ol.live_views
    ol.live_views(before)


def test_progress_line_counts_rate_reward_and_errors(
    ors_sdk_server: ServerProcess, capsys: pytest.CaptureFixture[str], views: Any
) -> None:
    """Without widgets, the progress line reports episodes, rate, running mean reward and errors."""
    views("text")
    with ol.Client(ors_sdk_server.url) as client:
        ol.evaluate(client.environment("lab"), lab_policy, split="train", rollouts=2)
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("eval lab/train: 0/6 episodes  ")  # shown as the run starts
    assert err[-1].startswith("eval lab/train: 6/6 episodes  ")
    assert err[-1].endswith("/s  mean reward 0.500  errors 0")


def test_progress_line_counts_resumed_episodes(
    lab: ol.Environment, tmp_path: Path, capsys: pytest.CaptureFixture[str], views: Any
) -> None:
    """Resumed episodes are done and in the mean reward; the line says how many were resumed."""
    views("text")
    path = tmp_path / "run.parquet"
    ol.evaluate(lab, lab_policy, split="train", tasks=[0], rollouts=2, record=path, progress=False)
    result = ol.evaluate(lab, lab_policy, split="train", rollouts=2, record=path)
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert result.resumed == 2
    assert last.startswith("eval lab/train: 6/6 episodes (2 resumed)  ")
    assert last.endswith("mean reward 0.500  errors 0")


def test_no_view_when_off_or_not_asked(lab: ol.Environment, capsys: pytest.CaptureFixture[str], views: Any) -> None:
    """live_views("off") and progress=False show nothing."""
    views("off")
    ol.evaluate(lab, lab_policy, split="train")
    views("text")
    ol.evaluate(lab, lab_policy, split="train", progress=False)
    assert capsys.readouterr().err == ""


def test_a_view_that_cannot_show_never_breaks_the_run(
    lab: ol.Environment, caplog: pytest.LogCaptureFixture, views: Any
) -> None:
    """Widgets asked for outside a kernel: the view fails, is logged, and the run ends with its whole result."""
    views("widgets")
    with caplog.at_level(logging.ERROR, logger="ors_lab.evaluation"):
        result = ol.evaluate(lab, lab_policy, split="train", rollouts=2)
    assert len(result.episodes) == 6
    assert "live view could not be shown" in caplog.text and "not a Jupyter kernel" in caplog.text


class Failing(RunState):
    """A dashboard whose bookkeeping breaks at the third episode."""

    def apply(self, event: Event) -> bool:
        if event.kind == "episode" and self.episodes == 2:
            raise RuntimeError("the view broke")
        return super().apply(event)


def test_a_failing_view_is_detached_and_the_run_goes_on(lab: ol.Environment, caplog: pytest.LogCaptureFixture) -> None:
    """A view that raises while the run goes on is detached (and logged); the result is whole."""
    state = Failing("lab", "train", [(task, 0) for task in range(3)])
    view = LiveView(state, mode="text", text_stream=io.StringIO())
    with caplog.at_level(logging.ERROR, logger="ors_lab.events"):
        result = ol.evaluate(lab, lab_policy, split="train", subscribe=view, progress=False)
    view.close()
    assert len(result.episodes) == 3 and state.episodes == 2
    assert "raised and was detached" in caplog.text


def test_the_eval_result_shows_itself_as_the_dashboards_summary(lab: ol.Environment) -> None:
    """EvalResult's HTML is the dashboard's static summary, from its frames: the same figures."""
    state, _, result = watched(lab, crashing_policy, rollouts=3)
    html = result._repr_html_()
    snap = state.snapshot()
    assert f"{snap['mean']:.3f} ± {snap['stderr']:.3f}" in html
    assert html.count('class="ol-cell"') == 9 and "the agent fell over" in html
    assert "crashing_policy" in html  # the agent's name
    assert not math.isnan(result.summary()["mean_reward"].iloc[0])


# -- in a real kernel ---------------------------------------------------------------------------------------

KERNEL_RUN = """
import ors_lab as ol
from ors_lab.demo.agent import DemoAgent
client = ol.Client({url!r})
result = ol.evaluate(client.environment("guessing"), DemoAgent(pace=0.004), split="test", rollouts=3)
"""
KERNEL_FIGURES = """
import json
print(json.dumps({"mean": float(result.summary()["mean_reward"].iloc[0]), "episodes": len(result.episodes)}))
"""


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A real IPython kernel of this Python, its Jupyter and IPython state in tmp_path."""
    from jupyter_client.manager import start_new_kernel

    for name in ("IPYTHONDIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.delenv("ORS_LAB_VIEWS", raising=False)
    manager, client = start_new_kernel(kernel_name="python3", startup_timeout=60)
    try:
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def run_cell(client: Any, code: str, timeout: float = 60) -> list[dict[str, Any]]:
    """Execute `code`; every iopub message it caused, until the kernel is idle again."""
    msg_id = client.execute(code)
    messages = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = client.get_iopub_msg(timeout=max(deadline - time.monotonic(), 0.1))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        messages.append(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return messages
    raise AssertionError(f"the cell did not end within {timeout} s")


def test_the_dashboard_updates_the_front_end_while_the_cell_runs(demo_server: ServerProcess, kernel: Any) -> None:
    """In a kernel: one widget, updated while evaluate() runs (at most about 10 a second), left in its final state."""
    messages = run_cell(kernel, KERNEL_RUN.format(url=demo_server.url))
    errors = [m["content"] for m in messages if m["msg_type"] == "error" or m["content"].get("name") == "stderr"]
    assert not errors, errors
    [opened] = [m for m in messages if m["msg_type"] == "comm_open" and m["content"]["data"]["state"].get("view")]
    assert opened["content"]["data"]["state"]["view"] == "run"
    updates = [m for m in messages if m["msg_type"] == "comm_msg" and "data" in m["content"]["data"].get("state", {})]
    done = [m["content"]["data"]["state"]["data"]["done"] for m in updates]
    assert done == sorted(done) and any(0 < n < 30 for n in done) and done[-1] == 30  # seen part-way
    times = [m["header"]["date"] for m in updates]
    span = (times[-1] - times[0]).total_seconds()
    assert span > 0.3 and len(updates) <= span / 0.1 + 2
    ended = next(m for m in messages if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle")
    assert times[-1] <= ended["header"]["date"]
    inbox = [t["key"] for m in messages if m["msg_type"] == "comm_msg"
             for t in m["content"]["data"].get("state", {}).get("inbox", [])]  # fmt: skip
    assert sorted(inbox) == sorted(f"{task}/{rollout}" for task in range(10) for rollout in range(3))
    shown, static = [m["content"]["data"] for m in messages if m["msg_type"] == "display_data"]
    assert set(shown) == {"application/vnd.jupyter.widget-view+json", "text/plain"} and set(static) == {"text/html"}
    assert shown["text/plain"].startswith("eval guessing/test: 0/30 episodes")
    final, final_static = [m["content"]["data"] for m in messages if m["msg_type"] == "update_display_data"]
    assert final["text/plain"].startswith("eval guessing/test: 30/30 episodes")
    assert final_static["text/html"].startswith('<div class="ol-twin">')
    last = updates[-1]["content"]["data"]["state"]["data"]
    assert last["status"] == "finished" and last["grid"]["cells"] == "U" * 30
    [printed] = [m["content"]["text"] for m in run_cell(kernel, KERNEL_FIGURES) if m["msg_type"] == "stream"]
    figures = json.loads(printed)
    assert figures == {"mean": last["mean"], "episodes": last["done"]}
    assert f"{figures['mean']:.3f} ± " in final_static["text/html"]


async def test_an_interrupted_run_leaves_its_view_in_its_last_state(
    ors_sdk_server: ServerProcess, capsys: pytest.CaptureFixture[str], views: Any
) -> None:
    """Cancelled part-way, evaluate still closes its view: the last line says how far the run got."""
    views("text")
    eight = asyncio.Event()
    ended: list[Event] = []

    def count(event: Event) -> None:
        if event.kind == "episode":
            ended.append(event)
            if len(ended) >= 8:
                eight.set()

    async with ol.AsyncClient(ors_sdk_server.url) as client:
        run = asyncio.create_task(ol.aevaluate(client.environment("lab"), slow_lab_policy, split="train", rollouts=20,
                                               concurrency=4, subscribe=count))  # fmt: skip
        await asyncio.wait_for(eight.wait(), timeout=60)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
    last = capsys.readouterr().err.strip().splitlines()[-1]
    done = int(last.split(": ")[1].split("/")[0])
    assert last.startswith("eval lab/train: ") and 8 <= done < 60 and done == len(ended)
