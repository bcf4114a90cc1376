"""The pytest plugin: the `ors_replay` fixture and marker, run in child pytest processes.

Each test writes a small test module with `pytester` and runs it in a subprocess, so the child
loads the plugin through its `pytest11` entry point, as a user's pytest does. The upstream is the
real ors-sdk server with the test environments; "offline" runs point `--ors-upstream` at a closed
port, so any contact with it would fail.
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest

from ors_lab import Client, Recorder, load_trace
from ors_lab.demo.launch import ServerProcess
from ors_lab.replay.proxy import serve_proxy

pytest_plugins = ["pytester"]

HEADER = '''
import json
from pathlib import Path

import pytest

import ors_lab


def episode(url, texts, index=0):
    """One episode of the echo environment; (text, reward, finished) of each echo call."""
    with ors_lab.Client(url) as client:
        with client.environment("echo").session(split="dev", index=index) as session:
            results = [session.call("echo", {"text": text}) for text in texts]
    return [[r.text, r.reward, r.finished] for r in results]


def save(name, value):
    """Write `value` as JSON next to this test file, for the parent test to compare."""
    Path(__file__).with_name(name).write_text(json.dumps(value))
'''


def _module(body: str) -> str:
    """A generated test module: the shared header, then `body`."""
    return HEADER + "\n\n" + body.strip() + "\n"


@pytest.fixture
def child(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester directory with warnings as errors and no record mode or upstream in the environment."""
    monkeypatch.delenv("ORS_LAB_RECORD_MODE", raising=False)
    monkeypatch.delenv("ORS_LAB_UPSTREAM", raising=False)
    pytester.makeini("[pytest]\nfilterwarnings =\n    error\nasyncio_default_fixture_loop_scope = function\n")
    return pytester


@pytest.fixture(scope="module")
def closed_url() -> str:
    """The URL of a port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """Run pytest in a child process on the pytester directory, without nbval and Hypothesis: plugins of this
    repository's test stack that a user's project has no use for, and which take half of a child's 2 s to start."""
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:nbval", "-p", "no:hypothesispytest", "-ra", *args, timeout=60
    )


def seed(server: ServerProcess, path: Path, texts: list[str]) -> None:
    """Record one echo episode into the trace at `path` in this process, through the recording proxy."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with Recorder(path) as recorder, serve_proxy(server.url, recorder) as url, Client(url) as client:
        with client.environment("echo").session(split="dev", index=0) as session:
            for text in texts:
                session.call("echo", {"text": text})


def record_args(server: ServerProcess, mode: str = "once") -> list[str]:
    """The options that record from `server`."""
    return [f"--ors-record-mode={mode}", f"--ors-upstream={server.url}"]


def trace_files(directory: Path) -> list[str]:
    """The names in a recordings directory (temporary files included)."""
    return sorted(p.name for p in directory.iterdir())


def echo_inputs(path: Path) -> list[str]:
    """The inputs of the echo calls the trace at `path` recorded, in order."""
    table = load_trace(path).table.to_pylist()
    return [row["input"] for row in table if row["kind"] == "request" and row["tool"] == "echo"]


def test_once_records_then_none_replays_offline(child: pytest.Pytester, ors_sdk_server: ServerProcess,
                                                closed_url: str) -> None:  # fmt: skip
    """`once` records the trace at the deterministic path; `none` then replays it with no upstream, same results."""
    child.makepyfile(
        test_echo=_module("""
def test_echo(ors_replay):
    save(f"result-{ors_replay.mode}.json", episode(ors_replay.url, ["hello", "ors"]))
""")
    )
    recorded = run(child, *record_args(ors_sdk_server))
    recorded.assert_outcomes(passed=1)
    trace = child.path / "recordings" / "test_echo" / "test_echo.parquet"
    assert trace_files(trace.parent) == ["test_echo.parquet"]
    assert "recorded recordings/test_echo/test_echo.parquet from" in recorded.stdout.str()

    replayed = run(child, "--ors-record-mode=none", f"--ors-upstream={closed_url}")
    replayed.assert_outcomes(passed=1)
    live = json.loads((child.path / "result-record.json").read_text())
    assert live == [["hello", 0.5, False], ["ors", 0.5, False]]
    assert json.loads((child.path / "result-replay.json").read_text()) == live


def test_none_without_trace_fails_naming_path_and_command(child: pytest.Pytester) -> None:
    """In `none` mode a missing trace fails the test (not an error) with its path and the command that records it."""
    child.makepyfile(
        test_missing=_module("""
