"""Agents: the ``Agent`` interface, the ``Episode`` it is handed, policies, and the LLM agents (chat completions,
the Responses API, Anthropic's Messages API).

The names load on first use: an evaluation's episodes need the episode and the policies, not every LLM agent."""

from typing import TYPE_CHECKING

from ors_lab.lazy import lazy as _lazy

if TYPE_CHECKING:
    from ors_lab.agents.anthropic import AnthropicAgent
    from ors_lab.agents.episode import (
        CURRENT_EPISODE,
        Agent,
        Episode,
        Step,
        StepLimitReached,
        TextStream,
        Usage,
    )
    from ors_lab.agents.errors import error_event
    from ors_lab.agents.http import recording_http_client
    from ors_lab.agents.openai import OpenAIAgent
    from ors_lab.agents.openai_responses import OpenAIResponsesAgent
    from ors_lab.agents.policy import Observation, Policy, PolicyAgent, ToolCall, as_agent

__all__ = [
    "CURRENT_EPISODE",
    "Agent",
    "AnthropicAgent",
    "Episode",
    "Observation",
    "OpenAIAgent",
    "OpenAIResponsesAgent",
    "Policy",
    "PolicyAgent",
    "Step",
    "StepLimitReached",
    "TextStream",
    "ToolCall",
    "Usage",
    "as_agent",
    "error_event",
    "recording_http_client",
]

__getattr__, __dir__ = _lazy(__name__, {
    "AnthropicAgent": "ors_lab.agents.anthropic",
    **dict.fromkeys(["CURRENT_EPISODE", "Agent", "Episode", "Step", "StepLimitReached", "TextStream", "Usage"],
                    "ors_lab.agents.episode"),
    "error_event": "ors_lab.agents.errors",
    "recording_http_client": "ors_lab.agents.http",
    "OpenAIAgent": "ors_lab.agents.openai",
    "OpenAIResponsesAgent": "ors_lab.agents.openai_responses",
    **dict.fromkeys(["Observation", "Policy", "PolicyAgent", "ToolCall", "as_agent"], "ors_lab.agents.policy"),
})  # fmt: skip
