"""The agent of `claude-arithmetic.parquet`: a loop of its own on Anthropic's SDK, handed `episode.llm_client()`.

It has no event code: the client records its traffic into the run's trace and publishes what the model
streams (thinking, text, tool input, usage) as agent events. `docs/evaluation-and-agents.md` shows the same
loop; `notebooks/02-evaluate.ipynb` replays the trace with it (`ol.evaluate(..., llm_replay=TRACE)`).
"""

from __future__ import annotations

from typing import Any

import anthropic

import ors_lab as ol


class ClaudeLoop:
    def __init__(self, model: str, base_url: str | None = None, api_key: str = "not-needed-in-replay") -> None:
        self.model, self.base_url, self.api_key = model, base_url, api_key

    async def run(self, episode: ol.Episode) -> None:
        client = anthropic.AsyncAnthropic(base_url=self.base_url, api_key=self.api_key,
                                          http_client=episode.llm_client())  # fmt: skip
        tools: Any = [{"name": t.name, "description": t.description, "input_schema": t.input_schema}
                      for t in episode.tools]  # fmt: skip
        messages: list[Any] = [{"role": "user", "content": episode.prompt_text}]
        while not episode.done:
            thinking: Any = {"type": "enabled", "budget_tokens": 1024}
            async with client.messages.stream(
                model=self.model, max_tokens=2048, tools=tools, messages=messages, thinking=thinking
            ) as stream:
                message = await stream.get_final_message()
            messages.append({"role": "assistant", "content": message.content})
            uses = [block for block in message.content if block.type == "tool_use"]
            if not uses:
                return
            results = []
            for use in uses:
                result = await episode.call(use.name, use.input, tool_call_id=use.id)  # type: ignore[arg-type]
                results.append({"type": "tool_result", "tool_use_id": use.id, "content": result.text})
            messages.append({"role": "user", "content": results})
