"""Shared fixtures: the two reference servers, the demo server and the cutting proxy.

Servers are session-scoped and started lazily, once per test session, on 127.0.0.1:

- `ors_sdk_server`, `openreward_server`: `tests/envs/*_envs.py` on each reference server.
- `reference_server`: parametrised over both (ids `ors-sdk`, `openreward`).
- `quick_ping_server` (and its two halves): the test environments on servers that ping a running
  call every 2 s, not 10 (`tests/envs/quick_pings.py`): for the tests that need a ping, not the real interval.
- `wild_ors_sdk_server`, `wild_openreward_server`, `wild_server` (both in turn): the environments in the
  shapes public ones have (`tests/envs/wild_*.py`) on each reference server.
- `demo_server`: the bundled demo environments (`ors_lab.demo.env`) on ors-sdk.
- `counting_server`: `lab` on ors-sdk, writing the sessions it holds to a file (`tests/envs/counting_envs.py`).
- `cutting_proxy`: a factory, `cutting_proxy(upstream_url, **options) -> CuttingProxy`.
- `sigint_raises`: SIGINT raises KeyboardInterrupt in the test process, as in a terminal.
- `ray_cluster`: one loopback-only local Ray cluster for the module (`ors_lab.evaluation.ray.start_local`);
  its tests skip where Ray is not installed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import re
import signal
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.durations
from ors_lab.demo.launch import ServerProcess, serve
from ors_lab.notebook import settings
from tests.cutting_proxy import CuttingProxy
from tests.envs.common import QUICK_PING_S
from tests.envs.counting_envs import LIVE_FILE_VAR

REPO_ROOT = Path(__file__).resolve().parents[1]
SPECS = {
    "ors-sdk": "tests.envs.ors_sdk_envs:ENVIRONMENTS",
    "openreward": "tests.envs.openreward_envs:ENVIRONMENTS",
}
WILD_SPECS = {
    "ors-sdk": "tests.envs.wild_ors_sdk:ENVIRONMENTS",
    "openreward": "tests.envs.wild_openreward:ENVIRONMENTS",
}
QUICK_PING_SPECS = {"ors-sdk": "tests.envs.quick_pings:ORS_SDK", "openreward": "tests.envs.quick_pings:OPENREWARD"}
# The children import `tests.envs.*` from the repo root whatever directory pytest runs in.
_CHILD_ENV = {"PYTHONPATH": str(REPO_ROOT)}


@pytest.fixture(scope="session")
def ors_sdk_server() -> Iterator[ServerProcess]:
    """The test environments on the ors-sdk reference server."""
    with serve(SPECS["ors-sdk"], sdk="ors-sdk", env=_CHILD_ENV) as server:
        yield server


@pytest.fixture(scope="session")
def openreward_server() -> Iterator[ServerProcess]:
    """The test environments on the openreward reference server."""
    with serve(SPECS["openreward"], sdk="openreward", env=_CHILD_ENV) as server:
        yield server


@pytest.fixture(scope="session", params=["ors-sdk", "openreward"], ids=["ors-sdk", "openreward"])
def reference_server(request: pytest.FixtureRequest) -> ServerProcess:
    """Each reference server in turn (the same two processes as the single fixtures)."""
    name = "ors_sdk_server" if request.param == "ors-sdk" else "openreward_server"
    server: ServerProcess = request.getfixturevalue(name)
    return server


def _served(specs: dict[str, str], sdk: str, what: str) -> Any:
    """A session-scoped fixture: the environments of ``specs[sdk]`` on that reference server."""

    @pytest.fixture(scope="session")
    def server() -> Iterator[ServerProcess]:
        with serve(specs[sdk], sdk=sdk, env=_CHILD_ENV) as process:
            yield process

    server.__doc__ = f"{what} on the {sdk} reference server."
    return server


def _each(prefix: str, what: str) -> Any:
    """A fixture giving the ``{prefix}_ors_sdk_server`` and ``{prefix}_openreward_server`` in turn."""

    @pytest.fixture(scope="session", params=["ors-sdk", "openreward"], ids=["ors-sdk", "openreward"])
    def each(request: pytest.FixtureRequest) -> ServerProcess:
        server: ServerProcess = request.getfixturevalue(f"{prefix}_{request.param.replace('-', '_')}_server")
        return server

    each.__doc__ = f"Each reference server with {what} in turn (its `sdk` says which)."
    return each


WILD = "the wild-shaped environments (game2048, gsm8k, port)"
wild_ors_sdk_server = _served(WILD_SPECS, "ors-sdk", WILD)
wild_openreward_server = _served(WILD_SPECS, "openreward", WILD)
wild_server = _each("wild", WILD)
QUICK = f"the test environments pinging a running call every {QUICK_PING_S} s"
quick_ping_ors_sdk_server = _served(QUICK_PING_SPECS, "ors-sdk", QUICK)
quick_ping_openreward_server = _served(QUICK_PING_SPECS, "openreward", QUICK)
quick_ping_server = _each("quick_ping", QUICK)


@pytest.fixture(scope="session")
def demo_server() -> Iterator[ServerProcess]:
    """The bundled demo environments (arithmetic, guessing) on the ors-sdk server."""
    with serve() as server:
        yield server


@pytest.fixture(scope="session")
def counting_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    """`lab` on ors-sdk, writing its live sessions to a file; yields the server and the file.

    Shared by the whole run: read it as a difference (`live_sessions(file)` before and after).
    """
    live = tmp_path_factory.mktemp("live") / "sessions.txt"
    env = {**_CHILD_ENV, LIVE_FILE_VAR: str(live)}
    with serve("tests.envs.counting_envs:ENVIRONMENTS", sdk="ors-sdk", env=env) as server:
        yield server, live


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A local Ray cluster of 2 CPUs, loopback only, started once for the module (Ray takes seconds to start), and
    stopped after it, so that no other test's cluster runs meanwhile (the serial pass runs them one by one)."""
    if importlib.util.find_spec("ray") is None:  # not importorskip: Ray must not be imported before start_local
        pytest.skip("Ray is not installed (pip install 'ors-lab[ray]')")
    from ors_lab.evaluation.ray import start_local

    with start_local(cpus=2) as cluster:
        yield cluster


