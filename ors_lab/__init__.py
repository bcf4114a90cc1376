"""ors_lab: Open Reward Standard (ORS) environments, workable from Jupyter.

``Client`` / ``AsyncClient`` drive sessions; the models and errors are the protocol's own;
``Recorder`` and ``load_trace`` write and read traces (loaded on first use: pyarrow is heavy).
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
    from ors_lab.recording import Recorder, Trace, load_trace
    from ors_lab.replay import Fault, ReplayServer, ReplayTransport

_LAZY = {
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
    "AsyncClient",
    "AsyncEnvironment",
    "AsyncSession",
    "Client",
    "Environment",
    "EnvironmentStartingError",
    "Fault",
    "ImageBlock",
    "MalformedStreamError",
    "ORSError",
    "OutcomeUnknownError",
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
    "ToolError",
    "ToolOutput",
    "ToolResult",
    "ToolSpec",
    "Trace",
    "TraceFormatError",
    "UnknownTaskError",
    "__version__",
    "load_trace",
]
