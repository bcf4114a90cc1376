"""Agents as users write them: their own loop on an official SDK, handed `episode.llm_client()`, with no event
code of their own (tests/wild/test_llm_client.py).

- `ClaudeLoop`: `anthropic.AsyncAnthropic` and its `messages.stream()` helper, tool_use blocks run and sent back
  as tool_result blocks (the assistant's blocks, thinking with its signature, sent back as they came);
- `ChatLoop`: `openai.AsyncOpenAI` chat completions with `stream=True`, the tool calls gathered by index (on
  `llm_client()`, `llm_client_httpx()`, or, with `sync=True`, `openai.OpenAI` on `llm_client_sync()` run in a
  thread);
- `ResponsesLoop`: `openai.AsyncOpenAI` Responses with `stream=True`, the output items sent back with a
  `function_call_output` per call.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import anthropic
import openai

import ors_lab as ol

KEY = "sk-sdk-loop-test"
"""The API key each loop hands its SDK: it must reach no trace."""


class ClaudeLoop:
    def __init__(self, base_url: str, model: str = "wild-claude") -> None:
        self.base_url = base_url
        self.model = model

    async def run(self, episode: ol.Episode) -> None:
        client = anthropic.AsyncAnthropic(base_url=self.base_url, api_key=KEY, http_client=episode.llm_client(),
                                          max_retries=0)  # fmt: skip
        tools = [{"name": t.name, "description": t.description or "", "input_schema": t.input_schema or
                  {"type": "object"}} for t in episode.tools]  # fmt: skip
        messages: list[dict[str, Any]] = [{"role": "user", "content": episode.prompt_text}]
        while not episode.done:
            async with client.messages.stream(model=self.model, max_tokens=1024, messages=messages,
                                              tools=tools) as stream:  # type: ignore[arg-type]  # fmt: skip
                message = await stream.get_final_message()
            content = [b.model_dump(exclude_none=True) for b in message.content]
            messages.append({"role": "assistant", "content": content})
            uses = [b for b in message.content if b.type == "tool_use"]
            if message.stop_reason != "tool_use" or not uses:
                return
            results = []
            for use in uses:
                result = await episode.call(use.name, dict(use.input or {}), tool_call_id=use.id)  # type: ignore[call-overload]
                results.append({"type": "tool_result", "tool_use_id": use.id, "content": result.text})
            messages.append({"role": "user", "content": results})


def _chat_tools(episode: ol.Episode) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": t.name, "description": t.description or "",
             "parameters": t.input_schema or {"type": "object"}}} for t in episode.tools]  # fmt: skip


class ChatLoop:
    def __init__(self, base_url: str, model: str = "wild-model", *, client: str = "httpx2") -> None:
        self.base_url = base_url
        self.model = model
        self.client = client  # httpx2 (llm_client), httpx (llm_client_httpx) or sync (llm_client_sync)

    async def run(self, episode: ol.Episode) -> None:
        messages: list[dict[str, Any]] = [{"role": "user", "content": episode.prompt_text}]
        if self.client == "sync":
            sync = openai.OpenAI(base_url=self.base_url, api_key=KEY, http_client=episode.llm_client_sync(),
                                 max_retries=0)  # fmt: skip
        else:
            http = episode.llm_client_httpx() if self.client == "httpx" else episode.llm_client()
            aclient = openai.AsyncOpenAI(base_url=self.base_url, api_key=KEY, http_client=http, max_retries=0)
        while not episode.done:
            request = {"model": self.model, "messages": messages, "tools": _chat_tools(episode), "stream": True}
            if self.client == "sync":
                chunks = await asyncio.to_thread(lambda asked=request: list(sync.chat.completions.create(**asked)))
            else:
                chunks = [chunk async for chunk in await aclient.chat.completions.create(**request)]
            text, calls, finish = "", {}, None
            for chunk in chunks:
                for choice in chunk.choices:
                    if choice.index != 0:
                        continue
                    text += choice.delta.content or ""
                    for call in choice.delta.tool_calls or []:
                        slot = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                        slot["id"] = slot["id"] or call.id
                        if call.function is not None:
                            slot["name"] += call.function.name or ""
                            slot["arguments"] += call.function.arguments or ""
                    finish = choice.finish_reason or finish
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                message["tool_calls"] = [{"id": c["id"], "type": "function", "function": {"name": c["name"],
                                          "arguments": c["arguments"]}} for c in calls.values()]  # fmt: skip
            messages.append(message)
            if finish != "tool_calls" or not calls:
                return
            for call in calls.values():
                arguments = json.loads(call["arguments"] or "{}")
                result = await episode.call(call["name"], arguments, tool_call_id=call["id"])
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result.text})


class ResponsesLoop:
    def __init__(self, base_url: str, model: str = "wild-model") -> None:
        self.base_url = base_url
        self.model = model

    async def run(self, episode: ol.Episode) -> None:
        client = openai.AsyncOpenAI(base_url=self.base_url, api_key=KEY, http_client=episode.llm_client(),
                                    max_retries=0)  # fmt: skip
        tools = [{"type": "function", "name": t.name, "description": t.description or "",
                  "parameters": t.input_schema or {"type": "object"}} for t in episode.tools]  # fmt: skip
        inputs: list[Any] = [{"role": "user", "content": episode.prompt_text}]
        while not episode.done:
            stream = await client.responses.create(model=self.model, input=inputs, tools=tools, stream=True)  # type: ignore[arg-type]
            output: list[Any] = []
            status = None
            async for event in stream:
                if event.type in ("response.completed", "response.incomplete"):
                    output, status = event.response.output, event.response.status
            inputs.extend(item.model_dump(exclude_none=True) for item in output)
            calls = [item for item in output if item.type == "function_call"]
            if status != "completed" or not calls:
                return
            for call in calls:
                result = await episode.call(call.name, json.loads(call.arguments or "{}"), tool_call_id=call.call_id)
                inputs.append({"type": "function_call_output", "call_id": call.call_id, "output": result.text})
