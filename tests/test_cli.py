"""The ors-lab command line, run as a user runs it."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from ors_lab import load_trace
from ors_lab.demo.launch import ServerProcess
from tests.conftest import REPO_ROOT
from tests.evaluation.policies import expected_reward

CLI = [sys.executable, "-m", "ors_lab.cli"]


def test_demo_evaluates_the_demo_agent_with_recording(tmp_path: Path) -> None:
    """`ors-lab demo` evaluates the demo agent on both demo environments, records it, and says how to replay."""
    trace = tmp_path / "demo.parquet"
    started = time.monotonic()
    done = subprocess.run([*CLI, "demo", "--out", str(trace)], capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 60
    out = done.stdout
    assert re.search(r"demo environments served at http://127\.0\.0\.1:\d+", out)
    for name in ("arithmetic", "guessing"):
        assert f"EvalResult({name}/test: 20 episodes over 10 tasks x 2 rollouts; mean reward 1.000" in out
    assert f"trace: {trace}" in out and f"ors-lab replay {trace}" in out and f"ors-lab show {trace}" in out
    shown = re.search(r"inspect:  (\S+) show ", out)
    assert shown and shutil.which(shown.group(1)), out  # the command as printed runs from here, venv activated or not
    loaded = load_trace(trace)
    assert len(loaded.episodes) == 40 and (loaded.episodes["total_reward"] == 1.0).all()
    agent = loaded.events[loaded.events["layer"] == "agent"]
    assert (agent["kind"] == "reasoning-delta").sum() > 100
    assert (agent["kind"] == "episode").sum() == 40


def test_eval_records_prints_and_writes_the_episodes(ors_sdk_server: ServerProcess, tmp_path: Path) -> None:
    """`ors-lab eval` runs a policy given as module:object, prints the summary, writes episodes beside the trace."""
    trace = tmp_path / "run.parquet"
    args = [*CLI, "eval", ors_sdk_server.url, "--env", "lab", "--split", "train", "--rollouts", "2",
            "--agent", "tests.evaluation.policies:lab_policy", "--out", str(trace)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert done.returncode == 0, done.stderr
    assert "EvalResult(lab/train: 6 episodes over 3 tasks x 2 rollouts; mean reward 0.500" in done.stdout
    assert "eval lab/train: 6/6 episodes" in done.stderr
    episodes = pd.read_parquet(tmp_path / "run.episodes.parquet")
    assert [(r.task_index, r.rollout, r.reward) for r in episodes.itertuples()] == [
        (i, r, expected_reward("train", i, r)) for i in range(3) for r in range(2)
    ]
    assert len(load_trace(trace).episodes) == 6
    again = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert again.returncode == 0, again.stderr
    assert "6/6 episodes (6 resumed)" in again.stderr
    assert len(load_trace(trace).episodes) == 6


def test_eval_without_split_runs_the_only_one_and_names_them_when_there_are_several(
    ors_sdk_server: ServerProcess, tmp_path: Path
) -> None:
    """`ors-lab eval` without --split runs `echo`'s only split; on `lab` (train, test) it fails with one line
    naming them, leaving no trace."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    args = [*CLI, "eval", ors_sdk_server.url, "--agent", "tests.evaluation.policies:echo_once"]
    done = subprocess.run([*args, "--env", "echo", "--out", str(tmp_path / "echo.parquet")], capture_output=True,
                          text=True, timeout=120, check=False, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "EvalResult(echo/dev: 2 episodes over 2 tasks x 1 rollouts" in done.stdout
    several = subprocess.run([*args, "--env", "lab", "--out", str(tmp_path / "lab.parquet")], capture_output=True,
                             text=True, timeout=120, check=False, env=env)  # fmt: skip
    assert several.returncode == 1 and "Traceback" not in several.stderr
    assert several.stderr.strip() == (
        "ors-lab eval: environment 'lab' has 2 splits: train, test; pass --split to say which one to evaluate"
    )
    assert not (tmp_path / "lab.parquet").exists()
    nested = tmp_path / "runs" / "lab.parquet"  # the folders it made for the trace are removed too
    subprocess.run([*args, "--env", "lab", "--out", str(nested)], capture_output=True, timeout=60, check=False, env=env)
    assert not nested.parent.exists()


def test_eval_on_ray_workers(ors_sdk_server: ServerProcess, tmp_path: Path) -> None:
    """`ors-lab eval --ray --workers 2` starts a private loopback cluster, runs the episodes on its two workers
    (the trace names them), prints the same summary as a local run, and stops the cluster; --workers alone is
    refused."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed (pip install 'ors-lab[ray]')")
    trace = tmp_path / "run.parquet"
    args = [*CLI, "eval", ors_sdk_server.url, "--env", "lab", "--split", "train", "--rollouts", "2",
            "--agent", "tests.evaluation.policies:lab_policy", "--out", str(trace)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    alone = subprocess.run([*args, "--workers", "2"], capture_output=True, text=True, timeout=60, check=False, env=env)
    assert alone.returncode == 2 and "--workers N goes with --ray" in alone.stderr
    done = subprocess.run([*args, "--ray", "--workers", "2"], capture_output=True, text=True, timeout=240,
                          check=False, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "EvalResult(lab/train: 6 episodes over 3 tasks x 2 rollouts; mean reward 0.500" in done.stdout
    table = load_trace(trace).table
    assert set(table["worker"].drop_null().to_pylist()) == {"w0", "w1"}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--agent", "nope"], "--agent takes MODULE:OBJECT"),
        (["--agent", "tests.evaluation.policies:missing"], "has no attribute 'missing'"),
        ([], "give --agent MODULE:OBJECT or --openai-model MODEL"),
    ],
)
def test_eval_with_a_bad_agent_fails_clearly(
    ors_sdk_server: ServerProcess, tmp_path: Path, extra: list[str], message: str
) -> None:
    """A bad or missing agent ends with a one-line error, not a traceback."""
    args = [*CLI, "eval", ors_sdk_server.url, "--env", "lab", "--out", str(tmp_path / "x.parquet"), *extra]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False, env=env)
    assert done.returncode in (1, 2)
    assert message in done.stderr and "Traceback" not in done.stderr


def test_demo_server_serves_until_terminated() -> None:
    """`ors-lab demo-server` answers on 127.0.0.1 and stops cleanly on SIGTERM."""
    proc = subprocess.Popen([*CLI, "demo-server"], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    with proc.stdout:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+", line)
        assert url, line
        with urllib.request.urlopen(f"{url.group(0)}/list_environments", timeout=10) as response:
            assert response.read() == b'["arithmetic","guessing"]'
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            assert proc.wait(timeout=20) == 0
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_unknown_command_is_a_usage_error() -> None:
    """A command that does not exist exits 2 and lists the valid ones."""
    done = subprocess.run([*CLI, "nope"], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 2
    assert "demo-server" in done.stderr


def test_eval_redacts_the_patterns_given(ors_sdk_server: ServerProcess, tmp_path: Path) -> None:
    """`ors-lab eval --redact-pattern` records the run with the pattern's matches taken out, and resumes it."""
    trace = tmp_path / "run.parquet"
    args = [*CLI, "eval", ors_sdk_server.url, "--env", "lab", "--split", "train", "--tasks", "1",
            "--agent", "tests.evaluation.policies:lab_policy", "--out", str(trace),
            "--redact-pattern", "Answer with the [a-z]+ tool"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert done.returncode == 0, done.stderr
    text = load_trace(trace).events.astype(str).to_csv()
    assert "Answer with the submit tool" not in text and "<redacted>" in text
    again = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False, env=env)
    assert again.returncode == 0, again.stderr
    assert "1/1 episodes (1 resumed)" in again.stderr


def test_report_writes_one_html_file_to_share(tmp_path: Path) -> None:
    """`ors-lab report TRACE -o PATH` writes the page (its directory made) and says what it holds; without -o the
    page goes beside the trace; a page already there is replaced; --timelines bounds what it holds."""
    trace = tmp_path / "demo.parquet"
    shutil.copy(REPO_ROOT / "recordings" / "demo.parquet", trace)
    out = tmp_path / "reports" / "run.html"
    done = subprocess.run([*CLI, "report", str(trace), "-o", str(out)], capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    size = out.stat().st_size
    assert done.stdout == f"wrote {out} ({size / 1024:.0f} KB): 40 episodes, every episode's timeline and transcript\n"
    assert out.read_text(encoding="utf-8").startswith("<!doctype html>")
    beside = subprocess.run([*CLI, "report", "demo.parquet", "--timelines", "5"], capture_output=True, text=True,
                            timeout=120, check=False, cwd=tmp_path)  # fmt: skip
    assert beside.returncode == 0, beside.stderr
    assert beside.stdout.endswith("40 episodes, the timelines and transcripts of 5 of them\n")
    replaced = subprocess.run([*CLI, "report", str(trace), "--out", str(out), "--timelines", "5"],
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert replaced.returncode == 0, replaced.stderr
    assert out.read_bytes() == (tmp_path / "demo.html").read_bytes() and out.stat().st_size < size
