"""Conversations out: each episode of a trace as one LLM API's messages, tool calls and tool results, with its
reward (``Trace.conversations``, ``ors-lab export``), for fine-tuning and RL.

The three APIs (``format``): ``"openai"`` (chat completions), ``"anthropic"`` (Messages), ``"responses"`` (the
Responses API). Each has one module here that reads its requests and writes a conversation in its shape
(``openai``, ``anthropic``, ``responses``), over a conversation in no API's shape (``model``); the agents
write their requests with the same functions, so what a conversation says is what an agent would send.
``build`` makes the conversations from a trace's rows (it reads pyarrow; the rest imports nothing heavy).
"""

from ors_lab.analysis.conversations.formats import FORMATS
from ors_lab.analysis.conversations.model import (
    Dialogue,
    Image,
    Message,
    Reasoning,
    Text,
    ToolOutcome,
    ToolUse,
    content_of,
    failed,
    outcome_of,
)

__all__ = [
    "FORMATS",
    "Dialogue",
    "Image",
    "Message",
    "Reasoning",
    "Text",
    "ToolOutcome",
    "ToolUse",
    "content_of",
    "failed",
    "outcome_of",
]
