"""The ors-lab command line, run as a user runs it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request

import pytest

from ors_lab.demo.env import arithmetic_tasks

CLI = [sys.executable, "-m", "ors_lab.cli"]


def test_demo_prints_prompts_calls_and_rewards() -> None:
    """`ors-lab demo` serves the demo environments, plays one episode on each, and prints it all."""
    done = subprocess.run([*CLI, "demo"], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    task = arithmetic_tasks("test")[0]
    assert re.search(r"demo environments served at http://127\.0\.0\.1:\d+", out)
    assert f"prompt: {task['question']}" in out
    assert f"call calculator({{'expression': '{task['expression']}'}}) -> '{task['answer']}'" in out
    assert "call submit({'answer': '" + str(task["answer"]) + "'}) -> 'Correct!'  reward=1  finished" in out
    assert "-> 'correct'  reward=1  finished" in out
    assert out.rstrip().endswith("total reward 2")


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


@pytest.mark.parametrize("args", [["demo", "--index", "99"]])
def test_demo_with_a_bad_task_index_fails_clearly(args: list[str]) -> None:
    """A task index the server does not have ends with the server's error, not a traceback."""
    done = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert "Invalid index" in done.stderr
    assert "Traceback" not in done.stderr
