"""The public face of the package: what `import ors_lab` gives, and what it costs."""

from __future__ import annotations
import __future__

import importlib
import inspect
import pkgutil
import subprocess
import sys
import types
import typing

import pytest

import ors_lab
import ors_lab.agents

# The namespaces the design promises (the walk below finds them and any other subpackage with an `__all__`).
PROMISED = {"ors_lab", "ors_lab.agents", "ors_lab.analysis", "ors_lab.client", "ors_lab.evaluation", "ors_lab.events",
            "ors_lab.feed", "ors_lab.html", "ors_lab.notebook", "ors_lab.protocol", "ors_lab.pytest_plugin",
            "ors_lab.recording", "ors_lab.replay"}  # fmt: skip
# Dunder names a namespace exports on purpose (httpx's test allows its own the same way).
EXPORTED_DUNDERS = {"__version__"}
STDLIB = sys.stdlib_module_names
# The plugin's names that pytest finds by name (hooks and fixtures): pytest's face, not an import's; a star
# import of them into a conftest would register the hooks twice, so they stay out of `__all__`.
PYTEST_FACING = {"pytest_addoption", "pytest_configure", "pytest_runtest_call", "pytest_runtest_makereport",
                 "pytest_terminal_summary", "ors_record_mode", "ors_replay", "ors_replay_config",
                 "ors_replay_transport", "ors_trace_path"}  # fmt: skip


def _namespaces() -> list[str]:
    """`ors_lab` and each of its subpackages that declares `__all__`, found by walking the package."""
    found = ["ors_lab"]
    for info in pkgutil.iter_modules(ors_lab.__path__, "ors_lab."):
        if info.ispkg and hasattr(importlib.import_module(info.name), "__all__"):
            found.append(info.name)
    return found


def _modules() -> list[str]:
    """The top-level modules (not packages) that declare `__all__`: `ors_lab.transcript`, `ors_lab.display`, ..."""
    return [info.name for info in pkgutil.iter_modules(ors_lab.__path__, "ors_lab.")
            if not info.ispkg and hasattr(importlib.import_module(info.name), "__all__")]  # fmt: skip


MODULES = _modules()


def _isort_style(name: str) -> tuple[int, str]:
    """Constants, then classes, then the rest, each alphabetical (ruff's order for `__all__`)."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)


def _public_names(module: types.ModuleType) -> list[str]:
    """The names a module offers, as httpx's test counts them: what `dir` shows without a leading underscore,
    less modules (its own submodules, the modules it imports) and the classes and functions it imports from
    the standard library (`typing.Any`, `pathlib.Path`, `functools.cache`, ...). Aliases (`Block`) and
    re-exported third-party types (`ServerSentEvent`) count."""
    names = set(EXPORTED_DUNDERS & set(vars(module)))
    for name in dir(module):
        value = getattr(module, name)
        if name.startswith("_") or isinstance(value, types.ModuleType):
            continue
        if any(getattr(helpers, name, None) is value for helpers in (typing, __future__)):
            continue  # `TYPE_CHECKING`, `annotations`: no `__module__` of their own to tell where they come from
        if (inspect.isclass(value) or inspect.isroutine(value)) and value.__module__.split(".")[0] in STDLIB:
            continue
        names.add(name)
    if module.__name__ == "ors_lab.pytest_plugin":
        names -= PYTEST_FACING
    return sorted(names, key=_isort_style)


def test_the_promised_namespaces_declare_all() -> None:
    """Every namespace the design promises declares `__all__`, so the exact test below covers it."""
    assert set(_namespaces()) >= PROMISED


def test_all_is_exactly_the_public_names() -> None:
    """Each public namespace's `__all__` is exactly its public names, sorted: nothing missing, nothing stray."""
    wrong = {}
    for name in _namespaces():
        module = importlib.import_module(name)
        for attribute in module.__all__:  # resolves the lazy names (`ors_lab.evaluate`, ...) first
            getattr(module, attribute)
        if module.__all__ != _public_names(module):
            exported, public = set(module.__all__), set(_public_names(module))
            wrong[name] = {"not in __all__": sorted(public - exported), "not public": sorted(exported - public)}
            wrong[name]["order"] = [] if exported != public else module.__all__
    assert wrong == {}


def test_the_plugin_offers_pytest_its_hooks_and_fixtures() -> None:
    """The pytest plugin's hooks and fixtures, which pytest finds by name, are exactly the documented ones."""
    import ors_lab.pytest_plugin as plugin

    offered = {n for n in dir(plugin) if n.startswith(("pytest_", "ors_")) and callable(getattr(plugin, n))}
    assert offered == PYTEST_FACING


def test_the_modules_are_found() -> None:
    """The walk finds the plain modules the next test checks, the joiner and the display hook among them."""
    assert {"ors_lab.display", "ors_lab.transcript"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_all_is_sorted_and_complete(name: str) -> None:
    """A plain module's `__all__` (not a namespace: it may leave names out) is sorted, and each name in it exists."""
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
                "watch", "OpenAIAgent", "OpenAIResponsesAgent", "AnthropicAgent"}  # fmt: skip
    assert expected <= set(ors_lab.__all__)
    assert {"OpenAIAgent", "OpenAIResponsesAgent", "AnthropicAgent"} <= set(ors_lab.agents.__all__)
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
    """`import ors_lab` loads no pandas, pyarrow, numpy, IPython, ipywidgets, anywidget, uvicorn, reference-server or
    LLM SDK, and no HTTP library but httpx2."""
    code = "import sys, ors_lab; print(sorted(m for m in ('pandas', 'IPython', 'ipywidgets', 'anywidget', 'traitlets', "
    code += "'uvicorn', 'ors', 'openreward', 'nest_asyncio2', 'anthropic', 'openai', 'pyarrow', 'numpy', 'aiohttp', "
    code += "'httpx') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
