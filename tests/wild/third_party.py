"""An OpenAI-compatible server written by others, run live: stubllm, pinned in pyproject.toml's `test` extra.

    with ThirdPartyLLM(lab_script(key), tmp_path) as llm:     # or `serve_stubllm(...)` in a fixture
        agent = ol.OpenAIAgent(MODEL, base_url=llm.url + "/v1", api_key=API_KEY)

stubllm (PyPI, MIT) is a FastAPI app that answers ``POST /v1/chat/completions`` from fixture files
matched against the conversation. It is started here as its own process (``stubllm serve``) on a
free port of 127.0.0.1 (also its default host), with a JSON fixture file of our own, and stopped
afterwards, always, within ``STOP_TIMEOUT`` seconds. It makes no outbound call in ``serve`` mode
(only its ``record`` command proxies to a real API, and that is never used here) and sends no
telemetry. Its pytest plugin is kept out of the suite (``-p no:stubllm`` in pyproject.toml).

How it streams, as its source (version 0.1.5) writes it, and as ors_lab must read it:

- text: the content in pieces of at most 4 characters, ``finish_reason: "stop"`` on the last
  piece, then ``data: [DONE]``; no usage chunk (it ignores ``stream_options``);
- tool calls: one chunk per call, each whole (``id``, ``type``, ``function.name`` and all of
  ``function.arguments``), every one of them at ``index: 0`` (parallel calls are told apart by
  their ``id`` alone), then ``data: [DONE]`` with no ``finish_reason`` at all.

``lab_script`` is the model this suite scripts for the `lab` environment of tests/envs/common.py
(train split): its docstring says each task's answers, turn by turn.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib.metadata
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import psutil

from tests.envs.common import LAB_TASKS

__all__ = [
    "AFTER_TOOL_TEXT",
    "API_KEY",
    "MODEL",
    "PINNED",
    "TEXT_ANSWER",
    "ThirdPartyLLM",
    "lab_script",
    "serve_stubllm",
]

PINNED = "0.1.5"  # the version whose wheel was read: loopback by default, no outbound call in `serve`, no telemetry
HOST = "127.0.0.1"
MODEL = "wild-model"  # stubllm answers any model name
API_KEY = "sk-wild-not-checked"  # stubllm checks no key; the agent needs one to send
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0

TRAIN = LAB_TASKS["train"]
TEXT_ANSWER = "Backwards, cat is tac."
AFTER_TOOL_TEXT = "Done."


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """One tool call of a fixture's response."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": {"contains": text}}


def lab_script(tally_key: str) -> list[dict[str, Any]]:
    """stubllm fixtures for the lab's train split: the scripted model's answers, turn by turn.

    - t0 "What is 2 + 2?": turn 1 ``step {"value": 1}``; turn 2 (the tool said "step 1") ``submit "5"``
      (wrong): two turns, rewards 0.1 then 0.0;
    - t1 "What is the capital of France?": one turn of two calls, ``tally {"key": tally_key}`` and
      ``submit "Paris"`` (right: 1.0);
    - t2 "Spell 'cat' backwards.": text only (``TEXT_ANSWER``), no tool call;
    - after any other tool result: ``AFTER_TOOL_TEXT``, so that a conversation always ends.

    stubllm picks the most specific fixture that matches (each criterion matches any message of the
    conversation): a user ``contains`` scores 5, a tool ``contains`` 5, a ``regex`` 4, ``tools_present`` 2.
    """
    question = [task["question"] for task in TRAIN]
    base: dict[str, Any] = {
        "stream_chunk_delay_ms": 0,
        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
    }

    def fixture(name: str, messages: list[dict[str, Any]], **response: Any) -> dict[str, Any]:
        match = {"provider": "openai", "endpoint": "/v1/chat/completions", "messages": messages, "tools_present": True}
        return {"name": name, "match": match, "response": {**base, **response}}

    return [
        fixture("t0-step", [_user(question[0])], tool_calls=[_call("call_wild_t0_step", "step", {"value": 1})]),
        fixture(
            "t0-submit",
            [_user(question[0]), {"role": "tool", "content": {"contains": "step 1"}}],
            tool_calls=[_call("call_wild_t0_submit", "submit", {"answer": "5"})],
        ),
        fixture(
            "t1-parallel",
            [_user(question[1])],
            tool_calls=[
                _call("call_wild_t1_tally", "tally", {"key": tally_key}),
                _call("call_wild_t1_submit", "submit", {"answer": "Paris"}),
            ],
        ),
        fixture("t2-text", [_user(question[2])], content=TEXT_ANSWER),
        fixture(
            "after-tool",
            [_user("Answer with the submit tool."), {"role": "tool", "content": {"regex": "."}}],
            content=AFTER_TOOL_TEXT,
        ),
    ]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _healthy(port: int) -> bool:
    """True once ``GET /health`` answers 200 (http.client: no proxy settings of the environment apply)."""
    connection = http.client.HTTPConnection(HOST, port, timeout=1)
    try:
        connection.request("GET", "/health")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


class ThirdPartyLLM:
    """stubllm serving ``fixtures`` (written to ``workdir``) on 127.0.0.1: ``url``, ``port``, ``pid``."""

    def __init__(self, fixtures: list[dict[str, Any]], workdir: Path) -> None:
        self.fixtures = fixtures
        self.workdir = workdir
        self.port = 0
        self.url = ""
        self.log = workdir / "stubllm.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self._proc is not None, "not started"
        return self._proc.pid

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start stubllm and wait until it answers; a wrong version installed is an error, not a skip."""
        installed = importlib.metadata.version("stubllm")
        if installed != PINNED:
            raise RuntimeError(
                f"stubllm {installed} is installed; the wild suite checked {PINNED}: "
                f"pip install 'stubllm=={PINNED}' (pyproject.toml's test extra pins it)"
            )
        path = self.workdir / "stubllm-fixtures.json"
        path.write_text(json.dumps({"fixtures": self.fixtures}, indent=1))
        self.port = _free_port()
        self.url = f"http://{HOST}:{self.port}"
        command = [
            sys.executable,
            "-c",
            "from stubllm.cli import cli; cli()",
            "serve",
            "--host",
            HOST,
            "--port",
            str(self.port),
            "--fixture-file",
            str(path),
            "--log-level",
            "warning",
        ]
        with self.log.open("wb") as log:
            self._proc = subprocess.Popen(
                command, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + START_TIMEOUT
        while not _healthy(self.port):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"stubllm did not start on {self.url}:\n{self.log.read_text()[-2000:]}")
            time.sleep(0.05)
        listening = {c.laddr.ip for c in psutil.Process(self._proc.pid).net_connections("inet") if c.status == "LISTEN"}
        if listening != {HOST}:
            raise RuntimeError(f"stubllm listens on {sorted(listening)}, not on {HOST} alone")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not ended within half of ``STOP_TIMEOUT``; reaped either way."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=STOP_TIMEOUT / 2)
        except subprocess.TimeoutExpired:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=STOP_TIMEOUT / 2)

    def __repr__(self) -> str:
        return f"ThirdPartyLLM(stubllm {PINNED} at {self.url or 'not started'})"


def serve_stubllm(fixtures: list[dict[str, Any]], workdir: Path) -> Iterator[ThirdPartyLLM]:
    """A started ``ThirdPartyLLM`` for a fixture (``yield from serve_stubllm(...)``); stopped afterwards."""
    with ThirdPartyLLM(fixtures, workdir) as server:
        yield server
