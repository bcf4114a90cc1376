"""Agents: the ``Agent`` interface, the ``Episode`` it is handed, policies, and the LLM agents (chat completions,
the Responses API, Anthropic's Messages API)."""

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
