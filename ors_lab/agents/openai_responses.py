"""An agent on the OpenAI Responses API, streaming (needs ``pip install 'ors-lab[openai]'``).

    agent = OpenAIResponsesAgent("gpt-5", reasoning={"effort": "low", "summary": "auto"})   # $OPENAI_API_KEY
    ol.evaluate(env, agent, split="test", record="runs/responses.parquet")

Each turn (one ``block``) streams one ``POST /responses`` with the session's tools as function tools,
flat as that API takes them (``{"type": "function", "name", "description", "parameters", "strict":
false}``). The SDK sends the request (and retries what it retries); the answer's raw events are read
by the one Responses decoder (``ors_lab.agents.responses``), not by the SDK's ``responses.stream()``
helper, which raises on an incomplete response and on item ids that change mid-stream. Reasoning
summaries become ``reasoning-*`` events, text ``text-*`` events, a refusal a text part of its own
(id ``refusal-N``) with finish reason ``refusal``, function-call argument deltas ``tool-input-*``
events, the response's usage (with its reasoning and cached tokens) a ``usage`` event.

The conversation goes on statelessly: each request sends the whole input again, the prompt, every
output item of the earlier responses as it came (reasoning, messages, function calls) and a
``function_call_output`` for each call, keyed by the call's ``call_id`` (not its item id); no
``previous_response_id`` is sent unless given in ``params``, so a replay needs nothing from a
server. ``reasoning=`` and any other ``params`` (``max_output_tokens``, ``instructions``,
``temperature``, ...) go into every request as given.

A response that ends ``incomplete`` ends the episode with its reason as the finish reason
(``max_output_tokens`` is ``length``) and runs none of its tool calls. A failure of the provider ends
the episode and is published as the seed's structured ``error`` from source ``provider``, as
``OpenAIAgent`` reports it: an HTTP error status (``rate_limit_error`` for a 429, with its
``retry-after``), ``response.failed`` or an ``error`` event (``ProviderReportedError``), a malformed
event, a response cut before its end (``IncompleteStreamError``: none of its tools run), a
connection cut mid-answer (``ProviderStreamError``).

As with ``OpenAIAgent``, the traffic is recorded into the evaluation's trace (the API key redacted),
and ``transport=AgentReplayTransport(trace)`` replays it offline with no key and no server.
"""

from __future__ import annotations

import os
from typing import Any

import httpx2

from ors_lab.agents.episode import Episode
from ors_lab.agents.http import needs_credentials, recording_http_client
from ors_lab.agents.openai import _reported, _stream
from ors_lab.agents.responses import ResponsesAnswer
from ors_lab.agents.turn import Turn, run_tool
from ors_lab.analysis.conversations import responses
from ors_lab.protocol.errors import ProviderError

__all__ = ["OpenAIResponsesAgent"]


class OpenAIResponsesAgent:
    """The Responses API with function calling, streamed; see the module docstring."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        reasoning: dict[str, Any] | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        max_retries: int = 2,
        timeout: float = 600.0,
        **params: Any,
    ) -> None:
        try:
            import openai  # noqa: F401  # the optional extra: is it installed? (imported where it is used)
        except ImportError as exc:
            raise ImportError("OpenAIResponsesAgent needs the openai SDK: pip install 'ors-lab[openai]'") from exc
        self.model = model
        self.base_url = base_url
        self._api_key = api_key
        self.reasoning = reasoning
        self.transport = transport
        self.api_key_env = api_key_env
        self.max_retries = max_retries
        self.timeout = timeout
        self.params = params

    def __repr__(self) -> str:
        where = f", base_url={self.base_url!r}" if self.base_url else ""
        return f"OpenAIResponsesAgent({self.model!r}{where})"

    def _key(self) -> str:
        key = self._api_key if self._api_key is not None else os.environ.get(self.api_key_env)
        if not key:
            raise ValueError(
                f"no API key: set ${self.api_key_env} or pass api_key= (any text if the server needs none)"
            )
        return key

    async def run(self, episode: Episode) -> None:
        import openai  # the optional extra: imported where it is used

        key = self._key() if needs_credentials(self.transport) else "not-sent"
        http_client = recording_http_client(self.transport, timeout=self.timeout)
        client = openai.AsyncOpenAI(
            base_url=self.base_url, api_key=key, http_client=http_client, max_retries=self.max_retries
        )
        inputs: list[dict[str, Any]] = [{"role": "user", "content": episode.prompt_text}]
        tools = responses.tools(episode.tools)
        options = dict(self.params)
        if self.reasoning is not None:
            options["reasoning"] = self.reasoning
        try:
            turns = 0
            while not episode.done:
                turns += 1
                with episode.block(f"turn {turns}") as block:
                    turn = Turn(episode, ResponsesAnswer)
                    failure: Exception | None = None
                    try:
                        await _stream(client.responses.with_streaming_response.create, turn,
                                      openai.APIConnectionError, model=self.model, input=list(inputs), tools=tools,
                                      **options)  # fmt: skip
                    except (openai.APIError, ProviderError) as exc:
                        failure = exc
                    finally:
                        turn.end(self.model)
                        episode.summarize(block, turn.summary())
                    if failure is not None:
                        raise _reported(episode, failure)
                    answer = turn.answer
                    assert isinstance(answer, ResponsesAnswer)
                    inputs.extend(answer.items)
                    if answer.incomplete or not answer.calls:  # an incomplete response's calls never run
                        episode.finish_reason = answer.finish_reason
                        return
                    for call in answer.calls:
                        if episode.done:
                            return
                        inputs.append(responses.function_call_output(await run_tool(episode, call)))
        finally:
            await client.close()
