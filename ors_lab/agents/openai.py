"""An agent on any OpenAI-compatible chat-completions server, streaming (needs ``pip install 'ors-lab[openai]'``).

    agent = OpenAIAgent("my-model", base_url="http://127.0.0.1:8000/v1")   # key from $OPENAI_API_KEY
    ol.evaluate(env, agent, split="test", record="runs/llm.parquet")

Each turn (one ``block``) streams one chat completion with the session's tools as function tools.
Reasoning deltas (``reasoning_content`` or ``reasoning`` in the delta, as open-weight servers send
them) become ``reasoning-*`` events, content deltas ``text-*`` events, and tool-call argument
deltas ``tool-input-*`` events; the completion's token usage (asked for with
``stream_options.include_usage``) a ``usage`` event; each tool call then runs through
``episode.call`` and its result goes back as a ``tool`` message. The episode ends when it
finishes, the step limit is reached, or the model answers without calling a tool. A failure of the
provider is published as the seed's structured ``error`` (``rate_limit_error``,
``authentication_error``, ``provider_overloaded``, ``provider_error``) and ends the episode.

The SDK is given an ``http_client`` on ``RecordingTransport``, so the LLM traffic is recorded into
the evaluation's trace (the API key is redacted before writing); pass
``transport=AgentReplayTransport(trace)`` to run the same evaluation offline from that trace: then
no API key is needed (none is read, sent or recorded) and no ``base_url`` either (the recorded
requests are matched by method, path and body).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx2

from ors_lab.agents.episode import REPORTED, Episode, TextStream, error_event
from ors_lab.agents.http import needs_credentials, recording_http_client
from ors_lab.events import ToolInputDeltaEvent, ToolInputEndEvent, ToolInputStartEvent, ToolOutputErrorEvent
from ors_lab.protocol.replay import MISMATCH, REPLAY_HEADER, mismatch_error

__all__ = ["OpenAIAgent", "function_tools"]

FINISH_REASONS = {"stop": "stop", "length": "length", "tool_calls": "tool-calls", "content_filter": "content-filter"}


def function_tools(episode: Episode) -> list[dict[str, Any]]:
    """The session's tools as OpenAI function tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": spec.input_schema if isinstance(spec.input_schema, dict) else {"type": "object"},
            },
        }
        for spec in episode.tools
    ]


@dataclass
class _ToolCall:
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)


class _Turn:
    """One streamed completion, turned into agent events as the deltas arrive."""

    def __init__(self, episode: Episode) -> None:
        self.episode = episode
        self.parts: dict[str, TextStream] = {}  # the open "text" or "reasoning" part (one at a time)
        self.calls: dict[int, _ToolCall] = {}
        self.content: list[str] = []
        self.finish_reason: str | None = None
        self.usage: Any = None

    def _part(self, kind: str) -> TextStream:
        """The open text or reasoning part, opening it (and closing the other) when needed."""
        part = self.parts.get(kind)
        if part is None:
            self._close()
            part = self.parts[kind] = self.episode.open_part(kind)
        return part

    def _close(self) -> None:
        for part in self.parts.values():
            part.close()
        self.parts.clear()

    def feed(self, chunk: Any) -> None:
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
        for choice in chunk.choices or ():
            delta = choice.delta
            extra = delta.model_extra or {}
            reasoning = extra.get("reasoning_content") or extra.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self._part("reasoning").write(reasoning)
            if delta.content:
                self.content.append(delta.content)
                self._part("text").write(delta.content)
            for call in delta.tool_calls or ():
                self._tool_delta(call)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason

    def _tool_delta(self, call: Any) -> None:
        self._close()
        entry = self.calls.get(call.index)
        function = call.function
        if entry is None:
            entry = self.calls[call.index] = _ToolCall(
                id=call.id or self.episode.new_id("call"), name=(function.name if function else None) or ""
            )
            self.episode.publish(ToolInputStartEvent(tool_call_id=entry.id, tool_name=entry.name))
        if function is not None and function.arguments:
            entry.arguments.append(function.arguments)
            self.episode.publish(ToolInputDeltaEvent(tool_call_id=entry.id, input_text_delta=function.arguments))

    def end(self, model: str) -> None:
        self._close()
        for entry in self.calls.values():
            self.episode.publish(ToolInputEndEvent(tool_call_id=entry.id))
        usage = self.usage
        if usage is not None:
            completion = getattr(usage, "completion_tokens_details", None)
            prompt = getattr(usage, "prompt_tokens_details", None)
            self.episode.record_usage(
                input_tokens=usage.prompt_tokens,
                output_tokens=usage.completion_tokens,
                reasoning_tokens=getattr(completion, "reasoning_tokens", None),
                cached_tokens=getattr(prompt, "cached_tokens", None),
                model=model,
            )

    def message(self) -> dict[str, Any]:
        """The assistant message to send back in the next turn."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": "".join(c.arguments)}}
                for c in self.calls.values()
            ]
        return message


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
            import openai  # noqa: F401
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
        import openai

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
        tools = function_tools(episode)
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
                with episode.block(f"turn {turns}"):
                    turn = _Turn(episode)
                    failure: openai.APIError | None = None
                    try:
                        stream: Any = await client.chat.completions.create(
                            model=self.model,
                            messages=messages,  # type: ignore[arg-type]
                            tools=tools,  # type: ignore[arg-type]
                            stream=True,
                            **options,
                        )
                        async for chunk in stream:
                            turn.feed(chunk)
                    except openai.APIError as exc:
                        failure = exc
                    finally:
                        turn.end(self.model)
                    if failure is not None:
                        raise _reported(episode, failure)
                    messages.append(turn.message())
                    if not turn.calls:
                        episode.finish_reason = FINISH_REASONS.get(turn.finish_reason or "stop", "other")
                        return
                    for call in turn.calls.values():
                        if episode.done:
                            return
                        content = await _run_tool(episode, call)
                        messages.append({"role": "tool", "tool_call_id": call.id, "content": content})
        finally:
            await client.close()


def _reported(episode: Episode, exc: Exception) -> Exception:
    """The provider's failure (a replay's mismatch as a ``ReplayMismatchError``), published as the
    seed's structured error and noted so: the exception to raise."""
    response = getattr(exc, "response", None)
    if response is not None and response.headers.get(REPLAY_HEADER) == MISMATCH:
        mismatch = mismatch_error(response.status_code, _body(response))
        mismatch.__cause__ = exc
        exc = mismatch
    episode.publish(error_event(exc, source="provider"))
    exc.add_note(REPORTED)
    return exc


async def _run_tool(episode: Episode, call: _ToolCall) -> str:
    """Run one tool call; what goes back to the model (the output, or why it failed)."""
    text = "".join(call.arguments) or "{}"
    try:
        arguments = json.loads(text)
    except ValueError as exc:
        message = f"the arguments are not valid JSON ({exc}): {text[:200]}"
        episode.publish(ToolOutputErrorEvent(tool_call_id=call.id, tool=call.name, error=message))
        return f"error: {message}"
    if not isinstance(arguments, dict):
        message = f"the arguments must be a JSON object, not {text[:200]}"
        episode.publish(ToolOutputErrorEvent(tool_call_id=call.id, tool=call.name, error=message))
        return f"error: {message}"
    result = await episode.call(call.name, arguments, tool_call_id=call.id)
    return result.text if result.ok else f"error: {result.text}"


def _body(response: httpx2.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text
