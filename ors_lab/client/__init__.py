"""The ORS client: ``AsyncClient`` and its sync twin ``Client``."""

from ors_lab.client.aclient import AsyncClient, AsyncEnvironment, AsyncSession, EventSink
from ors_lab.client.policy import RetryPolicy
from ors_lab.client.sync import Client, Environment, Session
from ors_lab.client.transport import AiohttpTransport

__all__ = [
    "AiohttpTransport",
    "AsyncClient",
    "AsyncEnvironment",
    "AsyncSession",
    "Client",
    "Environment",
    "EventSink",
    "RetryPolicy",
    "Session",
]