@pytest.mark.parametrize("word", ["plain", "two words/slash"])
def test_word(ors_replay, word):
    episode(ors_replay.url, [word])


class TestGroup:
    def test_inside(self, ors_replay):
        episode(ors_replay.url, ["x"])
""")
    )
    result = run(child)
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    assert "no trace at recordings/test_missing/test_word-plain.parquet" in out
    assert "pytest --ors-record-mode=once --ors-upstream URL 'test_missing.py::test_word[plain]'" in out
    assert re.search(r"no trace at recordings/test_missing/test_word-two_words_slash-[0-9a-f]{8}\.parquet", out)
    assert "pytest --ors-record-mode=once --ors-upstream URL 'test_missing.py::test_word[two words/slash]'" in out
    assert "no trace at recordings/test_missing/TestGroup.test_inside.parquet" in out
    assert not (child.path / "recordings").exists()


def test_record_mode_from_environment(child: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """$ORS_LAB_RECORD_MODE sets the mode, the option wins over it, and a bad value lists the valid modes."""
    child.makepyfile(test_env=_module("def test_echo(ors_replay):\n    episode(ors_replay.url, ['hi'])"))
    monkeypatch.setenv("ORS_LAB_RECORD_MODE", "once")
    no_upstream = run(child)
    no_upstream.assert_outcomes(failed=1)
    assert "record mode 'once' needs to record recordings/test_env/test_echo.parquet but has no upstream" in (
        no_upstream.stdout.str()
    )
    option_wins = run(child, "--ors-record-mode=none")
    option_wins.assert_outcomes(failed=1)
    assert "no trace at recordings/test_env/test_echo.parquet" in option_wins.stdout.str()
    monkeypatch.setenv("ORS_LAB_RECORD_MODE", "sometimes")
    bad = run(child)
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert "ORS_LAB_RECORD_MODE='sometimes' is not a record mode; valid modes are none, once, new_episodes, all" in (
        bad.stderr.str()
    )


def test_request_the_trace_lacks_raises_mismatch(child: pytest.Pytester, ors_sdk_server: ServerProcess) -> None:
    """A call the trace lacks raises ReplayMismatchError, in `none` and in a recorded episode under `new_episodes`."""
    seed(ors_sdk_server, child.path / "recordings" / "test_ask" / "test_echo.parquet", ["hello"])
    child.makepyfile(test_ask=_module("def test_echo(ors_replay):\n    episode(ors_replay.url, ['goodbye'])"))
    for args in ([], record_args(ors_sdk_server, "new_episodes")):
        result = run(child, *args)
        result.assert_outcomes(failed=1)
        out = result.stdout.str()
        assert "ReplayMismatchError" in out
        assert 'input.text: "goodbye" != recorded "hello"' in out
    assert echo_inputs(child.path / "recordings" / "test_ask" / "test_echo.parquet") == ['{"text":"hello"}']


def test_all_records_again_and_keeps_the_trace_when_the_test_fails(child: pytest.Pytester,
                                                                   ors_sdk_server: ServerProcess) -> None:  # fmt: skip
    """`all` replaces an existing trace with a new recording, but only when the test passed."""
    trace = child.path / "recordings" / "test_again" / "test_echo.parquet"
    seed(ors_sdk_server, trace, ["first"])

    child.makepyfile(test_again=_module("def test_echo(ors_replay):\n    episode(ors_replay.url, ['second'])"))
    run(child, *record_args(ors_sdk_server, "all")).assert_outcomes(passed=1)
    assert echo_inputs(trace) == ['{"text":"second"}']
    before = trace.read_bytes()

    child.makepyfile(
        test_again=_module("""
def test_echo(ors_replay):
    assert ors_replay.mode == "record"
    episode(ors_replay.url, ["third"])
    assert False, "the test fails after its calls"
""")
    )
    failed = run(child, *record_args(ors_sdk_server, "all"))
    failed.assert_outcomes(failed=1)
    assert "not saved (the test did not pass); recordings/test_again/test_echo.parquet is unchanged" in (
        failed.stdout.str()
    )
    assert trace.read_bytes() == before
    assert trace_files(trace.parent) == ["test_echo.parquet"]


def test_unplayed_interactions_are_summarised_and_strict_fails(child: pytest.Pytester,
                                                               ors_sdk_server: ServerProcess) -> None:  # fmt: skip
    """Recorded requests a replay never asked for are listed in the summary; --ors-strict-replay fails the test."""
    seed(ors_sdk_server, child.path / "recordings" / "test_left" / "test_echo.parquet", ["one", "two"])
    child.makepyfile(
        test_left=_module("""
