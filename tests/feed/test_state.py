"""A run's dashboard rebuilt from its live feed (``FeedState``), against the run's own (``RunState`` fed inline).

The runs are real (the ors-sdk reference server's ``lab`` environment, with policies whose rewards are
known, and the OpenAI-compatible agent against the scripted LLM server); the watchers read the feed over
127.0.0.1 with a ``FeedReader``, from the start or joining part-way.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import ors_lab as ol
from ors_lab.agents.policy import Observation, ToolCall
from ors_lab.demo.launch import ServerProcess
from ors_lab.events import Event
from ors_lab.feed import FeedReader
from ors_lab.feed.server import INTERVAL
from ors_lab.viewer.feed_state import FeedState
from ors_lab.viewer.run import RunState
from tests.envs.common import LAB_TASKS
from tests.llm_server import LLMServer
from tests.notebook.test_run_view import crashing_policy, figures

pytestmark = pytest.mark.timeout(120)

DRAWN = ("done", "total", "resumed", "mean", "stderr", "success_rate", "pass", "errors", "last_errors", "grid",
         "hist", "status", "tokens")  # fmt: skip
"""What a dashboard shows that does not depend on when it is looked at."""
TRAIN = len(LAB_TASKS["train"])


async def slow_crashing_policy(obs: Observation) -> ToolCall | None:
    """`crashing_policy` (task 1's episodes raise), 50 ms later: the run lasts long enough to be joined part-way."""
    await asyncio.sleep(0.05)
    return crashing_policy(obs)


def drawn(state: RunState | None) -> dict[str, Any]:
    assert state is not None
    snap = state.snapshot()
    return {name: snap[name] for name in DRAWN}


def watched(
    url: str, *, joining: int | None = None, interval: float = INTERVAL, **options: Any
) -> tuple[RunState, list[FeedState], list[FeedReader], ol.EvalResult]:
    """`evaluate` on `lab` with a feed, a RunState fed inline (the run's own dashboard), a watcher from the start
    and, once the feed has sent `joining` episodes' outcomes, a second one.

    The feed drains the run's events every `INTERVAL` on a thread of its own: a second watcher started as the
    run's `joining`-th outcome is published could read the feed before it holds that outcome (or any), so the
    second one starts (on a thread: the feed takes the outcome after the run's subscriber) once the first
    watcher has read it, and the feed stays open until it has connected."""
    split, rollouts = options.pop("split", "train"), options.get("rollouts", 1)
    own = RunState("lab", split, [(task, rollout) for task in range(TRAIN) for rollout in range(rollouts)])
    states = [FeedState("")]
    with ol.Client(url) as client, ol.Feed(0, interval=interval) as feed:
        readers = [FeedReader(feed.url, states[0].take).start()]
        readers[0].wait_ready()
        begin = feed.begin

        def begun(*args: Any, **kwargs: Any) -> None:  # the run's own view starts here too (``_show_progress``)
            own.started = time.monotonic()
            begin(*args, **kwargs)

        feed.begin = begun  # type: ignore[method-assign]

        def subscriber(event: Event) -> None:
            own.apply(event)
            if event.kind == "episode" and own.episodes == joining:
                joiner.start()

        def join() -> None:
            early, deadline = states[0], time.monotonic() + 10
            while (early.run is None or early.run.episodes < joining) and time.monotonic() < deadline:
                time.sleep(0.005)
            states.append(FeedState(""))
            readers.append(FeedReader(feed.url, states[-1].take).start())
            readers[-1].wait_ready()

        joiner = threading.Thread(target=join)
        result = ol.evaluate(client.environment("lab"), split=split, feed=feed, progress=False, subscribe=subscriber,
                             **options)  # fmt: skip
        own.end()
        if joiner.ident is not None:  # started
            joiner.join(15)
    for reader in readers:  # the feed closed: each reads to its end
        assert reader.wait(10) and reader.status == "ended", reader
    return own, states, readers, result


@pytest.mark.parametrize("interval", [INTERVAL, 1.0], ids=["feed", "slow-feed"])
def test_watchers_rebuild_the_runs_dashboard_from_its_feed(ors_sdk_server: ServerProcess, interval: float) -> None:
    """A watcher from the start and one joining after 4 episodes end with the run's own dashboard (figures, grid,
    errors, histogram: the EvalResult's); the first also has its transcripts, both its mean reward over time, even
    from a feed that sends the run's events a second late (episodes count when they ended in the run)."""
    own, (early, late), readers, result = watched(ors_sdk_server.url, joining=4, agent=slow_crashing_policy,
                                                  rollouts=3, concurrency=2, interval=interval)  # fmt: skip
    mine = drawn(own)
    assert drawn(early.run) == mine and drawn(late.run) == mine
    assert {name: mine[name] for name in ("done", "mean", "stderr", "pass", "errors", "tokens")} == figures(result)
    assert mine["errors"] == 3 and mine["status"] == "finished"
    for key in (f"{task}/{rollout}" for task in range(TRAIN) for rollout in range(3)):
        assert early.run is not None and early.run.request({"transcript": key}) == own.request({"transcript": key})
    assert late.run is not None and late.run.episodes - late.run.resumed == 9  # run here, none resumed
    assert late.events < early.events  # it joined part-way: the run so far came as a snapshot
    series = own.snapshot()["series"]
    for watcher in (early.run, late.run):
        assert watcher.snapshot()["series"]["mean"] == series["mean"]
        assert all(abs(a - b) < 0.1 for a, b in zip(watcher.snapshot()["series"]["t"], series["t"], strict=True))
    assert abs(late.run.elapsed() - own.elapsed()) < 0.3
    assert early.resets == late.resets == 0 and [reader.connections for reader in readers] == [1, 1]


def test_an_llm_agents_transcripts_and_tokens_come_through_whole(ors_sdk_server: ServerProcess) -> None:
    """The OpenAI-compatible agent streams reasoning, text and tool-call arguments in many deltas: joined on the
    feed, they make the same transcripts, and the same tokens, as the run's own dashboard."""
    answers = {task["question"]: task["answer"] for task in LAB_TASKS["train"]}
    with LLMServer(answers, usage=True) as llm:
        agent = ol.OpenAIAgent(llm.model, base_url=llm.url + "/v1", api_key=llm.api_key)
        own, (watcher,), _, result = watched(ors_sdk_server.url, agent=agent, rollouts=2)
    assert drawn(watcher.run) == drawn(own) and drawn(own)["tokens"] == figures(result)["tokens"]
    assert drawn(own)["tokens"]["output"] > 0
    kinds = set()
    for key in (f"{task}/{rollout}" for task in range(TRAIN) for rollout in range(2)):
        assert watcher.run is not None
        theirs = watcher.run.request({"transcript": key})
        assert theirs == own.request({"transcript": key})
        kinds |= {part[1] for part in theirs["transcript"]["parts"]} if theirs else set()
    assert {"reasoning", "text", "tool", "output", "reward", "finish"} <= kinds


def test_a_resumed_run_shows_its_resumed_episodes(ors_sdk_server: ServerProcess, tmp_path: Path) -> None:
    """A run that resumes a trace sends its resumed outcomes first: a watcher counts them done, not run now."""
    from tests.evaluation.policies import lab_policy

    trace = tmp_path / "run.parquet"
    with ol.Client(ors_sdk_server.url) as client:
        ol.evaluate(client.environment("lab"), lab_policy, split="train", tasks=[0, 1], rollouts=2, record=trace,
                    progress=False)  # fmt: skip
    own, (watcher,), _, result = watched(ors_sdk_server.url, agent=lab_policy, rollouts=2, record=trace)
    assert watcher.run is not None and watcher.run.resumed == 4 and result.resumed == 4
    assert watcher.run.episodes == 2 * TRAIN and figures(result)["mean"] == watcher.run.snapshot()["mean"]
    assert own.resumed == 0  # the inline one was never told: the feed's plan carries what the run resumed
