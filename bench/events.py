"""Agent events' cost: making the 18 events of a typical episode, and each one's ``to_wire()`` and ``to_json()``.

    .venv/bin/python bench/events.py                              # ours alone: about 10 s
    .venv/bin/python bench/events.py --quick                      # 1 round: a smoke test
    git worktree add /tmp/events-before COMMIT                    # another checkout to compare with
    .venv/bin/python bench/events.py --baseline /tmp/events-before --rounds 10

One episode is what a tool-calling turn publishes (``start``, a block with reasoning, text and one
tool call streamed, its output and reward, usage, ``finish`` and ``episode``): each event made,
then ``to_wire()`` and ``to_json()`` of it, as a live feed and the recorder take them. A worker (a
fresh interpreter, one checkout's ``ors_lab`` first on its path) times batches of episodes with
``timeit`` after a warm-up, in CPU time (``time.thread_time``: the time other load on the cores
takes is not counted); with ``--baseline``, each round runs one worker of each, in turns. The
figure is pooled: the summed seconds over the summed episodes of every batch of every round (with
the per-round range), so a burst of other load on the shared cores weighs as little as its share.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import timeit
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]

EPISODES = 2_000  # a batch
BATCHES = 10  # a worker's batches (after one of warm-up)


def _worker(root: str, batches: int) -> dict[str, Any]:
    """Time ``batches`` batches of episodes with the ``ors_lab`` of ``root``; the seconds of each, by part."""
    sys.path.insert(0, root)
    import ors_lab.events as ev

    assert Path(ev.__file__).resolve().is_relative_to(Path(root).resolve()), ev.__file__
    sid = "2b7c0c8e-5f1e-4a61-9f0a-1c2d3e4f5a6b"

    def episode() -> list[Any]:
        context: dict[str, Any] = {"session_id": sid, "rollout": 0}
        return [
            ev.StartEvent(message_id=sid, environment="quiz", split="test", task_index=3, **context),
            ev.BlockStartEvent(block_id="b1", block_name="turn 1", **context),
            ev.ReasoningStartEvent(id="r1", **context),
            ev.ReasoningDeltaEvent(id="r1", delta="The question asks for the capital; I will answer it.", **context),
            ev.ReasoningEndEvent(id="r1", **context),
            ev.TextStartEvent(id="t1", **context),
            ev.TextDeltaEvent(id="t1", delta="Let me answer: the capital is Paris.", **context),
            ev.TextEndEvent(id="t1", **context),
            ev.ToolInputStartEvent(tool_call_id="call_1", tool_name="answer", **context),
            ev.ToolInputDeltaEvent(tool_call_id="call_1", input_text_delta='{"answer": "Paris"}', **context),
            ev.ToolInputEndEvent(tool_call_id="call_1", **context),
            ev.ToolInputAvailableEvent(tool_call_id="call_1", tool_name="answer", input={"answer": "Paris"}, **context),
            ev.ToolOutputAvailableEvent(
                tool_call_id="call_1",
                tool="answer",
                input={"answer": "Paris"},
                call=1,
                output={"text": "correct", "blocks": 1, "metadata": None},
                **context,
            ),
            ev.RewardEvent(tool_call_id="call_1", tool="answer", call=1, reward=1.0, finished=True, **context),
            ev.UsageEvent(
                input_tokens=812,
                output_tokens=64,
                reasoning_tokens=20,
                cached_tokens=512,
                model="gpt-4.1-mini",
                **context,
            ),
            ev.BlockEndEvent(block_id="b1", **context),
            ev.FinishEvent(finish_reason="stop", **context),
            ev.EpisodeEvent(
                environment="quiz",
                split="test",
                task_index=3,
                reward=1.0,
                total_reward=1.0,
                final_reward=1.0,
                finished=True,
                success=True,
                finish_reason="stop",
                steps=1,
                started=1.8e9,
                duration_s=0.42,
                input_tokens=812,
                output_tokens=64,
                **context,
            ),
        ]

    def whole(n: int) -> None:
        for _ in range(n):
            for event in episode():
                event.to_wire()
                event.to_json()

    made = [episode() for _ in range(EPISODES)]

    def wire(n: int) -> None:
        for events in made[:n]:
            for event in events:
                event.to_wire()

    def text(n: int) -> None:
        for events in made[:n]:
            for event in events:
                event.to_json()

    def build(n: int) -> None:
        for _ in range(n):
            episode()

    assert len(episode()) == 18
    for event in episode():  # the text is the wire form's, as compact JSON
        assert event.to_json() == ev.compact_json(event.to_wire()), type(event).__name__
    parts = {"whole": whole, "build": build, "to_wire": wire, "to_json": text}
    for part in parts.values():
        part(EPISODES // 4)  # warm-up
    seconds: dict[str, list[float]] = {name: [] for name in parts}
    for _ in range(batches):
        for name, part in parts.items():
            timer = timeit.Timer(lambda part=part: part(EPISODES), timer=time.thread_time)  # type: ignore[misc]
            seconds[name].append(timer.timeit(number=1))
    return {"root": root, "episodes": EPISODES, "seconds": seconds}


def _run(root: Path, batches: int) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, "--worker", str(root), "--batches", str(batches)],
                          capture_output=True, text=True, check=True, cwd="/")  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _pooled(results: list[dict[str, Any]], part: str) -> tuple[float, float, float]:
    """µs per episode: pooled over every batch of every round, and the range of the rounds' own."""
    rounds = [sum(r["seconds"][part]) / (r["episodes"] * len(r["seconds"][part])) * 1e6 for r in results]
    total = sum(sum(r["seconds"][part]) for r in results)
    episodes = sum(r["episodes"] * len(r["seconds"][part]) for r in results)
    return total / episodes * 1e6, min(rounds), max(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="another checkout of ors_lab to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=BATCHES)
    parser.add_argument("--quick", action="store_true", help="1 round of 2 batches")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(args.worker, args.batches)))
        return
    rounds, batches = (1, 2) if args.quick else (args.rounds, args.batches)
    checkouts = {"ours": REPO_ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in checkouts}
    for number in range(rounds):
        order = list(checkouts) if number % 2 == 0 else list(reversed(checkouts))
        for name in order:
            results[name].append(_run(checkouts[name], batches))
        shown = ", ".join(f"{name} {_pooled(results[name][-1:], 'whole')[0]:.1f} µs" for name in checkouts)
        print(f"round {number + 1}: an episode, made + to_wire + to_json: {shown}", flush=True)
    print()
    print("| checkout | part | µs per episode (pooled) | rounds (min-max) |")
    print("|---|---|---:|---|")
    for name in checkouts:
        for part in ("whole", "build", "to_wire", "to_json"):
            pooled, low, high = _pooled(results[name], part)
            print(f"| {name} | {part} | {pooled:.1f} | {low:.1f}-{high:.1f} |")
    if args.baseline:
        for part in ("whole", "build", "to_wire", "to_json"):
            ratio = _pooled(results["ours"], part)[0] / _pooled(results["baseline"], part)[0]
            print(f"ours / baseline, {part}: {ratio:.3f}")


if __name__ == "__main__":
    main()
