"""The public face of the package: what `import ors_lab` gives, and what it costs."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest

import ors_lab

PUBLIC_MODULES = ["ors_lab", "ors_lab.events", "ors_lab.analysis", "ors_lab.recording", "ors_lab.agents",
                  "ors_lab.evaluation", "ors_lab.feed", "ors_lab.replay", "ors_lab.client",
                  "ors_lab.protocol"]  # fmt: skip


def _isort_style(name: str) -> tuple[int, str]:
    """Constants, then classes, then the rest, each alphabetical (ruff's order for `__all__`)."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_is_sorted_and_complete(name: str) -> None:
    """Each public namespace's `__all__` is sorted, and every name in it exists."""
    module = importlib.import_module(name)
    assert module.__all__ == sorted(module.__all__, key=_isort_style)
    for attribute in module.__all__:
        assert hasattr(module, attribute), attribute


def test_public_names() -> None:
    """The names the design promises are exported, with the types a user needs: blocks, steps, events, the
    recording transport; every event type is public in ors_lab.events."""
    expected = {"Client", "AsyncClient", "ToolResult", "ToolOutput", "TextBlock", "ImageBlock", "Task", "Split",
                "Block", "Step", "Event", "AgentEvent", "WireEvent", "EventStream", "Subscription",
                "RecordingTransport", "Recorder", "Trace", "load_trace", "evaluate", "EvalResult", "Feed",
                "watch"}  # fmt: skip
    assert expected <= set(ors_lab.__all__)
    assert {cls.__name__ for cls in ors_lab.events.EVENT_TYPES.values()} <= set(ors_lab.events.__all__)


def test_evaluate_takes_its_keywords_in_the_signature() -> None:
    """`evaluate` and `aevaluate` name every keyword (editors show them), and the same ones."""
    sync, run = inspect.signature(ors_lab.evaluate), inspect.signature(ors_lab.aevaluate)
    kinds = {p.kind for p in sync.parameters.values()}
    assert inspect.Parameter.VAR_KEYWORD not in kinds and inspect.Parameter.VAR_POSITIONAL not in kinds
    assert list(sync.parameters) == list(run.parameters)
    assert {"split", "tasks", "rollouts", "concurrency", "record", "resume", "reward", "subscribe", "feed"} <= set(
        sync.parameters
    )


def test_import_stays_light() -> None:
    """`import ors_lab` loads no pandas, IPython, ipywidgets, anywidget, uvicorn or reference-server SDK."""
    code = "import sys, ors_lab; print(sorted(m for m in ('pandas', 'IPython', 'ipywidgets', 'anywidget', 'traitlets', "
    code += "'uvicorn', 'ors', 'openreward', 'nest_asyncio2') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
