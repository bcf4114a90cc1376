"""The environments in the shapes public ones have (tests/envs/wild_*.py), on both reference servers.

By hand (``ol.Client``), each shape's wire behaviour: sync tools, ``reward: null``, empty input
schemas, the game dealt in ``get_prompt``, an ~11 KB result in chunks, a train-only split, each
SDK's own finish rule, a generator the sessions share, ten tools of small rewards. Then scripted
agents (plain Python, no LLM) evaluated and recorded, the trace replayed offline to the same
results, checked against the protocol (``ors-lab check``) and made into a report.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

import ors_lab as ol
from ors_lab.agents.episode import Episode
from ors_lab.cli import main as cli_main
from ors_lab.demo.launch import ServerProcess
from ors_lab.events import Event, SSEEvent
from ors_lab.replay.check import check_trace
from ors_lab.viewer.run import RunState
from tests.envs import wild_common as w

pytestmark = pytest.mark.timeout(180)

EMPTY_SCHEMA = {"properties": {}, "title": "NoInput", "type": "object"}
GAME = w.GAME_TASKS["test"][0]
PORT = w.PORT_TASKS["test"][0]
MOVES: list[w.Direction] = ["left", "up", "right", "down", "left"]


@pytest.fixture
def client(wild_server: ServerProcess) -> Iterator[ol.Client]:
    """A client of the wild-shaped environments on each reference server."""
    with ol.Client(wild_server.url) as made:
        yield made


@contextlib.contextmanager
def sse_events(client: ol.Client) -> Iterator[list[SSEEvent]]:
    """The SSE events the client decodes inside the block (the task_id, chunk, end and error of its calls)."""
    seen: list[Event] = []
    subscription = client.events.subscribe(seen.append, kinds={"event"})
    events: list[SSEEvent] = []
    try:
        yield events
    finally:
        subscription.close()
        events.extend(event for event in seen if isinstance(event, SSEEvent))


def solo_game(task: dict[str, int], moves: list[w.Direction]) -> list[str]:
    """The prompt and the move texts of a game played alone (its own generator, seeded by its deal)."""
    game = w.new_game(task, random.Random())
    return [w.game_prompt(game), *[game.move(direction)[0] for direction in moves]]


# -- by hand: each shape on the wire ----------------------------------------------------------------


def test_serves_the_three_environments(client: ol.Client) -> None:
    """game2048 (the default), gsm8k and port, their splits and tools as wild_common lists them."""
    assert client.environments() == w.ENV_NAMES
    for name, splits, tools in [
        ("game2048", w.GAME_SPLITS_WIRE, w.GAME_TOOLS),
        ("gsm8k", w.GSM8K_SPLITS_WIRE, w.GSM8K_TOOLS),
        ("port", w.PORT_SPLITS_WIRE, w.PORT_TOOLS),
    ]:
        env = client.environment(name)
        assert [{"name": split.name, "type": split.type} for split in env.splits()] == splits
        assert [tool.name for tool in env.tools()] == tools
    assert len(w.PORT_TOOLS) == 10


def test_tools_without_fields_publish_an_empty_schema(client: ol.Client) -> None:
    """A tool whose input model has no field publishes `{"properties": {}, ...}` (not null) and takes `{}`."""
    port = {tool.name: tool.input_schema for tool in client.environment("port").tools()}
    assert {name for name, schema in port.items() if schema == EMPTY_SCHEMA} == {*w.PORT_READS, "end_shift"}
    assert all(isinstance(schema, dict) and schema["properties"] for name, schema in port.items()
               if name not in (*w.PORT_READS, "end_shift"))  # fmt: skip
    assert {tool.name: tool.input_schema for tool in client.environment("game2048").tools()}["board"] == EMPTY_SCHEMA
    with client.environment("port").session(split="test", index=0, view=False) as session:
        weather = session.call("weather", {})
        bare = session.call("weather")
    assert weather.ok and weather.text == bare.text == w.Port(PORT).weather()


def test_a_tool_before_the_prompt_is_an_sse_error(client: ol.Client) -> None:
    """game2048 deals its game in get_prompt: a move before /prompt is task_id then `error` (ToolError); the
    session lives on, and after the prompt the same move plays the dealt game."""
    with client.environment("game2048").session(split="test", index=0, view=False) as session:
        with sse_events(client) as seen, pytest.raises(ol.ToolError, match=w.NO_GAME):
            session.call("move", {"direction": "left"})
        prompt = session.prompt()
        moved = session.call("move", {"direction": "left"})
    assert [(event.event, event.data) for event in seen][1:] == [("error", w.NO_GAME)]
    assert seen[0].event == "task_id"
    game = w.new_game(GAME, random.Random())
    assert [block.text for block in prompt] == [w.game_prompt(game)]
    assert (moved.text, moved.reward, moved.finished) == game.move("left")


def test_sync_tools_run_on_the_loop_or_in_a_thread(client: ol.Client, wild_server: ServerProcess) -> None:
    """game2048's tools are plain functions: ors-sdk runs them on its event loop, openreward in a worker thread."""
    with client.environment("game2048").session(split="test", index=0, view=False) as session:
        session.prompt()
        moved = session.call("move", {"direction": "up"})
    assert isinstance(moved.metadata, dict)
    assert moved.metadata["on_event_loop"] is (wild_server.sdk == "ors-sdk")


