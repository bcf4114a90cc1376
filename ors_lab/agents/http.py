"""The agent's own HTTP traffic (its LLM), published on its episode's stream.

``recording_http_client()`` is an ``httpx2.AsyncClient`` on the client layer's
``RecordingTransport``: every exchange made while an episode runs is tapped as the ORS client taps
its own (request, response, each network chunk, SSE event and comment, a disconnect), with the
episode's session id and rollout, on the episode's stream, as layer ``agent`` (so the ORS replay
leaves these rows alone and ``ors_lab.replay.AgentReplayTransport`` serves them back). Outside an
episode, or when nobody listens, requests pass through untapped. Secrets (``Authorization``, API
keys) are redacted by the recorder before anything is written.
"""

from __future__ import annotations

import httpx2

from ors_lab.agents.episode import CURRENT_EPISODE
from ors_lab.client import ExchangeTap, RecordingTransport

__all__ = ["episode_tap", "needs_credentials", "recording_http_client"]


def episode_tap(request: httpx2.Request) -> ExchangeTap | None:
    """The tap for a request made inside an episode whose stream someone listens to; else None."""
    episode = CURRENT_EPISODE.get()
    if episode is None or not episode.events.active:
        return None
    return ExchangeTap(episode.events, session_id=episode.session.sid, rollout=episode.rollout, agent=True)


def needs_credentials(transport: httpx2.AsyncBaseTransport | None) -> bool:
    """False for a transport that answers from a trace (``needs_credentials = False``, as
    ``ors_lab.replay.AgentReplayTransport`` says): no key is needed there, and none is sent."""
    return bool(getattr(transport, "needs_credentials", True))


async def _without_credentials(request: httpx2.Request) -> None:
    request.headers.pop("authorization", None)


def recording_http_client(
    transport: httpx2.AsyncBaseTransport | None = None, *, timeout: float | httpx2.Timeout = 600.0
) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` whose traffic inside an episode lands on the episode's stream.

    Closing the client closes the transport it made, never a ``transport`` it was given. Through a
    transport that needs no credentials (``needs_credentials``), requests go without their
    ``Authorization`` header: it is neither sent nor recorded.
    """
    hooks = {} if needs_credentials(transport) else {"request": [_without_credentials]}
    return httpx2.AsyncClient(transport=RecordingTransport(episode_tap, transport), timeout=timeout,
                              follow_redirects=True, event_hooks=hooks)  # fmt: skip
