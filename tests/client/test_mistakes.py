"""A caller's first mistakes, each answered by a typed error whose message is one line saying what there is.

Against both reference servers, which answer an unknown environment with a bare 308 to their default
environment (a 404 on ``/create``), a bad split or index with a bare 400, and an unknown tool with a
result whose ``error`` names no alternative: the client asks the server what it has and says so.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import httpx2
import pytest

import ors_lab as ol
from tests.envs import common


@pytest.fixture
def client(reference_server: Any) -> Any:
    """A sync client on each reference server."""
    with ol.Client(reference_server.url) as client:
        yield client


def unknown_environment(url: str) -> str:
    return f"unknown environment 'nope' at {url}; its environments: {', '.join(common.ENV_NAMES)}"


def test_an_unknown_environment_names_the_ones_the_server_has(client: ol.Client) -> None:
    """Every request of an environment the server lacks, a session on it and an evaluation of it raise
    UnknownEnvironmentError naming the server's environments."""
    env = client.environment("nope")
    attempts = [env.tools, env.splits, lambda: env.num_tasks("test"), lambda: env.task("test", 0),
                lambda: env.session(split="test", index=0, view=False).open(),
                lambda: ol.evaluate(env, lambda obs: None, progress=False)]  # fmt: skip
    for attempt in attempts:
        with pytest.raises(ol.UnknownEnvironmentError) as caught:
            attempt()
        assert str(caught.value) == unknown_environment(client.base_url)
        assert (caught.value.environment, caught.value.available) == ("nope", common.ENV_NAMES)


async def test_an_unknown_environment_from_asyncio(reference_server: Any) -> None:
    """The async client says the same."""
    async with ol.AsyncClient(reference_server.url) as client:
        with pytest.raises(ol.UnknownEnvironmentError, match=r"^unknown environment 'nope' at .*; its environments"):
            await client.environment("nope").tools()


def test_a_wrong_split_names_the_environments_splits(client: ol.Client) -> None:
    """A split the environment lacks, asked for by a request or a session, raises UnknownSplitError."""
    lab = client.environment("lab")
    for attempt in (lambda: lab.num_tasks("nope"), lambda: lab.tasks("nope"),
                    lambda: lab.session(split="nope", index=0, view=False).open()):  # fmt: skip
        with pytest.raises(ol.UnknownSplitError) as caught:
            attempt()
        assert str(caught.value) == "unknown split 'nope' of environment 'lab'; its splits: train, test"
        assert caught.value.available == ["train", "test"] and caught.value.status_code == 400


def test_a_task_index_out_of_range_says_the_splits_task_count(client: ol.Client) -> None:
    """An index past the split's end, by a request or a session, raises TaskIndexError (an IndexError)."""
    lab = client.environment("lab")
    count = len(common.LAB_TASKS["test"])
    for attempt in (lambda: lab.task("test", 99), lambda: lab.session(split="test", index=99, view=False).open()):
        with pytest.raises(IndexError) as caught:
            attempt()
        assert isinstance(caught.value, ol.TaskIndexError)
        assert str(caught.value) == (f"no task 99 in split 'test' of 'lab': it has {count} tasks "
                                     f"(0 to {count - 1}, or -{count} to -1 from the end)")  # fmt: skip
        assert (caught.value.index, caught.value.num_tasks) == (99, count)


def test_a_tool_not_in_the_environment_is_a_result_naming_the_tools(client: ol.Client, reference_server: Any) -> None:
    """Calling a tool the session lacks is still a result (ok=False, the server's reason kept), and its error
    names the tool and lists the session's tools, asked for if the session had not yet."""
    with client.environment("lab").session(split="test", index=0, view=False) as session:
        unknown = session.call("nope", {"x": 1})
        tools = [tool.name for tool in session.tools()]
        again = session.call("also_nope")
    assert not unknown.ok
    assert unknown.error == f"'nope' is not a valid tool; the tools of this session are: {', '.join(tools)}"
    assert again.error is not None and again.error.startswith("'also_nope' is not a valid tool; the tools of")
    assert unknown.reason == ("not_found" if reference_server.sdk == "openreward" else None)


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_server_that_is_down_cannot_be_reached(closed_port: int) -> None:
    """Nothing listening: ConnectionFailedError, one line saying the server cannot be reached and why; the
    HTTP library's error is its cause, without its own pages of frames."""
    url = f"http://127.0.0.1:{closed_port}"
    with ol.Client(url, retry=ol.RetryPolicy(attempts=2, backoff=0.01)) as client:
        with pytest.raises(ol.ConnectionFailedError) as caught:
            client.environments()
    assert str(caught.value) == (
        f"cannot reach the ORS server at {url}: connection refused (2 tries; the request was never sent) "
        f"(request=GET {url}/list_environments)"
    )
    assert caught.value.before_sending
    cause = caught.value.__cause__
    assert isinstance(cause, httpx2.ConnectError) and cause.__traceback__ is None and cause.__cause__ is None


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("127.0.0.1:8080", "'127.0.0.1:8080' is not a server URL: it has no http:// or https://; did you mean "
                           "'http://127.0.0.1:8080'?"),
        ("localhost", "'localhost' is not a server URL: it has no http:// or https://; did you mean 'http://localhost'?"),
        ("ftp://127.0.0.1", "'ftp://127.0.0.1' is not a server URL: ORS servers speak http:// or https://"),
        ("http://", "'http://' is not a server URL: it names no host (such as http://127.0.0.1:8080)"),
        ("http://127.0.0.1:port", "'http://127.0.0.1:port' is not a server URL: Invalid port: 'port'"),
    ],
)  # fmt: skip
def test_a_url_that_is_no_server_url_fails_at_construction(url: str, message: str) -> None:
    """Client and AsyncClient refuse such a URL at once (InvalidURLError, a ValueError), before any thread starts."""
    threads = threading.active_count()
    for make in (ol.Client, ol.AsyncClient):
        with pytest.raises(ValueError, match="is not a server URL") as caught:
            make(url)
        assert isinstance(caught.value, ol.InvalidURLError) and str(caught.value) == message
    assert threading.active_count() == threads


def test_a_missing_trace_is_one_line(tmp_path: Any) -> None:
    """load_trace of a path with no trace: TraceNotFoundError (a FileNotFoundError), `no trace at PATH`."""
    path = tmp_path / "run.parquet"
    with pytest.raises(FileNotFoundError) as caught:
        ol.load_trace(path)
    assert isinstance(caught.value, ol.TraceNotFoundError) and str(caught.value) == f"no trace at {path}"