def test_reading_tools_answer_reward_null(client: ol.Client) -> None:
    """board and the port's reads send `"reward": null` (reward None); a port act that does nothing earns 0.0."""
    with client.environment("game2048").session(split="test", index=0, view=False) as session:
        session.prompt()
        with sse_events(client) as seen:
            board = session.call("board", {})
    assert json.loads(seen[-1].data)["output"]["reward"] is None
    assert board.reward is None and board.metadata == {"score": 0, "moves": 0}
    with client.environment("port").session(split="test", index=0, view=False) as session:
        reads = [session.call(name, {}) for name in w.PORT_READS]
        idle = session.call("assign_berth", {"berth": w.occupied_berth(PORT)})
    assert [(read.ok, read.reward, read.finished) for read in reads] == [(True, None, False)] * 3
    assert (idle.ok, idle.reward, idle.text) == (True, 0.0, f"berth {w.occupied_berth(PORT)} is occupied")


def test_a_seed_repeats_its_game_one_session_at_a_time(client: ol.Client) -> None:
    """Two sessions of one task, one after the other: the same game, the one a private generator deals."""
    plays = []
    for _ in range(2):
        with client.environment("game2048").session(split="test", index=0, view=False) as session:
            texts = [block.text for block in session.prompt()]
            plays.append(texts + [session.call("move", {"direction": move}).text for move in MOVES])
    assert plays[0] == plays[1] == solo_game(GAME, MOVES)


def test_sessions_at_once_share_the_generator(client: ol.Client) -> None:
    """Two sessions of one seed played in turn draw their tiles from the server's one generator: the
    games are what one shared generator deals, and the second is not its seed's game."""
    env = client.environment("game2048")
    with env.session(split="test", index=0, view=False) as a, env.session(split="test", index=0, view=False) as b:
        first = [block.text for block in a.prompt()]
        second = [block.text for block in b.prompt()]  # deals again: the generator is seeded again
        for move in MOVES:
            first.append(a.call("move", {"direction": move}).text)
            second.append(b.call("move", {"direction": move}).text)
    shared = random.Random()
    game_a, game_b = w.new_game(GAME, shared), w.new_game(GAME, shared)
    want_a, want_b = [w.game_prompt(game_a)], [w.game_prompt(game_b)]
    for move in MOVES:
        want_a.append(game_a.move(move)[0])
        want_b.append(game_b.move(move)[0])
    assert (first, second) == (want_a, want_b)
    assert second != solo_game(GAME, MOVES) and first[0] == second[0]