QUICK_S = 1.0
"""`--quick` (`make check`) leaves out the tests recorded (tests/durations.json) as taking longer than this."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--quick",
        action="store_true",
        help="the inner loop (make check): leave out the tests "
        f"that start a browser, a kernel or Ray, are marked slow, or took over {QUICK_S} s when last timed",
    )


def pytest_configure(config: pytest.Config) -> None:
    """A test run started with SIGINT ignored (a background job of a non-interactive shell) takes it back:
    the processes the tests start inherit an ignored SIGINT and Python keeps it, so a test's Ctrl-C to
    its child (``test_ctrl_c_stops_cleanly``, ``test_ctrl_c_is_one_line_and_status_130``) was dropped
    and the child ran on. A person's terminal gives its commands a SIGINT that interrupts."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# The suite runs in two passes (Makefile: `make test`): the tests marked `serial` alone, then the rest on
# pytest-xdist workers. Serial: wall-clock timing to tens of milliseconds, and the RAY tests (every test that
# starts a Ray cluster: under the parallel pass's load a cluster misses Ray's own 30 s start deadline, and two
# at once time out starting). A worker takes a file at a time, the longest files first (as tests/durations.json
# has them), so that no long one is left for the end.
RAY = (
    "tests/test_cli.py::test_eval_on_ray_workers",
    "tests/test_docs.py::test_example[docs/scale-out.md",
    "tests/evaluation/test_ray.py",
)
"""Node id prefixes of the tests that start a Ray cluster."""


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist hands out whole files in the order collected (`pytest_collection_modifyitems`)."""
    from xdist.scheduler import LoadFileScheduling  # only in xdist's controller

    config.option.loadscopereorder = False  # xdist would put the files with the most tests first instead
    return LoadFileScheduling(config, log)


# `make check`, the inner loop, runs the tests that need no browser and no kernel: a test is marked
# `browser` or `kernel` here when its code, or a function of its module that it calls, starts one.
BROWSER = re.compile(r"\bsync_playwright\b|\bJupyterLab\(")
KERNEL = re.compile(r"\bKernel\(|\bstart_new_kernel\b|\bKernelManager\(|\bNotebookClient\(")
FIXTURES = {
    "browser": {"jupyter_lab", "notebook7", "marimo_run", "marimo_export", "static_pages"},
    "kernel": {"kernel", "jupyter_lab", "notebook7", "marimo_run", "marimo_export"},
}
"""The fixtures that start one (pytest's fixtures are no plain functions: their code is not read here)."""


def _starts(pattern: re.Pattern[str], module: types.ModuleType) -> set[str]:
    """The names of `module`'s functions whose code matches `pattern`, or calls one that does."""
    sources: dict[str, str] = {}
    for name, value in vars(module).items():
        if inspect.isfunction(value) and value.__module__ == module.__name__:
            with contextlib.suppress(OSError, TypeError):  # made at run time: no source to read
                sources[name] = inspect.getsource(value)
    found = {name for name, source in sources.items() if pattern.search(source)}
    while True:
        calls = {name for name, source in sources.items() if name not in found
                 and any(re.search(rf"\b{re.escape(hit)}\(", source) for hit in found)}  # fmt: skip
        if not calls:
            return found
        found |= calls


def _needs(item: pytest.Item, what: str, pattern: re.Pattern[str], seen: dict[str, set[str]]) -> bool:
    """Whether `item` starts `what`: in its own code or its module's helpers (as `pattern` finds), or a fixture."""
    function = getattr(item, "function", None)
    module = getattr(item, "module", None)
    if function is None or module is None:
        return False
    key = f"{module.__name__}:{pattern.pattern}"
    if key not in seen:
        seen[key] = _starts(pattern, module)
    return function.__name__ in seen[key] or bool(FIXTURES[what] & set(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks the RAY tests serial and the tests that start a browser or a kernel (notebooks run in one); with
    `--quick`, leaves out those and the long ones; orders the tests by file, the longest files first (the same
    order on every worker)."""
    seen: dict[str, set[str]] = {}
    for item in items:
        if item.nodeid.startswith(RAY):
            item.add_marker(pytest.mark.serial)
        if _needs(item, "browser", BROWSER, seen):
            item.add_marker(pytest.mark.browser)
        if _needs(item, "kernel", KERNEL, seen) or item.nodeid.startswith("notebooks/"):
            item.add_marker(pytest.mark.kernel)
    durations = tests.durations.load()
    if config.getoption("quick"):
        kept, left = [], []
        for item in items:
            long = durations.get(item.nodeid, 0.0) > QUICK_S or item.get_closest_marker("slow") is not None
            heavy = any(item.get_closest_marker(name) is not None for name in ("browser", "kernel", "serial"))
            (left if long or heavy else kept).append(item)
        config.hook.pytest_deselected(items=left)
        items[:] = kept
    length: dict[str, float] = {}
    for item in items:
        file = item.nodeid.split("::", 1)[0]
        length[file] = length.get(file, 0.0) + durations.get(item.nodeid, 0.1)
    items.sort(key=lambda item: -length[item.nodeid.split("::", 1)[0]])  # stable: a file's tests keep their order


@pytest.fixture
def sigint_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in this process, as in a terminal, for the test's duration.

    A process started with SIGINT ignored (a background job of a non-interactive shell, as test
    runs often are) inherits SIG_IGN, and Python then keeps it: a SIGINT is silently dropped.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.fixture(autouse=True)
def views_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts from the default live views mode, and its own setting is undone afterwards."""
    monkeypatch.setattr(settings, "_mode", None)
    monkeypatch.delenv(settings.ENV_VAR, raising=False)


@pytest.fixture
def cutting_proxy() -> Iterator[Callable[..., CuttingProxy]]:
    """A factory for started cutting proxies; each one is closed after the test."""
    made: list[CuttingProxy] = []

    def make(upstream_url: str, **options: Any) -> CuttingProxy:
        """Start a CuttingProxy in front of `upstream_url` with the given options."""
        proxy = CuttingProxy(upstream_url, **options).start()
        made.append(proxy)
        return proxy

    yield make
    for proxy in made:
        proxy.close()
