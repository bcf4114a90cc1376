"""Agents: the ``Agent`` interface, the ``Episode`` it is handed, policies, and the OpenAI-compatible agent."""

from ors_lab.agents.episode import CURRENT_EPISODE, Agent, Episode, Step, StepLimitReached, TextStream
from ors_lab.agents.events import AGENT_EVENT_TYPES, FINISH_REASONS, AgentEvent, EventStream
from ors_lab.agents.http import RecordingTransport, recording_http_client
from ors_lab.agents.openai import OpenAIAgent
from ors_lab.agents.policy import Observation, Policy, PolicyAgent, ToolCall, as_agent

__all__ = [
    "AGENT_EVENT_TYPES",
    "CURRENT_EPISODE",
    "FINISH_REASONS",
    "Agent",
    "AgentEvent",
    "Episode",
    "EventStream",
    "Observation",
    "OpenAIAgent",
    "Policy",
    "PolicyAgent",
    "RecordingTransport",
    "Step",
    "StepLimitReached",
    "TextStream",
    "ToolCall",
    "as_agent",
    "recording_http_client",
]
