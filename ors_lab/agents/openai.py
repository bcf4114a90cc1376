"""An agent on any OpenAI-compatible chat-completions server, streaming (needs ``pip install 'ors-lab[openai]'``).

    agent = OpenAIAgent("my-model", base_url="http://127.0.0.1:8000/v1")   # key from $OPENAI_API_KEY
    ol.evaluate(env, agent, split="test", record="runs/llm.parquet")

Each turn (one ``block``) streams one chat completion with the session's tools as function tools.
The SDK sends the request (and retries what it retries); the answer's bytes are read by the one
chat-completions decoder (``ors_lab.agents.chat``), so every shape that servers really send is read
the same live, recorded and replayed: reasoning (``reasoning_content``, ``reasoning``, ``thinking``
parts) becomes ``reasoning-*`` events, text ``text-*`` events, a refusal a text part of its own
(id ``refusal-N``) with finish reason ``refusal``, tool-call argument deltas ``tool-input-*``
events; the completion's token usage (asked for with ``stream_options.include_usage``) a ``usage``
event. The turn's ``block-end`` summary says its finish reason and any other choices (``n > 1``)
that came and were ignored. Each tool call then runs through ``episode.call`` and its result goes
back as a ``tool`` message; a call whose arguments are not one JSON object is never run (the model
is told why). The episode ends when it finishes, the step limit is reached, or the model answers
without calling a tool.

A failure of the provider ends the episode and is published as the seed's structured ``error``
from source ``provider`` (``rate_limit_error``, ``authentication_error``, ``provider_overloaded``,
``provider_error``): an HTTP error status, an error object in the stream
(``ProviderReportedError``), a malformed chunk (``MalformedChunkError``), an answer that ended with
no finish reason and no ``[DONE]`` (``IncompleteStreamError``: none of its tools run), a connection
cut mid-answer (``ProviderStreamError``, saying the bytes and chunks received, the last chunk and
any tool call left open).

The SDK is given an ``http_client`` on ``RecordingTransport``, so the LLM traffic is recorded into
the evaluation's trace (the API key is redacted before writing); pass
``transport=AgentReplayTransport(trace)`` to run the same evaluation offline from that trace: then
no API key is needed (none is read, sent or recorded) and no ``base_url`` either (the recorded
requests are matched by method, path and body).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import httpx2

from ors_lab.agents.episode import Episode
from ors_lab.agents.errors import REPORTED, error_event, replay_mismatch
from ors_lab.agents.http import needs_credentials, recording_http_client
from ors_lab.agents.turn import Turn, run_tool
from ors_lab.analysis.conversations import openai as chat
from ors_lab.protocol.errors import ProviderError, ProviderStreamError

__all__ = ["OpenAIAgent"]


class OpenAIAgent:
    """Chat completions with tool calling, streamed; see the module docstring."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        system: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        extra_body: Mapping[str, Any] | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
        max_retries: int = 2,
        timeout: float = 600.0,
        usage: bool = True,
    ) -> None:
        try:
            import openai  # noqa: F401  # the optional extra: is it installed? (imported where it is used)
        except ImportError as exc:
            raise ImportError("OpenAIAgent needs the openai SDK: pip install 'ors-lab[openai]'") from exc
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self._api_key = api_key
        self.system = system
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_body = dict(extra_body or {})
        self.transport = transport
        self.max_retries = max_retries
        self.timeout = timeout
        self.usage = usage

    def __repr__(self) -> str:
        where = f", base_url={self.base_url!r}" if self.base_url else ""
        return f"OpenAIAgent({self.model!r}{where})"

    def _key(self) -> str:
        key = self._api_key if self._api_key is not None else os.environ.get(self.api_key_env)
        if not key:
            raise ValueError(
                f"no API key: set ${self.api_key_env} or pass api_key= (any text if the server needs none)"
            )
        return key

    async def run(self, episode: Episode) -> None:
        import openai  # the optional extra: imported where it is used

        # before the HTTP client exists: a missing key leaves nothing open. A replay needs none: the
        # SDK is handed a stand-in, and the client sends no Authorization header (recording_http_client)
        key = self._key() if needs_credentials(self.transport) else "not-sent"
        http_client = recording_http_client(self.transport, timeout=self.timeout)
        client = openai.AsyncOpenAI(
            base_url=self.base_url, api_key=key, http_client=http_client, max_retries=self.max_retries
        )
        messages: list[dict[str, Any]] = []
        if self.system:
            messages.append({"role": "system", "content": self.system})
        messages.append({"role": "user", "content": episode.prompt_text})
        tools = chat.tools(episode.tools)
        options: dict[str, Any] = {}
        if self.temperature is not None:
            options["temperature"] = self.temperature
        if self.max_tokens is not None:
            options["max_tokens"] = self.max_tokens
        if self.extra_body:
            options["extra_body"] = self.extra_body
        if self.usage:
            options["stream_options"] = {"include_usage": True}
        try:
            turns = 0
            while not episode.done:
                turns += 1
                with episode.block(f"turn {turns}") as block:
                    turn = Turn(episode)
                    failure: Exception | None = None
                    try:
                        await _stream(client.chat.completions.with_streaming_response.create, turn,
                                      openai.APIConnectionError, model=self.model, messages=messages, tools=tools,
                                      **options)  # fmt: skip
                    except (openai.APIError, ProviderError) as exc:
                        failure = exc
                    finally:
                        turn.end(self.model)
                        episode.summarize(block, turn.summary())
                    if failure is not None:
                        raise _reported(episode, failure)
                    messages.append(turn.message())
                    calls = turn.answer.calls
                    if not calls:
                        episode.finish_reason = turn.answer.finish_reason
                        return
                    for call in calls:
                        if episode.done:
                            return
                        messages.append(chat.tool_message(await run_tool(episode, call)))
        finally:
            await client.close()


def _reported(episode: Episode, exc: Exception) -> Exception:
    """The provider's failure (a replay's mismatch as a ``ReplayMismatchError``), published as the
    seed's structured error and noted so: the exception to raise."""
    exc = replay_mismatch(exc) or exc
    episode.publish(error_event(exc, source="provider"))
    exc.add_note(REPORTED)
    return exc


async def _stream(
    create: Any, turn: Turn, connection_error: type[Exception], seen: dict[str, Any] | None = None, **request: Any
) -> None:
    """Send one request with an SDK's streaming ``create`` (chat completions, responses, messages) and read
    its answer into ``turn``, byte for byte; ``seen`` gets the answer's status and ``request-id``.

    The SDK raises the HTTP errors (after its retries). A connection that fails before any answer (the
    SDK's ``connection_error``), or is cut while the answer streams, is a ``ProviderStreamError`` saying
    why and how far it got."""
    try:
        async with create(stream=True, **request) as response:
            if seen is not None:
                seen.update(status=response.status_code, request_id=response.headers.get("request-id"))
            turn.begin(response.headers.get("content-type"))
            try:
                async for data in response.iter_bytes():
                    turn.feed(data)
            except httpx2.TransportError as exc:
                raise ProviderStreamError(
                    f"the connection was cut while the answer streamed ({type(exc).__name__}), after "
                    f"{turn.answer.where()}"
                ) from exc
            turn.close()
    except connection_error as exc:  # no answer at all: say why, not only "Connection error."
        cause = exc.__cause__
        why = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
        raise ProviderStreamError(f"the connection to the provider failed before any answer came ({why})") from exc
