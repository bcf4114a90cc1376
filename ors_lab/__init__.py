"""ors_lab: Open Reward Standard (ORS) environments, workable from Jupyter.

``Client`` / ``AsyncClient`` drive sessions; the models and errors are the protocol's own.
"""

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
    UnknownTaskError,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "AsyncEnvironment",
    "AsyncSession",
    "Client",
    "Environment",
    "EnvironmentStartingError",
    "ImageBlock",
    "MalformedStreamError",
    "ORSError",
    "OutcomeUnknownError",
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
    "UnknownTaskError",
    "__version__",
]
