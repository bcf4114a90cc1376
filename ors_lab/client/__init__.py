"""The ORS client: ``AsyncClient`` and its sync twin ``Client``, and the recording seam."""

from ors_lab.client.aclient import AsyncClient, AsyncEnvironment, AsyncSession
from ors_lab.client.policy import RetryPolicy
from ors_lab.client.runner import Runner
from ors_lab.client.sync import Client, Environment, Session
from ors_lab.client.tap import (
    EXCHANGES,
    BodyReader,
    ExchangeTap,
    RecordingTransport,
    SyncRecordingTransport,
    describe_error,
)
from ors_lab.client.wire import WireTransport

__all__ = [
    "EXCHANGES",
    "AsyncClient",
    "AsyncEnvironment",
    "AsyncSession",
    "BodyReader",
    "Client",
    "Environment",
    "ExchangeTap",
    "RecordingTransport",
    "RetryPolicy",
    "Runner",
    "Session",
    "SyncRecordingTransport",
    "WireTransport",
    "describe_error",
]
