"""ors_lab: Open Reward Standard (ORS) environments, workable from Jupyter.

``Client`` / ``AsyncClient`` drive sessions; the models and errors are the protocol's own; every
event is a typed record on an ``EventStream`` (``ors_lab.events`` has them all); ``Recorder`` and
``load_trace`` write and read traces, and ``compare`` compares runs task by task; ``evaluate`` runs an
agent over tasks into DataFrames (here, or on Ray workers with ``RayBackend``), and ``Feed`` / ``watch``
serve and show a run's live feed (these load on first use: pyarrow, pandas and uvicorn are heavy).
"""

from typing import TYPE_CHECKING, Any

from ors_lab.client import (
    AsyncClient,
    AsyncEnvironment,
    AsyncSession,
    Client,
    Environment,
    RecordingTransport,
    RetryPolicy,
    Session,
)
from ors_lab.events import AgentEvent, Event, EventStream, Subscription, WireEvent
from ors_lab.notebook.settings import live_views
from ors_lab.protocol import (
    AgentNotShippableError,
    Block,
    CallDeadlineExceededError,
    ConnectionFailedError,
    DeadlineExceededError,
    EnvironmentStartingError,
    EventNotRecordedError,
    ImageBlock,
    IncompleteStreamError,
    InvalidURLError,
    MalformedChunkError,
    MalformedResponseError,
    MalformedStreamError,
    ORSError,
    OutcomeUnknownError,
    ProviderError,
    ProviderReportedError,
    ProviderStatusError,
    ProviderStreamError,
    ReplayMismatchError,
    ResumeFailedError,
    ServerError,
    SessionClosedError,
    SessionNotFoundError,
    Split,
    SplitRequiredError,
    StreamError,
    Task,
    TaskIndexError,
    TextBlock,
    ToolError,
    ToolOutput,
    ToolResult,
    ToolSpec,
    TraceExistsError,
    TraceFormatError,
    TraceLockedError,
    TraceNotFoundError,
    TraceTooLargeError,
    UnknownEnvironmentError,
    UnknownSplitError,
    UnknownTaskError,
    WorkersLostError,
)
from ors_lab.version import __version__

if TYPE_CHECKING:
    from ors_lab.agents import (
        Agent,
        AnthropicAgent,
        Episode,
        Observation,
        OpenAIAgent,
        OpenAIResponsesAgent,
        PolicyAgent,
        Step,
        ToolCall,
    )
    from ors_lab.analysis import Comparison, Trace, compare, load_trace
    from ors_lab.evaluation import EvalResult, EvaluationInterrupted, RayBackend, aevaluate, evaluate, last_result
    from ors_lab.feed import Feed
    from ors_lab.notebook.watch import Watch, watch
    from ors_lab.recording import Recorder
    from ors_lab.replay import AgentReplayTransport, Fault, ReplayServer, ReplayTransport

_LAZY = {
    "Agent": "ors_lab.agents",
    "AnthropicAgent": "ors_lab.agents",
    "Episode": "ors_lab.agents",
    "Observation": "ors_lab.agents",
    "OpenAIAgent": "ors_lab.agents",
    "OpenAIResponsesAgent": "ors_lab.agents",
    "PolicyAgent": "ors_lab.agents",
    "Step": "ors_lab.agents",
    "ToolCall": "ors_lab.agents",
    "EvalResult": "ors_lab.evaluation",
    "RayBackend": "ors_lab.evaluation",
    "EvaluationInterrupted": "ors_lab.evaluation",
    "aevaluate": "ors_lab.evaluation",
    "evaluate": "ors_lab.evaluation",
    "last_result": "ors_lab.evaluation",
    "Feed": "ors_lab.feed",
    "Watch": "ors_lab.notebook.watch",
    "watch": "ors_lab.notebook.watch",
    "Recorder": "ors_lab.recording",
    "Trace": "ors_lab.analysis",
    "Comparison": "ors_lab.analysis",
    "compare": "ors_lab.analysis",
    "load_trace": "ors_lab.analysis",
    "AgentReplayTransport": "ors_lab.replay",
    "Fault": "ors_lab.replay",
    "ReplayServer": "ors_lab.replay",
    "ReplayTransport": "ors_lab.replay",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib  # only when a lazy name is first used

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'ors_lab' has no attribute {name!r}")


__all__ = [
    "Agent",
    "AgentEvent",
    "AgentNotShippableError",
    "AgentReplayTransport",
    "AnthropicAgent",
    "AsyncClient",
    "AsyncEnvironment",
    "AsyncSession",
    "Block",
    "CallDeadlineExceededError",
    "Client",
    "Comparison",
    "ConnectionFailedError",
    "DeadlineExceededError",
    "Environment",
    "EnvironmentStartingError",
    "Episode",
    "EvalResult",
    "EvaluationInterrupted",
    "Event",
    "EventNotRecordedError",
    "EventStream",
    "Fault",
    "Feed",
    "ImageBlock",
    "IncompleteStreamError",
    "InvalidURLError",
    "MalformedChunkError",
    "MalformedResponseError",
    "MalformedStreamError",
    "ORSError",
    "Observation",
    "OpenAIAgent",
    "OpenAIResponsesAgent",
    "OutcomeUnknownError",
    "PolicyAgent",
    "ProviderError",
    "ProviderReportedError",
    "ProviderStatusError",
    "ProviderStreamError",
    "RayBackend",
    "Recorder",
    "RecordingTransport",
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
    "SplitRequiredError",
    "Step",
    "StreamError",
    "Subscription",
    "Task",
    "TaskIndexError",
    "TextBlock",
    "ToolCall",
    "ToolError",
    "ToolOutput",
    "ToolResult",
    "ToolSpec",
    "Trace",
    "TraceExistsError",
    "TraceFormatError",
    "TraceLockedError",
    "TraceNotFoundError",
    "TraceTooLargeError",
    "UnknownEnvironmentError",
    "UnknownSplitError",
    "UnknownTaskError",
    "Watch",
    "WireEvent",
    "WorkersLostError",
    "__version__",
    "aevaluate",
    "compare",
    "evaluate",
    "last_result",
    "live_views",
    "load_trace",
    "watch",
]
