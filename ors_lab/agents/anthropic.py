"""An agent on Anthropic's Messages API, streaming (needs ``pip install 'ors-lab[anthropic]'``).

    agent = AnthropicAgent("claude-sonnet-4-5", thinking={"type": "enabled", "budget_tokens": 2048})
    ol.evaluate(env, agent, split="test", record="runs/claude.parquet")   # key from $ANTHROPIC_API_KEY

Each turn (one ``block``) streams one ``POST /v1/messages`` (``stream: true``) with the session's
tools as Anthropic tools (``name``, ``description``, ``input_schema``). The official SDK sends the
request (and retries what it retries: ``max_retries=``, default 2); the answer's bytes are read by
the one Messages decoder (``ors_lab.agents.messages``), so the same bytes give the same events live,
recorded and replayed: ``thinking`` blocks become ``reasoning-*`` events (their signatures are kept
apart, never shown as reasoning), ``text`` blocks ``text-*`` events, ``tool_use`` input deltas
``tool-input-*`` events, the usage (the whole prompt as input tokens, cache reads as cached tokens)
a ``usage`` event. The turn's ``block-end`` summary says its finish reason.

When the model stops for ``tool_use``, each call runs through ``episode.call`` (a call whose input
is not one JSON object is never run: the model is told why), and the results go back in one user
message as ``tool_result`` blocks, the tool's text and images as text and image blocks
(``is_error`` for a failed call); the assistant's blocks go back before them as they came, thinking
blocks with their signatures. Image blocks of the prompt go to the model as image blocks too. Any
other stop ends the episode with its finish reason: ``stop`` (``end_turn``), ``length``
(``max_tokens``: a tool call it cut off is never run), ``refusal``, ``pause-turn``,
``stop-sequence``.

A failure of the provider ends the episode and is published as the seed's structured ``error``
from source ``provider``: an HTTP error (429, 529, 5xx, ...) with ``code`` ``ANTHROPIC_<status>``,
``retryable`` for 408, 409, 429 and 5xx, ``retryAfter`` from ``retry-after``, and ``provider:
{name: "anthropic", statusCode, requestId}`` from the ``request-id`` header; an ``event: error``
in the stream (on an HTTP 200) typed by its ``error.type`` (``overloaded_error`` is
``provider_overloaded`` and ``ANTHROPIC_529``, as the same error sent as a status would be); a
stream cut before its stop reason (none of its tools run) or not readable.

The SDK is given an ``http_client`` on ``RecordingTransport``, so the traffic is recorded into the
evaluation's trace (the key, in whichever header the SDK sends it, is redacted before writing); with
``transport=AgentReplayTransport(trace)`` the same evaluation runs offline from that trace, with
no key and no server.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import httpx2

from ors_lab.agents.episode import Episode
from ors_lab.agents.errors import REPORTED, error_event, provider_error, replay_mismatch
from ors_lab.agents.http import needs_credentials, recording_http_client
from ors_lab.agents.messages import MessagesAnswer
from ors_lab.agents.openai import _stream
from ors_lab.agents.turn import Turn, run_tool
from ors_lab.analysis.conversations import anthropic as messages_api
from ors_lab.analysis.conversations import content_of
from ors_lab.protocol.errors import ProviderError

__all__ = ["AnthropicAgent"]

API_KEY_ENV = "ANTHROPIC_API_KEY"


class AnthropicAgent:
    """Messages with tool use, streamed; see the module docstring.

    ``thinking`` is the request's ``thinking`` (``{"type": "enabled", "budget_tokens": N}``);
    ``params`` go into each request's JSON as they are (``temperature``, ``stop_sequences``, ...), except
    ``max_retries`` (the SDK's retries, default 2) and ``timeout`` (seconds, default 600), which are
    the client's.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_tokens: int = 4096,
        thinking: Mapping[str, Any] | None = None,
        system: str | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
        **params: Any,
    ) -> None:
        try:
            import anthropic  # noqa: F401  # the optional extra: is it installed? (imported where it is used)
        except ImportError as exc:
            raise ImportError("AnthropicAgent needs the anthropic SDK: pip install 'ors-lab[anthropic]'") from exc
        self.model = model
        self.base_url = base_url
        self._api_key = api_key
        self.max_tokens = max_tokens
        self.thinking = dict(thinking) if thinking is not None else None
        self.system = system
        self.transport = transport
        self.max_retries: int = params.pop("max_retries", 2)
        self.timeout: float = params.pop("timeout", 600.0)
        self.params = params

    def __repr__(self) -> str:
        where = f", base_url={self.base_url!r}" if self.base_url else ""
        return f"AnthropicAgent({self.model!r}{where})"

    def _key(self) -> str:
        key = self._api_key if self._api_key is not None else os.environ.get(API_KEY_ENV)
        if not key:
            raise ValueError(f"no API key: set ${API_KEY_ENV} or pass api_key= (any text if the server needs none)")
        return key

    def _request(self, episode: Episode) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens}
        if self.params:  # as JSON fields, whatever the SDK's signature names (it lacks some the API takes)
            request["extra_body"] = self.params
        if self.system:
            request["system"] = self.system
        if self.thinking is not None:
            request["thinking"] = self.thinking
        tools = messages_api.tools(episode.tools)
        if tools:
            request["tools"] = tools
        return request

    async def run(self, episode: Episode) -> None:
        import anthropic  # the optional extra: imported where it is used

        # a replay needs no key: the SDK is handed a stand-in (recording_http_client sends no credentials there)
        key = self._key() if needs_credentials(self.transport) else "not-sent"
        http_client = recording_http_client(self.transport, timeout=self.timeout)
        client = anthropic.AsyncAnthropic(
            base_url=self.base_url, api_key=key, http_client=http_client, max_retries=self.max_retries
        )
        request = self._request(episode)
        prompt = messages_api.content(content_of(episode.prompt)) or [{"type": "text", "text": episode.prompt_text}]
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        try:
            turns = 0
            while not episode.done:
                turns += 1
                with episode.block(f"turn {turns}") as block:
                    turn = Turn(episode, MessagesAnswer)
                    seen: dict[str, Any] = {}
                    failure: Exception | None = None
                    try:
                        await _stream(client.messages.with_streaming_response.create, turn,
                                      anthropic.APIConnectionError, seen, messages=messages, **request)  # fmt: skip
                    except (anthropic.APIError, ProviderError) as exc:
                        failure = exc
                    finally:
                        turn.end(self.model)
                        episode.summarize(block, turn.summary())
                    if failure is not None:
                        raise _reported(episode, failure, **seen)
                    answer = turn.answer
                    assert isinstance(answer, MessagesAnswer)
                    content = answer.content()
                    if content:
                        messages.append({"role": "assistant", "content": content})
                    if answer.raw_finish != "tool_use" or not answer.calls:
                        episode.finish_reason = answer.finish_reason
                        return
                    results: list[dict[str, Any]] = []
                    for call in answer.calls:
                        if episode.done:
                            return
                        results.append(messages_api.tool_result(await run_tool(episode, call)))
                    messages.append({"role": "user", "content": results})
        finally:
            await client.close()


def _reported(
    episode: Episode, exc: Exception, *, status: int | None = None, request_id: str | None = None
) -> Exception:
    """The provider's failure (a replay's mismatch as a ``ReplayMismatchError``) published as the seed's
    structured error, with Anthropic's code and details, and noted so: the exception to raise."""
    mismatch = replay_mismatch(exc)
    if mismatch is not None:
        episode.publish(error_event(mismatch, source="provider"))
        mismatch.add_note(REPORTED)
        return mismatch
    event = provider_error(exc, "anthropic", status=status, request_id=request_id)
    episode.publish(event)
    exc.add_note(REPORTED)
    return exc
