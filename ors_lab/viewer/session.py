"""The view state of one session: its prompt, each tool call as it streams, rewards, heartbeat and state.

``SessionState`` is plain data folded from the session's events (``session_fold``: what it
takes, what it keeps and its bounds), drawn as one text line and a static HTML card
(``session_render``) and as the front end's data (``session_snapshot``, which ``static/session.js``
draws). ``ors_lab.notebook.session.SessionView`` shows it live; it is tested without a browser.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ors_lab.client import AsyncSession
from ors_lab.viewer.session_fold import (
    FULL_STEPS,
    IMAGE_CHARS,
    LISTED_STEPS,
    OUTPUT_CHARS,
    RAW_CHARS,
    SessionFold,
    partial_text,
)
from ors_lab.viewer.session_render import session_html, session_text
from ors_lab.viewer.session_snapshot import session_snapshot
from ors_lab.viewer.state import ViewState

__all__ = [
    "FULL_STEPS",
    "IMAGE_CHARS",
    "LISTED_STEPS",
    "OUTPUT_CHARS",
    "RAW_CHARS",
    "SessionState",
    "partial_text",
]


class SessionState(SessionFold, ViewState):
    """One session as plain data, built from its events (see ``session_fold``)."""

    name: ClassVar[str] = "session"

    @classmethod
    def of(cls, session: AsyncSession) -> SessionState:
        """The state of a session, before any event (a view made after the fact)."""
        task = session.task
        return cls(
            session.sid,
            environment=session.environment,
            split=session.split,
            index=session.index,
            task=None if task is None else task.spec,
            state=session.state,
            calls=session.calls,
            pings=session.pings,
        )

    def text(self) -> str:
        return session_text(self)

    def html(self) -> str:
        return session_html(self)

    def snapshot(self) -> dict[str, Any]:
        return session_snapshot(self)
