"""``ors-lab demo``: the bundled demo environments, evaluated by the demo agent, recorded.

Starts the demo environments on the ors-sdk server on a free 127.0.0.1 port, evaluates
``DemoAgent`` on the test split of each (``arithmetic`` and ``guessing``) into one trace, prints
each summary, and says where the trace is and how to inspect and replay it.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from ors_lab.client import Client
from ors_lab.demo.agent import DemoAgent
from ors_lab.demo.launch import serve
from ors_lab.evaluation.result import EvalResult
from ors_lab.evaluation.run import evaluate
from ors_lab.recording.recorder import Recorder

__all__ = ["DEMO_ENVIRONMENTS", "default_trace_path", "run_demo"]

DEMO_ENVIRONMENTS = ("arithmetic", "guessing")


def default_trace_path() -> Path:
    """``recordings/demo-YYYYMMDD-HHMMSS.parquet`` under the current directory."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("recordings") / f"demo-{stamp}.parquet"


def run_demo(
    out: str | Path | None = None,
    *,
    split: str = "test",
    rollouts: int = 2,
    concurrency: int = 8,
    port: int = 0,
    say: Callable[[str], None] = print,
) -> list[EvalResult]:
    """Run the demo (see the module docstring); returns one ``EvalResult`` per environment."""
    path = Path(out) if out is not None else default_trace_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    results = []
    with serve(port=port) as server:
        say(f"demo environments served at {server.url}")
        with Recorder(path) as recorder, Client(server.url) as client:
            for name in DEMO_ENVIRONMENTS:
                result = evaluate(client.environment(name), DemoAgent(), split=split, rollouts=rollouts,
                                  concurrency=concurrency, record=recorder)  # fmt: skip
                say(f"\n{result!r}\n{result.table_text()}")
                results.append(result)
    command = runnable_command()
    say(
        f"\ntrace: {path}\n"
        f"  inspect:  {command} show {path}\n"
        f"  check:    {command} check {path}\n"
        f"  replay:   {command} replay {path} --port 8080   (an ORS server on 127.0.0.1 that answers as recorded)\n"
        f"  python:   ol.load_trace({str(path)!r}).episodes"
    )
    return results


def runnable_command() -> str:
    """``ors-lab`` as the caller's shell can run it: the bare name when it is on PATH, else the path of this
    environment's script (``.venv/bin/ors-lab`` after ``make demo``, whose venv is not activated)."""
    script = Path(sys.executable).parent / "ors-lab"
    found = shutil.which("ors-lab")
    if not script.exists() or (found is not None and Path(found).resolve() == script.resolve()):
        return "ors-lab"
    try:
        return os.path.relpath(script)
    except ValueError:  # another drive (Windows)
        return str(script)
