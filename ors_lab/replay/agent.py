"""The agent's recorded HTTP traffic (its LLM) served back, so an evaluation re-runs offline.

    trace = ol.load_trace("runs/llm.parquet")
    agent = OpenAIAgent("my-model", transport=AgentReplayTransport(trace))   # no key, no base_url
    with ol.ReplayServer(trace, speed=0) as server, ol.Client(server.url) as client:
        ol.evaluate(client.environment("lab"), agent, split="test")           # the episodes the trace holds

Requests are matched within their episode: the episode running the request (the harness's
``CURRENT_EPISODE``) names its environment, split, task and rollout; the recorded episode with the
same four is found through the trace's ``episode`` rows (any recorded episode of that task and
rollout, in the order they were recorded), and its exchanges are served in order,
each only if method, path and JSON body equal the recorded ones. Anything else gets a 400 with
``x-ors-lab-replay: mismatch`` and the first difference (``OpenAIAgent`` raises it as a
``ReplayMismatchError``). Streams come back as recorded, chunk by chunk, without waiting. What
failed when recorded fails again the same way: a request that got no answer raises the recorded
transport error, and a stream that was cut is cut again after its last recorded chunk.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx2

from ors_lab.agents.episode import CURRENT_EPISODE
from ors_lab.analysis.trace import Trace, load_trace
from ors_lab.replay.engine import DROP_HEADERS, Answer, body_value, difference, mismatch_answer, short
from ors_lab.replay.recorded import EpisodeKey, Exchange, Recording, give_back, matches

__all__ = ["AgentReplayTransport"]


@dataclass
class _Live:
    recorded: str
    exchanges: list[Exchange]


class AgentReplayTransport(httpx2.AsyncBaseTransport, httpx2.BaseTransport):
    """An httpx2 transport (async, and sync for ``Episode.llm_client_sync()``) answering an agent's HTTP
    requests from a trace; see the module docstring."""

    needs_credentials = False
    """It answers from the trace: an agent on it needs no API key, and sends none (``ors_lab.agents.http``)."""

    def __init__(self, trace: Trace | str | os.PathLike[str]) -> None:
        # the index keeps what it needs: a trace loaded here is let go once it is built
        self.recording = Recording(trace if isinstance(trace, Trace) else load_trace(trace), agent=True)
        give_back()
        self.name = self.recording.name
        self._unclaimed: dict[EpisodeKey, deque[str]] = {}  # recorded episodes not yet replayed, in order
        for key, sid in self.recording.episodes():
            self._unclaimed.setdefault(key, deque()).append(sid)
        self._live: dict[str, _Live] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"AgentReplayTransport({self.name!r})"

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return self._response(request, await request.aread())

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        return self._response(request, request.read())

    def _response(self, request: httpx2.Request, body: bytes) -> httpx2.Response:
        answer, broken = self._answer(request, body)
        if answer is None:  # the recorded request got no answer: it fails again as it failed then
            raise _transport_error(broken, request)
        error = None if broken is None else _transport_error(broken, request)
        return httpx2.Response(answer.status, headers=answer.headers, stream=_Replayed(answer, error),
                               request=request)  # fmt: skip

    def _answer(self, request: httpx2.Request, body: bytes) -> tuple[Answer | None, str | None]:
        """The answer (None when the recorded request got none) and the recorded transport error, if any."""
        method, path = request.method, request.url.path
        what = f"{method} {path} {short(body)}"
        episode = CURRENT_EPISODE.get()
        if episode is None:
            return self._mismatch(what, "the request was made outside an evaluation episode", [])
        key: EpisodeKey = (episode.environment, episode.split, episode.index, episode.rollout)
        with self._lock:
            live = self._live.get(episode.session.sid)
            if live is None:
                waiting = self._unclaimed.get(key)
                recorded = waiting.popleft() if waiting else None
                if recorded is None:
                    where = f"episode {key[0]}/{key[1]} task {key[2]} rollout {key[3]}"
                    return self._mismatch(what, f"the trace holds no finished {where} to replay", [])
                code = self.recording.code(recorded)
                exchanges = self.recording.session(code) if code is not None else []
                live = self._live[episode.session.sid] = _Live(recorded, exchanges)
            pending = [e for e in live.exchanges if not e.played]
            if not pending:
                return self._mismatch(what, "the recorded episode made no more requests", [])
            expected = pending[0]
            if expected.method != method or expected.path != path:
                return self._mismatch(what, f"the next recorded request is {expected.method} {expected.path}", pending)
            wanted, recorded_body = body_value(body), body_value(expected.body)
            if not matches(recorded_body, wanted):  # a redacted value stands for any
                return self._mismatch(what, difference(wanted, recorded_body, "body"), pending)
            expected.played += 1
        return _play(expected), self.recording.broken.get(expected.seq)

    def _mismatch(self, what: str, differs: str, nearest: list[Exchange]) -> tuple[Answer, None]:
        described = [e.describe() for e in nearest[:3]]
        lines = [
            f"no recorded agent request matches {what} in the trace {self.name}",
            f"what differs: {differs}",
            "nearest unplayed recorded requests: " + ("; ".join(described) or "(none)"),
            "to record again: run the evaluation against the live model with record=TRACE",
        ]
        return mismatch_answer(lines, asked=what, differs=differs, nearest=described, trace=self.name), None

    def unplayed(self) -> list[str]:
        """The recorded agent requests of the replayed episodes that were never asked for."""
        return [e.describe() for live in self._live.values() for e in live.exchanges if not e.played]


class _Replayed(httpx2.AsyncByteStream, httpx2.SyncByteStream):
    """A recorded body, chunk by chunk, without waiting; then ``error`` (the stream was cut when recorded)."""

    def __init__(self, answer: Answer, error: httpx2.TransportError | None) -> None:
        self._answer = answer
        self._error = error

    def __iter__(self) -> Iterator[bytes]:
        for _, data in self._answer.stream or [(0.0, self._answer.body)]:
            yield data
        if self._error is not None:
            raise self._error

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for data in self:
            yield data


def _transport_error(recorded: str | None, request: httpx2.Request) -> httpx2.TransportError:
    """The transport error a recorded ``disconnect`` row names (``"ReadTimeout: ..."``), to raise again."""
    text = recorded or "RemoteProtocolError: the connection broke"
    name, _, message = text.partition(": ")
    kind = getattr(httpx2, name, None)
    if not (isinstance(kind, type) and issubclass(kind, httpx2.TransportError)):
        kind, message = httpx2.RemoteProtocolError, text
    error: httpx2.TransportError = kind(f"{message} (replayed as recorded)", request=request)
    return error


def _play(exchange: Exchange) -> Answer | None:
    """The recorded answer (None when the request got none)."""
    if exchange.status is None:
        return None
    headers = [(k, v) for k, v in exchange.headers if k not in DROP_HEADERS and k != "content-encoding"]
    if not exchange.sse:
        return Answer(exchange.status, headers, exchange.response_body or b"")
    stream = [(0.0, b"".join(item.wire() for item in items)) for _, items in exchange.chunks]
    return Answer(exchange.status, headers, stream=stream)
