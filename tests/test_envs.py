"""The test environments on both reference servers, and the cutting proxy in front of them."""

from __future__ import annotations

import base64
import http.client
import json
import re
import uuid
from collections.abc import Callable

import pytest

from ors_lab.demo.launch import ServerProcess
from tests import wire
from tests.cutting_proxy import CuttingProxy
from tests.envs import common

SID = "X-Session-ID"


def _strip_openreward_keys(tools: dict[str, object]) -> dict[str, object]:
    """A /tools answer without the keys only openreward adds."""
    return {k: v for k, v in tools.items() if k not in ("terminal_tool", "supports_score_group", "message_block_types")}


def test_serves_lab_and_echo(reference_server: ServerProcess) -> None:
    """Both servers serve lab (the default) and echo with the splits, tasks and tools of common.py."""
    url = reference_server.url
    assert wire.get_json(url, "/list_environments") == common.ENV_NAMES
    assert wire.get_json(url, "/lab/splits") == common.LAB_SPLITS_WIRE
    assert wire.get_json(url, "/echo/splits") == common.ECHO_SPLITS_WIRE
    for split, tasks in common.LAB_TASKS.items():
        assert wire.post_json(url, "/lab/tasks", {"split": split})["tasks"] == tasks
    assert wire.post_json(url, "/echo/tasks", {"split": "dev"})["tasks"] == common.ECHO_TASKS["dev"]
    assert [t["name"] for t in wire.get_json(url, "/lab/tools")["tools"]] == common.LAB_TOOLS
    assert [t["name"] for t in wire.get_json(url, "/echo/tools")["tools"]] == ["echo"]


def test_both_servers_publish_the_same_tools(ors_sdk_server: ServerProcess, openreward_server: ServerProcess) -> None:
    """Tool names, descriptions and schemas are identical on both servers (openreward adds keys)."""
    for env_name in common.ENV_NAMES:
        ors_tools = wire.get_json(ors_sdk_server.url, f"/{env_name}/tools")
        openreward_tools = wire.get_json(openreward_server.url, f"/{env_name}/tools")
        assert set(openreward_tools) - set(ors_tools) == {
            "terminal_tool",
            "supports_score_group",
            "message_block_types",
        }
        assert _strip_openreward_keys(openreward_tools) == ors_tools


def test_task_tools_add_hint_only_where_the_task_has_one(reference_server: ServerProcess) -> None:
    """list_task_tools appends a `hint` tool on the task with a hint, and the tool answers it."""
    url = reference_server.url
    split, index = common.HINT_INDEX
    with wire.session(url, "lab", split, index) as sid:
        names = [t["name"] for t in wire.get_json(url, "/lab/task_tools", **{SID: sid})["tools"]]
        assert names == [*common.LAB_TOOLS, "hint"]
        hint = wire.call_result(url, "lab", sid, "hint", {})
    assert wire.output_text(hint) == common.LAB_TASKS[split][index]["hint"]
    with wire.session(url, "lab", "train", 0) as sid:
        names = [t["name"] for t in wire.get_json(url, "/lab/task_tools", **{SID: sid})["tools"]]
    assert names == common.LAB_TOOLS


def test_prompts(reference_server: ServerProcess) -> None:
    """The prompt of each env is the text common.py builds from the task."""
    url = reference_server.url
    with wire.session(url, "lab", "test", 1) as sid:
        prompt = wire.get_json(url, "/lab/prompt", **{SID: sid})
    assert prompt == [{"text": common.lab_prompt(common.LAB_TASKS["test"][1]), "detail": None, "type": "text"}]
    with wire.session(url, "echo", "dev", 0) as sid:
        prompt = wire.get_json(url, "/echo/prompt", **{SID: sid})
    assert prompt[0]["text"] == common.echo_prompt(common.ECHO_TASKS["dev"][0])


@pytest.mark.parametrize(("split", "index", "answer"), sorted(common.EXPECTED))
def test_submit_rewards_match_expected(reference_server: ServerProcess, split: str, index: int, answer: str) -> None:
    """`submit` returns the reward EXPECTED lists, finishes the episode and says why."""
    url = reference_server.url
    with wire.session(url, "lab", split, index) as sid:
        result = wire.call_result(url, "lab", sid, "submit", {"answer": answer})
    reward = common.EXPECTED[(split, index, answer)]
    assert (result["output"]["reward"], result["output"]["finished"]) == (reward, True)
    assert wire.output_text(result) == common.submit_text(reward, common.LAB_TASKS[split][index])


