"""SIGKILL of a recording evaluation at seeded moments: every partial trace loads, and a resume runs
each (task, rollout) exactly once. 6 moments, or 20 with ``ORS_LAB_SOAK=1`` (``tests/soak.py``).

The runs are children forked from one ``ZYGOTE`` process that has imported ors_lab once, so a run
starts in milliseconds and is killed at its moment, from the first request to the trace's
compaction. The moments are seeded: the same ones every time, spread over the time a whole run takes
here. The runs' recorders write a part every 50 ms (not 0.5 s), so that a short run has parts
written, being written and being compacted when it is killed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow.compute as pc
import pytest

from ors_lab import Client, load_trace
from ors_lab.demo.launch import ServerProcess
from ors_lab.evaluation import evaluate
from ors_lab.recording.parts import parts_dir
from tests.evaluation.policies import expected_reward, lab_policy
from tests.soak import cases

REPO_ROOT = Path(__file__).resolve().parents[2]
MOMENTS = cases(20, 6)
ROLLOUTS = 12  # x 2 tasks of the "test" split
KEYS = sorted((index, rollout) for index in range(2) for rollout in range(ROLLOUTS))

ZYGOTE = """
import os, sys
from ors_lab import Client
from ors_lab.evaluation import evaluate
from ors_lab.recording import Recorder
from tests.evaluation.policies import slow_lab_policy

Recorder.__init__.__kwdefaults__["flush_interval"] = 0.05  # parts every 50 ms: a short run writes several
url = sys.argv[1]
print("ready", flush=True)
for line in sys.stdin:
    path = line.strip()
    pid = os.fork()
    if pid == 0:
        log = os.open(path + ".log", os.O_WRONLY | os.O_CREAT)
        os.dup2(log, 1)
        os.dup2(log, 2)
        try:
            with Client(url) as client:
                evaluate(client.environment("lab"), slow_lab_policy, split="test", rollouts=ROLLOUTS, concurrency=4,
                         record=path, progress=False)
        except BaseException:
            import traceback
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        os._exit(0)
    print(pid, flush=True)
    sys.stdin.readline()  # the test has sent its SIGKILL (or waits for the end): reap the run now
    _, status = os.waitpid(pid, 0)
    print(status, flush=True)
""".replace("ROLLOUTS", str(ROLLOUTS))


class Zygote:
    """The process that forks the recording runs."""

    def __init__(self, url: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        self.proc = subprocess.Popen([sys.executable, "-c", ZYGOTE, url], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
        assert self.proc.stdout is not None and self.proc.stdout.readline().strip() == "ready"

    def run_killed(self, path: Path, after: float | None) -> bool:
        """Start a run recording into ``path`` and SIGKILL it ``after`` seconds in (None: let it end);
        whether it was killed while running."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{path}\n")
        self.proc.stdin.flush()
        pid = int(self.proc.stdout.readline())
        if after is not None:
            time.sleep(after)
            os.kill(pid, signal.SIGKILL)  # not yet reaped (the zygote waits for the next line): still this run's pid
        self.proc.stdin.write("reap\n")
        self.proc.stdin.flush()
        status = int(self.proc.stdout.readline())
        log = Path(f"{path}.log")
        assert not os.WIFEXITED(status) or os.WEXITSTATUS(status) == 0, log.read_text()
        log.unlink()
        return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def zygote(ors_sdk_server: ServerProcess) -> Iterator[Zygote]:
    made = Zygote(ors_sdk_server.url)
    yield made
    made.close()


@pytest.fixture(scope="module")
def run_seconds(zygote: Zygote, tmp_path_factory: pytest.TempPathFactory) -> float:
    """How long a whole run takes here, from the fork to its end: the moments are spread over it."""
    started = time.monotonic()
    zygote.run_killed(tmp_path_factory.mktemp("whole") / "run.parquet", None)
    return time.monotonic() - started


def _episode_rows(path: Path) -> Counter[tuple[int, int]]:
    table = load_trace(path).table
    rows = table.filter(pc.equal(table["kind"], "episode"))
    return Counter(zip(rows["task_index"].to_pylist(), rows["rollout"].to_pylist(), strict=True))


@pytest.mark.parametrize("moment", range(MOMENTS))
def test_killed_at_a_seeded_moment_then_resumed(
    zygote: Zygote, run_seconds: float, ors_sdk_server: ServerProcess, tmp_path: Path, moment: int
) -> None:
    """A run SIGKILLed at a seeded moment leaves a trace that loads; a resume runs each pair exactly once."""
    path = tmp_path / "run.parquet"
    # stratified: moment m is in its own slice of the run (and a little past its end), seeded within it
    width = 1.1 * run_seconds / MOMENTS
    after = random.Random(f"ors-lab-kill-{moment}").uniform(moment * width, (moment + 1) * width)
    killed = zygote.run_killed(path, after)
    left = path.is_file() or parts_dir(path).is_dir()
    if left:
        partial = load_trace(path)  # whatever the moment: a trace that loads
        done = _episode_rows(path)
        assert set(done.values()) <= {1}, f"killed at {after:.3f} s: an episode recorded twice: {done}"
        _ = partial.episodes, partial.calls
    else:
        done = Counter()
    with Client(ors_sdk_server.url) as client:
        result = evaluate(client.environment("lab"), lab_policy, split="test", rollouts=ROLLOUTS, concurrency=4,
                          record=path, progress=False)  # fmt: skip
    assert result.resumed == len(done), f"killed at {after:.3f} s (still running: {killed})"
    final = load_trace(path)
    assert not final.partial and not parts_dir(path).exists()
    assert _episode_rows(path) == Counter(dict.fromkeys(KEYS, 1)), f"killed at {after:.3f} s"
    episodes = result.episodes  # the trace's frame also lists the killed run's unfinished sessions
    pairs = list(zip(episodes["task_index"], episodes["rollout"], strict=True))
    assert sorted(pairs) == KEYS
    assert list(episodes["reward"]) == [expected_reward("test", i, r) for i, r in pairs]
    assert json.loads(json.dumps(final.metadata))["servers"] == [ors_sdk_server.url]
