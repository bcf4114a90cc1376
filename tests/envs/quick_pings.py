"""The test environments on a reference server that pings a running call every `QUICK_PING_S` seconds, not 10.

The interval is `common.QUICK_PING_S` (tests import it from there: importing this module is what
changes a process's pings). Serve with `serve("tests.envs.quick_pings:ORS_SDK", sdk="ors-sdk")` or
`serve("tests.envs.quick_pings:OPENREWARD", sdk="openreward")` (the `quick_ping_server` fixtures). The
environments are those of `tests/envs/ors_sdk_envs.py` and `tests/envs/openreward_envs.py`, unchanged.

Neither SDK has a setting for its keep-alive: both answer `/call` with sse-starlette's
`EventSourceResponse(..., ping=10)`. Imported in the server's process (the spec names this module, so
only a server started with it is changed), this module makes every `EventSourceResponse` of that
process ping every `QUICK_PING_S` seconds, with the SDK's own `: ping - <time>` comment: a test that
needs a ping gets one without sitting 10 s for it. One test still sees the real 10 s
(`tests/replay/test_check.py`, on the usual `ors_sdk_server`).
"""

from __future__ import annotations

from typing import Any

from sse_starlette import EventSourceResponse

from tests.envs.common import QUICK_PING_S

_sdk_init = EventSourceResponse.__init__


def _quick_init(self: EventSourceResponse, *args: Any, **kwargs: Any) -> None:
    """`EventSourceResponse.__init__`, then the ping interval set to `QUICK_PING_S`."""
    _sdk_init(self, *args, **kwargs)
    self.ping_interval = QUICK_PING_S


EventSourceResponse.__init__ = _quick_init  # type: ignore[method-assign]


def __getattr__(name: str) -> Any:
    """`ORS_SDK` and `OPENREWARD`, imported on first use (a server's process needs only its own SDK)."""
    if name == "ORS_SDK":
        from tests.envs import ors_sdk_envs

        return ors_sdk_envs.ENVIRONMENTS
    if name == "OPENREWARD":
        from tests.envs import openreward_envs

        return openreward_envs.ENVIRONMENTS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