def test_step_is_multi_step_with_known_rewards(reference_server: ServerProcess) -> None:
    """`step(v)` gives reward v/10 and finishes at v >= 3."""
    url = reference_server.url
    with wire.session(url, "lab", "train", 0) as sid:
        results = [wire.call_result(url, "lab", sid, "step", {"value": v}) for v in (0, 1, 2, 3)]
    got = [(wire.output_text(r), r["output"]["reward"], r["output"]["finished"]) for r in results]
    assert got == [common.step_result(v) for v in (0, 1, 2, 3)]


@pytest.mark.parametrize(("n_chars", "fill"), [(0, "x"), (5000, "x"), (10_000, "ab c"), (4097, "€")])
def test_big_output_is_exact(reference_server: ServerProcess, n_chars: int, fill: str) -> None:
    """`big_output` returns exactly n_chars characters of fill, in 4096-char chunks on the wire."""
    url = reference_server.url
    with wire.session(url, "lab", "train", 0) as sid:
        events = wire.call(url, "lab", sid, "big_output", {"n_chars": n_chars, "fill": fill})
    assert wire.output_text(wire.result_of(events)) == common.fill_text(n_chars, fill)
    assert all(len(e.data) == 4096 for e in events if e.event == "chunk")


def test_crash_sends_an_error_event(reference_server: ServerProcess) -> None:
    """`crash` ends the stream with `event: error` carrying the exception text; the session lives on."""
    url = reference_server.url
    with wire.session(url, "lab", "train", 0) as sid:
        events = wire.call(url, "lab", sid, "crash", {})
        after = wire.call_result(url, "lab", sid, "step", {"value": 1})
    assert [e.event for e in events] == ["task_id", "error"]
    assert events[1].data == common.CRASH_MESSAGE
    assert after["output"]["reward"] == 0.1


def test_image_and_slow(reference_server: ServerProcess) -> None:
    """`image` returns a caption and a real 1x1 PNG; `slow` sleeps then says slept."""
    url = reference_server.url
    with wire.session(url, "lab", "train", 0) as sid:
        image = wire.call_result(url, "lab", sid, "image", {})
        slow = wire.call_result(url, "lab", sid, "slow", {"seconds": 0.2})
    caption, picture = image["output"]["blocks"]
    assert caption["text"] == common.IMAGE_CAPTION
    assert picture["type"] == "image"
    assert picture["mimeType"] == "image/png"
    png = base64.b64decode(picture["data"])
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert png[16:24] == b"\x00\x00\x00\x01\x00\x00\x00\x01"  # IHDR width 1, height 1
    assert wire.output_text(slow) == "slept"


def test_echo(reference_server: ServerProcess) -> None:
    """`echo` returns its text with reward 0.5 and does not finish."""
    url = reference_server.url
    with wire.session(url, "echo", "dev", 1) as sid:
        result = wire.call_result(url, "echo", sid, "echo", {"text": "hi there"})
    assert wire.output_text(result) == "hi there"
    assert (result["output"]["reward"], result["output"]["finished"]) == (common.ECHO_REWARD, False)


def test_secret_keys(reference_server: ServerProcess) -> None:
    """Secrets reach the env: ors-sdk from the body's `secrets`, openreward from the X-Secrets header."""
    url = reference_server.url
    secrets = {"ZED": "z", "API_TOKEN": "t"}
    if reference_server.sdk == "ors-sdk":
        body, headers = {"secrets": secrets}, {}
    else:
        payload = {name: {"value": value, "allowed_domains": []} for name, value in secrets.items()}
        body, headers = {}, {"X-Secrets": base64.b64encode(json.dumps(payload).encode()).decode()}
    with wire.session(url, "lab", "train", 0, headers, **body) as sid:
        result = wire.call_result(url, "lab", sid, "secret_keys", {})
    assert wire.output_text(result) == "API_TOKEN, ZED"
    with wire.session(url, "lab", "train", 0) as sid:
        result = wire.call_result(url, "lab", sid, "secret_keys", {})
    assert wire.output_text(result) == common.NO_SECRETS


def test_tally_counts_each_run_once(reference_server: ServerProcess) -> None:
    """`tally` increments a per-key counter per run; `tally_count` reads it without counting."""
    url = reference_server.url
    key = uuid.uuid4().hex
    with wire.session(url, "lab", "train", 0) as sid:
        counts = [wire.output_text(wire.call_result(url, "lab", sid, "tally", {"key": key})) for _ in range(2)]
        reads = [wire.output_text(wire.call_result(url, "lab", sid, "tally_count", {"key": key})) for _ in range(2)]
    assert counts == ["1", "2"]
    assert reads == ["2", "2"]