def test_gsm8k_has_only_a_train_split(client: ol.Client) -> None:
    """gsm8k's one split is train: its problems are there, and asking for test is an UnknownSplitError."""
    env = client.environment("gsm8k")
    assert [split.name for split in env.splits()] == ["train"]
    assert env.num_tasks("train") == len(w.GSM8K_TASKS["train"])
    assert env.task("train", 2).spec == w.GSM8K_TASKS["train"][2]
    with pytest.raises(ol.UnknownSplitError, match=r"its splits: train$"):
        env.num_tasks("test")


def test_a_submit_after_the_finish_is_each_sdks_own_rule(client: ol.Client, wild_server: ServerProcess) -> None:
    """After `submit` finished the episode, openreward refuses a second one (episode_finished, not run);
    ors-sdk grades it again, another finished result."""
    with client.environment("gsm8k").session(split="train", index=0, view=False) as session:
        first = session.call("submit", {"answer": "She has 19 left."})
        second = session.call("submit", {"answer": "20"})
    assert (first.ok, first.reward, first.finished, first.text) == (True, 1.0, True, w.CORRECT)
    assert first.metadata == {"gold": "19", "submitted": "She has 19 left."}
    if wild_server.sdk == "openreward":
        assert (second.ok, second.reward, second.reason) == (False, None, "episode_finished")
        assert second.error is not None and second.error.startswith("'submit' was not run: the episode has finished")
    else:
        assert (second.ok, second.reward, second.finished) == (True, 0.0, True)
        assert second.text == "Incorrect: the answer was 19"


def test_the_manifest_comes_in_three_events(client: ol.Client) -> None:
    """The ~11 KB manifest: task_id, two chunks of 4096 characters and the end; joined, the exact text."""
    with client.environment("port").session(split="test", index=0, view=False) as session:
        with sse_events(client) as seen:
            manifest = session.call("manifest", {})
    assert [event.event for event in seen] == ["task_id", "chunk", "chunk", "end"]
    assert [len(event.data) for event in seen[1:3]] == [4096, 4096]
    payload = "".join(event.data for event in seen[1:])
    assert 10_500 < len(payload) < 12_000
    assert json.loads(payload)["output"]["blocks"][0]["text"] == manifest.text == w.manifest_text(PORT)
    assert manifest.reward is None


def test_a_shift_over_the_ten_tools_earns_0_15(client: ol.Client) -> None:
    """Each of port's ten tools once, in the right order: reads earn None, acts their PORT_REWARDS, 0.15 in
    all, and end_shift finishes; an act out of order earns 0.0 and changes nothing."""
    held, berth = w.held_container(PORT), w.occupied_berth(PORT) % PORT["berths"] + 1
    total = PORT["containers"]
    plan: list[tuple[str, dict[str, object]]] = [
        ("berths", {}), ("assign_berth", {"berth": berth}), ("move_crane", {"berth": berth}), ("manifest", {}),
        ("unload", {"count": total}), ("inspect", {"container": held}), ("stack", {"block": "A"}),
        ("dispatch_truck", {"count": total}), ("weather", {}), ("end_shift", {}),
    ]  # fmt: skip
    with client.environment("port").session(split="test", index=0, view=False) as session:
        early = session.call("dispatch_truck", {"count": total})
        results = {name: session.call(name, tool_input) for name, tool_input in plan}
    assert (early.reward, early.text) == (0.0, f"{held} is on {w.HOLD}: nothing leaves before it is inspected")
    assert sorted(results) == w.PORT_TOOLS and all(result.ok for result in results.values())
    assert {name: result.reward for name, result in results.items() if result.reward is not None} == w.PORT_REWARDS
    assert [name for name, result in results.items() if result.reward is None] == ["berths", "manifest", "weather"]
    assert math.fsum(r.reward for r in results.values() if r.reward is not None) == pytest.approx(0.15, abs=1e-12)
    assert [name for name, result in results.items() if result.finished] == ["end_shift"]
    assert results["end_shift"].text == f"shift over: {total} of {total} containers out"


