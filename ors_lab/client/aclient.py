"""The async ORS client: ``AsyncClient`` → ``AsyncEnvironment`` → ``AsyncSession``.

Requests always name their environment (``/{env}/...``), never relying on the servers' 308
redirect to the default one. A session opens with one request (``POST /create`` with a session
id made here), keeps itself alive with ``POST /ping`` every 10 s for its whole life, and is
deleted when it closes, whatever ends it. ``call()`` returns a ``ToolResult``; ``ok=False`` is
data, and infrastructure failures are the typed errors of ``ors_lab.protocol.errors``.

Two seams: ``transport=`` (any ``httpx2.AsyncBaseTransport``; the default, ``WireTransport``, sends on HTTP/1.1
connections of its own, at most ``connections=`` to the server at once: ``ors_lab.client.wire``) and
``events``, the client's ``EventStream``: every request, response, network chunk, SSE event,
comment, retry and session step is published on it, in order, as a typed event
(``ors_lab.events``). ``recorder=`` subscribes a ``Recorder`` (or any subscriber) to it. An
environment or session can be given a stream of its own (``client.environment(name, events=...)``,
as an evaluation does): its events go there first, then to the client's stream. Code that captures
into a stream forwarding to the client's (``EventStream.capture``, as an evaluation's episodes do)
has the client's own requests, those of its environments and of the sessions made from them
published on that stream instead (``EventStream.routed``): an agent's requests through the client of
its episode's session belong to the run's trace.

A session opens on first use (``prompt()``, ``tools()`` or ``call()`` on a new session open it, once,
however many calls race to it) or on entering ``async with``, and then lives until it is closed: by
``close()``, by leaving the ``async with`` block, by the client's ``aclose()``, or by the client's own
end. A client left open closes itself when its event loop ends (``asyncio.run`` cancels its remaining
tasks), when it is dropped, or at interpreter exit: its sessions are deleted and its connections
closed, without warnings (``_ExitGuard``).

A session shows itself live as ``ol.live_views()`` says, through the display hook
(``ors_lab.display``; the notebook layer draws it): in a notebook, a widget displayed where it
opens and updated in place by later calls; elsewhere, one text line; nothing when views are off
(or with ``session(..., view=False)``). The view subscribes before the session's ``/create`` and
never raises into it.

One private module per job: ``_send`` (a request and its retries), ``_call`` (a ``/call`` and its
resumes), ``_guard`` (the lifetime: ``_ExitGuard``), ``_environment``, ``_session`` and
``_client``; the servers' answers are parsed in ``ors_lab.protocol.answers``. This module is
their public face.
"""

from ors_lab.client._call import HEARTBEAT_TIMEOUT
from ors_lab.client._client import PING_INTERVAL, AsyncClient
from ors_lab.client._environment import AsyncEnvironment
from ors_lab.client._guard import CLOSING_DELETES, EXIT_TIMEOUT
from ors_lab.client._send import DEFAULT_TIMEOUT, USER_AGENT
from ors_lab.client._session import DELETE_ATTEMPTS, DELETE_TIMEOUT, AsyncSession, delete_session

__all__ = [
    "CLOSING_DELETES",
    "DEFAULT_TIMEOUT",
    "DELETE_ATTEMPTS",
    "DELETE_TIMEOUT",
    "EXIT_TIMEOUT",
    "HEARTBEAT_TIMEOUT",
    "PING_INTERVAL",
    "USER_AGENT",
    "AsyncClient",
    "AsyncEnvironment",
    "AsyncSession",
    "delete_session",
]