def _first_call_through(proxy: CuttingProxy, sid: str, key: str) -> tuple[int, dict[str, str], bytes, bool]:
    """POST a first `tally` call through the proxy on a raw socket: (status, headers, body, complete)."""
    raw = wire.raw_exchange(
        proxy.url, "POST", "/lab/call", {"name": "tally", "input": {"key": key, "delay": 0.3}}, {SID: sid}
    )
    status, headers, body = wire.split_response(raw)
    data, complete = wire.dechunk(body)
    return status, headers, data, complete


def test_proxy_cuts_after_task_id_and_the_resume_completes(
    reference_server: ServerProcess, cutting_proxy: Callable[..., CuttingProxy]
) -> None:
    """A first /call gets exactly the task_id event then EOF; the resume gets `end`; the tool ran once."""
    url = reference_server.url
    proxy = cutting_proxy(url)
    key = uuid.uuid4().hex
    with wire.session(url, "lab", "train", 0) as sid:
        status, headers, data, complete = _first_call_through(proxy, sid, key)
        assert (status, headers["transfer-encoding"], complete) == (200, "chunked", False)
        match = re.fullmatch(rb"event: task_id\r\ndata: ([0-9a-f]{32})\r\n\r\n", data)
        assert match is not None, data
        task_id = match.group(1).decode()
        assert (proxy.calls, proxy.cuts, proxy.resumes) == (1, 1, 0)
        events = wire.call(proxy.url, "lab", sid, "tally", {"key": key, "delay": 0.3}, task_id=task_id)
        assert [e.event for e in events] == ["task_id", "end"]
        assert events[0].data == task_id
        assert wire.output_text(wire.result_of(events)) == "1"
        assert (proxy.calls, proxy.cuts, proxy.resumes) == (2, 1, 1)
        count = wire.call_result(url, "lab", sid, "tally_count", {"key": key})
    assert wire.output_text(count) == "1"


def test_proxy_cut_before_task_id_sends_headers_only(
    reference_server: ServerProcess, cutting_proxy: Callable[..., CuttingProxy]
) -> None:
    """With cut_before_task_id the client gets the 200 SSE headers and no event at all."""
    url = reference_server.url
    proxy = cutting_proxy(url, cut_before_task_id=True)
    with wire.session(url, "lab", "train", 0) as sid:
        status, headers, data, complete = _first_call_through(proxy, sid, uuid.uuid4().hex)
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert (data, complete) == (b"", False)
    assert proxy.cuts == 1


def test_proxy_cut_all_cuts_resumes_too(
    reference_server: ServerProcess, cutting_proxy: Callable[..., CuttingProxy]
) -> None:
    """With cut_all a resume is cut after its task_id event as well."""
    url = reference_server.url
    proxy = cutting_proxy(url, cut_all=True)
    with wire.session(url, "lab", "train", 0) as sid:
        _, _, first, _ = _first_call_through(proxy, sid, uuid.uuid4().hex)
        task_id = wire.parse_sse(first)[0].data
        body = {"name": "tally", "input": {}, "task_id": task_id}
        raw = wire.raw_exchange(proxy.url, "POST", "/lab/call", body, {SID: sid})
    data, complete = wire.dechunk(wire.split_response(raw)[2])
    assert data == f"event: task_id\r\ndata: {task_id}\r\n\r\n".encode()
    assert not complete
    assert (proxy.calls, proxy.cuts, proxy.resumes) == (2, 2, 1)


def test_proxy_passes_other_traffic_on_a_kept_alive_connection(
    reference_server: ServerProcess, cutting_proxy: Callable[..., CuttingProxy]
) -> None:
    """Several requests on one kept-alive connection pass through the proxy unchanged."""
    proxy = cutting_proxy(reference_server.url)
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
    try:
        answers = []
        for method, path, body in [
            ("GET", "/health", None),
            ("POST", "/lab/tasks", json.dumps({"split": "test"})),
            ("GET", "/list_environments", None),
        ]:
            conn.request(method, path, body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            answers.append((response.status, json.loads(response.read())))
    finally:
        conn.close()
    assert answers == [
        (200, {"status": "ok"}),
        (200, wire.post_json(reference_server.url, "/lab/tasks", {"split": "test"})),
        (200, common.ENV_NAMES),
    ]
    assert (proxy.connections, proxy.calls, proxy.cuts) == (1, 0, 0)