def test_echo(ors_replay):
    episode(ors_replay.url, ["one"])
    assert len(ors_replay.unplayed()) == 1
""")
    )
    lenient = run(child)
    lenient.assert_outcomes(passed=1)
    lenient.stdout.fnmatch_lines(
        [
            "*= ors_lab replay: unplayed interactions =*",
            "test_left.py::test_echo: 1 recorded request(s) never asked for",
            '    #* POST /echo/call echo({"text":"two"}) *',
        ]
    )
    strict = run(child, "--ors-strict-replay")
    strict.assert_outcomes(passed=1, errors=1)
    strict.stdout.fnmatch_lines(["*--ors-strict-replay*1 recorded request(s) in recordings/test_left/*.parquet*"])


def test_marker_trace_and_faults(child: pytest.Pytester, ors_sdk_server: ServerProcess) -> None:
    """`trace=` is relative to the test file; tests with `faults=` replay: 503 starting is retried, `malformed`
    raises, twice."""
    child.mkpydir("sub")
    (child.path / "sub" / "test_faults.py").write_text(
        _module("""
TRACE = "data/echo.parquet"


@pytest.mark.ors_replay(trace=TRACE)
def test_a_records(ors_replay):
    assert ors_replay.mode == "record"
    assert episode(ors_replay.url, ["hello"]) == [["hello", 0.5, False]]


@pytest.mark.ors_replay(trace=TRACE, faults=["status:503-starting,tool=echo"])
def test_b_503_is_retried(ors_replay):
    assert ors_replay.mode == "replay"
    assert episode(ors_replay.url, ["hello"]) == [["hello", 0.5, False]]


@pytest.mark.ors_replay(trace=TRACE, faults="malformed")
def test_c_malformed_raises(ors_replay):
    with pytest.raises(ors_lab.MalformedStreamError):
        episode(ors_replay.url, ["hello"])


SHARED = pytest.mark.ors_replay(trace=TRACE, faults=[ors_lab.Fault("malformed")])


@SHARED
def test_d_shared_fault_object(ors_replay):
    with pytest.raises(ors_lab.MalformedStreamError):
        episode(ors_replay.url, ["hello"])


@SHARED
def test_e_shared_fault_object_again(ors_replay):
    with pytest.raises(ors_lab.MalformedStreamError):
        episode(ors_replay.url, ["hello"])
""")
    )
    run(child, *record_args(ors_sdk_server)).assert_outcomes(passed=5)
    assert (child.path / "sub" / "data" / "echo.parquet").is_file()
    assert not (child.path / "recordings").exists()


def test_new_episodes_records_only_what_the_trace_lacks(child: pytest.Pytester, ors_sdk_server: ServerProcess,
                                                       closed_url: str) -> None:  # fmt: skip
    """`new_episodes` replays recorded episodes, records new episodes and stateless reads upstream, appends them."""
    trace = child.path / "recordings" / "test_grow" / "test_echo.parquet"
    seed(ors_sdk_server, trace, ["hello"])
    child.makepyfile(
        test_grow=_module("""
def test_echo(ors_replay):
    assert ors_replay.mode == "replay"
    with ors_lab.Client(ors_replay.url) as client:
        tools = [tool.name for tool in client.environment("echo").tools()]
    save("result.json", [tools, episode(ors_replay.url, ["hello"]), episode(ors_replay.url, ["world"], index=1)])
