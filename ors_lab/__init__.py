"""ors_lab: Open Reward Standard (ORS) environments, workable from Jupyter.

``Client`` / ``AsyncClient`` drive sessions; the models and errors are the protocol's own;
``Recorder`` and ``load_trace`` write and read traces; ``evaluate`` runs an agent over tasks
into DataFrames (these load on first use: pyarrow and pandas are heavy).
"""

from typing import TYPE_CHECKING, Any

from ors_lab.client import (
    AsyncClient,
    AsyncEnvironment,
    AsyncSession,
    Client,
    Environment,
    RetryPolicy,
    Session,
)
from ors_lab.protocol import (
    EnvironmentStartingError,
    ImageBlock,
    MalformedStreamError,
    ORSError,
    OutcomeUnknownError,
    ReplayMismatchError,
    ResumeFailedError,
    ServerError,
    SessionClosedError,
    SessionNotFoundError,
    Split,
    StreamError,
    Task,
    TextBlock,
    ToolError,
    ToolOutput,
    ToolResult,
    ToolSpec,
    TraceFormatError,
    UnknownTaskError,
)

if TYPE_CHECKING:
    from ors_lab.agents import Agent, AgentEvent, Episode, Observation, OpenAIAgent, PolicyAgent, ToolCall
    from ors_lab.evaluation import EvalResult, aevaluate, evaluate
    from ors_lab.recording import Recorder, Trace, load_trace
    from ors_lab.replay import AgentReplayTransport, Fault, ReplayServer, ReplayTransport

_LAZY = {
    "Agent": "ors_lab.agents",
    "AgentEvent": "ors_lab.agents",
    "Episode": "ors_lab.agents",
    "Observation": "ors_lab.agents",
    "OpenAIAgent": "ors_lab.agents",
    "PolicyAgent": "ors_lab.agents",
    "ToolCall": "ors_lab.agents",
    "EvalResult": "ors_lab.evaluation",
    "aevaluate": "ors_lab.evaluation",
    "evaluate": "ors_lab.evaluation",
    "AgentReplayTransport": "ors_lab.replay",
    "Recorder": "ors_lab.recording",
    "Trace": "ors_lab.recording",
    "load_trace": "ors_lab.recording",
    "Fault": "ors_lab.replay",
    "ReplayServer": "ors_lab.replay",
    "ReplayTransport": "ors_lab.replay",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ors_lab' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentEvent",
    "AgentReplayTransport",
    "AsyncClient",
    "AsyncEnvironment",
    "AsyncSession",
    "Client",
    "Environment",
    "EnvironmentStartingError",
    "Episode",
    "EvalResult",
    "Fault",
    "ImageBlock",
    "MalformedStreamError",
    "ORSError",
    "Observation",
    "OpenAIAgent",
    "OutcomeUnknownError",
    "PolicyAgent",
    "Recorder",
    "ReplayMismatchError",
    "ReplayServer",
    "ReplayTransport",
    "ResumeFailedError",
    "RetryPolicy",
    "ServerError",
    "Session",
    "SessionClosedError",
    "SessionNotFoundError",
    "Split",
    "StreamError",
    "Task",
    "TextBlock",
    "ToolCall",
    "ToolError",
    "ToolOutput",
    "ToolResult",
    "ToolSpec",
    "Trace",
    "TraceFormatError",
    "UnknownTaskError",
    "__version__",
    "aevaluate",
    "evaluate",
    "load_trace",
]
