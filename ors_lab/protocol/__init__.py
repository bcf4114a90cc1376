"""The protocol core: models, the SSE decoder, the /call assembler and the exceptions. No I/O."""

from ors_lab.protocol.call import CallAssembler
from ors_lab.protocol.errors import (
    EnvironmentStartingError,
    MalformedStreamError,
    ORSError,
    OutcomeUnknownError,
    ResumeFailedError,
    ServerError,
    SessionClosedError,
    SessionNotFoundError,
    StreamError,
    ToolError,
    TraceFormatError,
    UnknownTaskError,
)
from ors_lab.protocol.models import (
    Block,
    ImageBlock,
    OtherBlock,
    Split,
    Task,
    TextBlock,
    ToolOutput,
    ToolResult,
    ToolSpec,
)
from ors_lab.protocol.sse import ServerSentEvent, SSEComment, SSEDecoder, SSEItem

__all__ = [
    "Block",
    "CallAssembler",
    "EnvironmentStartingError",
    "ImageBlock",
    "MalformedStreamError",
    "ORSError",
    "OtherBlock",
    "OutcomeUnknownError",
    "ResumeFailedError",
    "SSEComment",
    "SSEDecoder",
    "SSEItem",
    "ServerError",
    "ServerSentEvent",
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
    "TraceFormatError",
    "UnknownTaskError",
]