""")
    )
    grown = run(child, *record_args(ors_sdk_server, "new_episodes"))
    grown.assert_outcomes(passed=1)
    assert "appended 4 request(s) from" in grown.stdout.str()  # /echo/tools; /create, /echo/call, /delete of index 1
    assert echo_inputs(trace) == ['{"text":"hello"}', '{"text":"world"}']
    rows = load_trace(trace).table.to_pylist()
    creates = [row["task_index"] for row in rows if row["kind"] == "request" and row["url"].endswith("/create")]
    assert creates == [0, 1]  # the recorded episode was replayed, not sent again
    assert [row["seq"] for row in rows] == sorted({row["seq"] for row in rows})
    requests = [row["exchange"] for row in rows if row["kind"] == "request"]
    assert len(requests) == len(set(requests))
    assert trace_files(trace.parent) == ["test_echo.parquet"]
    live = json.loads((child.path / "result.json").read_text())
    assert live == [["echo"], [["hello", 0.5, False]], [["world", 0.5, False]]]

    run(child, f"--ors-upstream={closed_url}").assert_outcomes(passed=1)
    assert json.loads((child.path / "result.json").read_text()) == live
    before = trace.read_bytes()
    run(child, "--ors-record-mode=new_episodes", f"--ors-upstream={closed_url}").assert_outcomes(passed=1)
    assert trace.read_bytes() == before


def test_conftest_overrides_mode_config_and_trace_path(child: pytest.Pytester, ors_sdk_server: ServerProcess) -> None:
    """The fixtures are overridable as pytest-recording's: a conftest's `ors_record_mode` wins over the
    option, its `ors_replay_config` gives the marker's defaults, and its `ors_trace_path` names the trace."""
    seed(ors_sdk_server, child.path / "shared" / "echo.parquet", ["hello"])
    child.makeconftest("""
import pytest
from pathlib import Path


@pytest.fixture
def ors_record_mode():
    return "none"


@pytest.fixture
def ors_replay_config():
    return {"speed": 0.0, "upstream": "http://127.0.0.1:9"}


@pytest.fixture
def ors_trace_path(request):
    return Path(request.config.rootpath) / "shared" / "echo.parquet"
""")
    child.makepyfile(
        test_shared=_module("""
def test_echo(ors_replay, ors_record_mode, ors_trace_path):
    save("shared.json", [ors_replay.mode, ors_record_mode, ors_trace_path.name, episode(ors_replay.url, ["hello"])])
""")
    )
    result = run(child, *record_args(ors_sdk_server, "all"))  # the conftest's mode wins: nothing is recorded
    result.assert_outcomes(passed=1)
    assert json.loads((child.path / "shared.json").read_text()) == [
        "replay", "none", "echo.parquet", [["hello", 0.5, False]]
    ]  # fmt: skip
    assert not (child.path / "recordings").exists()


def test_replay_transport_replays_in_process(child: pytest.Pytester, ors_sdk_server: ServerProcess,
                                             closed_url: str) -> None:  # fmt: skip
    """`ors_replay_transport` replays the test's trace with no socket, reports what went unplayed, and
    fails a test whose trace is missing with the way to record it."""
    seed(ors_sdk_server, child.path / "recordings" / "test_inproc" / "test_echo.parquet", ["hello", "ors"])
    child.makepyfile(
        test_inproc=_module("""
import socket


def test_echo(ors_replay_transport, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(socket, "create_connection", refuse)
    with ors_lab.Client("http://ors.replay", transport=ors_replay_transport) as client:
        with client.environment("echo").session(split="dev", index=0) as session:
            save("inproc.json", [session.call("echo", {"text": "hello"}).text])


def test_missing(ors_replay_transport):
    raise AssertionError("never reached")
""")
    )
    result = run(child, f"--ors-upstream={closed_url}", "--ors-strict-replay")
    result.assert_outcomes(passed=1, failed=1, errors=1)  # strict: the passed test fails at teardown
    out = result.stdout.str()
    assert json.loads((child.path / "inproc.json").read_text()) == ["hello"]
    assert "1 recorded request(s) in recordings/test_inproc/test_echo.parquet were never asked for" in out
    assert "ors_replay_transport: no trace at recordings/test_inproc/test_missing.parquet" in out
    assert "never reached" not in out


def _warnings(result: pytest.RunResult) -> list[str]:
    """The warning lines a child run printed (the warnings summary's, and any written straight to stderr)."""
    text = result.stdout.lines + result.stderr.lines
    return [line for line in text if "Warning" in line]


def test_the_plugin_adds_no_warning_to_a_users_project(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a project of its own (no configuration), the plugin warns nothing, even with warnings as errors; with
    pytest-asyncio beside it, the warnings are pytest-asyncio's own ones, the same as without the plugin."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # only the plugins named below
    pytester.makepyfile(test_trivial="def test_trivial():\n    assert 1 + 1 == 2\n")
    alone = pytester.runpytest_subprocess("-W", "error", "-p", "ors_lab.pytest_plugin", timeout=60)
    alone.assert_outcomes(passed=1)
    assert _warnings(alone) == []
    both, asyncio_alone = (
        pytester.runpytest_subprocess("-W", "default", *plugins, timeout=60)
        for plugins in (("-p", "pytest_asyncio.plugin", "-p", "ors_lab.pytest_plugin"), ("-p", "pytest_asyncio.plugin"))
    )
    both.assert_outcomes(passed=1)
    assert _warnings(both) == _warnings(asyncio_alone)