def test_hand_sessions_record_and_pass_the_checker(
    wild_server: ServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recorded session with an SSE error (a move before the prompt), a chunked manifest and a finished
    episode passes the protocol checker, as `ors-lab check` says."""
    path = tmp_path / "hand.parquet"
    with ol.Recorder(path) as recorder, ol.Client(wild_server.url, recorder=recorder) as client:
        with client.environment("game2048").session(split="test", index=1, view=False) as session:
            with pytest.raises(ol.ToolError):
                session.call("move", {"direction": "down"})
            session.prompt()
            session.call("board", {})
        with client.environment("port").session(split="test", index=2, view=False) as session:
            session.call("manifest", {})
            session.call("end_shift", {})
    trace = ol.load_trace(path)
    assert check_trace(trace) == []
    calls = trace.calls
    assert calls["tool"].tolist() == ["move", "board", "manifest", "end_shift"]
    capsys.readouterr()
    assert cli_main(["check", str(path)]) == 0
    assert capsys.readouterr().out.strip() == "4 call streams checked, no violations"


# -- evaluated by scripted agents, recorded, replayed, checked, reported ----------------------------


class GameAgent:
    """Looks at the board (a step without a reward), then slides left, up, right, down in turn until the game ends."""

    async def run(self, episode: Episode) -> None:
        await episode.call("board", {})
        for direction in itertools.cycle(w.DIRECTIONS):
            if episode.done:
                return
            await episode.call("move", {"direction": direction})


class WordProblemAgent:
    """Finds its problem by the prompt's text and answers it: right on even problems, one more on odd ones."""

    async def run(self, episode: Episode) -> None:
        index, task = next((n, t) for n, t in enumerate(w.GSM8K_TASKS["train"]) if t["question"] in episode.prompt_text)
        answer = int(w.gold(task)) + index % 2
        with episode.text() as out:
            out.write(f"The answer is {answer}.")
        await episode.call("submit", {"answer": f"The answer is {answer}."})


class PortAgent:
    """Works the shift with the ten tools: a free berth from `berths`, the held container from the manifest."""

    async def run(self, episode: Episode) -> None:
        berths = (await episode.call("berths", {})).text
        berth = int(next(line for line in berths.splitlines() if line.endswith("free")).split()[1].rstrip(":"))
        await episode.call("assign_berth", {"berth": berth})
        await episode.call("move_crane", {"berth": berth})
        lines = (await episode.call("manifest", {})).text.splitlines()[1:]
        held = next(line.split()[0] for line in lines if line.endswith(w.HOLD))
        await episode.call("unload", {"count": len(lines)})
        await episode.call("inspect", {"container": held})
        await episode.call("stack", {"block": "B"})
        await episode.call("dispatch_truck", {"count": len(lines)})
        await episode.call("weather", {})
        await episode.call("end_shift", {})


def game_reward(index: int) -> float:
    """What GameAgent's game of test task `index` earns when it plays alone (each move's merges / 100)."""
    game = w.new_game(w.GAME_TASKS["test"][index], random.Random())
    rewards = []
    for direction in itertools.cycle(w.DIRECTIONS):
        _, reward, finished = game.move(direction)
        rewards.append(reward)
        if finished:
            return math.fsum(rewards)
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Case:
    """An environment, its split, a scripted agent, the run's concurrency and each task's summed reward."""

    env: str
    split: str
    agent: Callable[[], object]
    concurrency: int
    reward: Callable[[int], float]
    given: bool = True
    """Whether the run is told its split (gsm8k's is not: its one split is the default, live and replayed)."""


CASES = [
    # one session at a time: each game is its seed's, so each rollout earns what the game earns alone
    Case("game2048", "test", GameAgent, 1, game_reward),
    Case("gsm8k", "train", WordProblemAgent, 8, lambda index: 1.0 - index % 2, given=False),
    Case("port", "test", PortAgent, 8, lambda index: w.PORT_FULL_REWARD),
]
EPISODE_KEYS = ["environment", "split", "task_index", "rollout", "reward", "total_reward", "final_reward", "finished",
                "success", "steps", "errors", "finish_reason", "error", "error_type"]  # fmt: skip
STEP_KEYS = ["task_index", "rollout", "step", "call", "tool", "input", "ok", "reward", "finished", "error", "reason"]


@pytest.mark.parametrize("case", CASES, ids=[case.env for case in CASES])
def test_scripted_runs_record_replay_check_and_report(
    wild_server: ServerProcess, case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A scripted agent's run, recorded, earns each task's known reward; replayed offline (speed 0) it gives
    the same episodes, steps and tasks; its trace passes `ors-lab check`; its report builds with every episode."""
    path = tmp_path / "run.parquet"
    split = case.split if case.given else None
    with ol.Client(wild_server.url) as client:
        live = ol.evaluate(client.environment(case.env), case.agent(), split=split, rollouts=2,
                           concurrency=case.concurrency, record=path, progress=False)  # fmt: skip
    tasks = len({"game2048": w.GAME_TASKS, "gsm8k": w.GSM8K_TASKS, "port": w.PORT_TASKS}[case.env][case.split])
    assert live.errors.empty and len(live) == 2 * tasks
    for row in live.episodes.itertuples():
        assert row.reward == pytest.approx(case.reward(row.task_index), abs=1e-12), row
        assert row.finished is True and row.finish_reason == "stop"
    trace = ol.load_trace(path)
    with ol.ReplayServer(trace, speed=0) as replay, ol.Client(replay.url) as client:
        replayed = ol.evaluate(client.environment(case.env), case.agent(), split=split, rollouts=2,
                               concurrency=case.concurrency, progress=False)  # fmt: skip
    pd.testing.assert_frame_equal(replayed.episodes[EPISODE_KEYS], live.episodes[EPISODE_KEYS])
    pd.testing.assert_frame_equal(replayed.steps[STEP_KEYS], live.steps[STEP_KEYS])
    pd.testing.assert_frame_equal(replayed.tasks, live.tasks)
    assert check_trace(trace) == []
    capsys.readouterr()
    assert cli_main(["check", str(path)]) == 0
    assert capsys.readouterr().out.strip().endswith("no violations")
    report = trace.to_html(tmp_path / "report.html")
    assert (report.episodes, report.detailed) == (len(live), len(live))
    assert report.size == report.path.stat().st_size > 0 and f"eval {case.env}/{case.split}" in report.path.read_text()


def test_a_port_run_at_the_default_threshold_says_why_success_is_0(
    wild_ors_sdk_server: ServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """port pays 0.15 a shift; against the default success_threshold=1.0 success and pass@k are 0, and the
    result's summary, the trace's, the dashboard's state, the printed progress and the report say why,
    naming success_threshold=."""
    ol.live_views("text")  # the progress line, printed (the autouse fixture sets the mode back)
    state = RunState("port", "test", [(task, rollout) for task in range(3) for rollout in range(2)])
    path = tmp_path / "port.parquet"
    with ol.Client(wild_ors_sdk_server.url) as client:
        result = ol.evaluate(client.environment("port"), PortAgent(), split="test", rollouts=2, record=path,
                             subscribe=state.apply)  # fmt: skip
    state.end()
    row = result.summary().iloc[0]
    assert (row["success_rate"], row["pass@1"], row["pass@2"]) == (0.0, 0.0, 0.0)
    assert row["mean_reward"] == pytest.approx(w.PORT_FULL_REWARD, abs=1e-12)
    note = row["note"]
    assert "no episode reached success_threshold=1.0, though 6 of 6 earned a positive reward (the highest 0.15)" in note
    assert ["note", note] in [line.split(maxsplit=1) for line in repr(result.summary()).splitlines()]
    assert note in result._repr_html_() and note in result.table_text()
    trace = ol.load_trace(path)
    by_default = trace.summary().iloc[0]["note"]
    assert "no episode reached the success threshold (success_threshold=, 1.0 by default), though 6 of 6" in by_default
    assert state.snapshot()["note"] == by_default and state.text().splitlines()[1] == f"  {by_default}"
    assert f"  {note}\n" in capsys.readouterr().err  # the run's own progress, once it ended, names its threshold
    report = trace.to_html(tmp_path / "port.html")
    assert report.path.read_text().count(by_default) >= 1
