"""A session's live view, as the session holds it: ``SessionView``, and how a session shows itself.

``SessionView`` is what a session holds while it is open (``AsyncSession`` starts one through the
display hook, ``ors_lab.display.live``, before its ``/create``, so it sees everything): its
``SessionState`` (``ors_lab.viewer.session``), drawn by a ``LiveView`` (a widget in a notebook,
one text line elsewhere), fed through one router per event stream, so that many open sessions
cost one dictionary look-up per event. Nothing here raises into the session: a view that fails
is logged and left out. ``session_bundle`` is how a session shows itself when displayed (its live
view, else its static card); ``ors_lab.notebook.display`` registers both.
"""

from __future__ import annotations

import logging
import sys
import threading
import weakref
from typing import Any, TextIO

from ors_lab.client import AsyncSession, Session
from ors_lab.events import Event, EventStream, Subscription
from ors_lab.notebook.settings import live_views, resolve
from ors_lab.notebook.view import LiveView
from ors_lab.viewer.session import SessionState

__all__ = ["SessionView", "session_bundle", "sync_session_bundle"]

log = logging.getLogger(__name__)


class _Router:
    """One subscriber per event stream: each event goes to the view of its session (one look-up).

    It subscribes while at least one view is registered, so a stream with no open session's view
    is not kept busy (the client builds no events when nobody listens).
    """

    def __init__(self) -> None:
        self.views: dict[str, LiveView] = {}
        self.subscription: Subscription | None = None
        self.lock = threading.Lock()

    def add(self, stream: EventStream, session_id: str, view: LiveView) -> None:
        with self.lock:
            self.views[session_id] = view
            if self.subscription is None:
                self.subscription = stream.subscribe(self, kinds=SessionState.kinds)

    def remove(self, session_id: str) -> None:
        with self.lock:
            self.views.pop(session_id, None)
            if not self.views and self.subscription is not None:
                self.subscription.close()
                self.subscription = None

    def __call__(self, event: Event) -> None:
        sid = event.session_id
        view = self.views.get(sid) if sid is not None else None
        if view is None or sid is None:
            return
        try:
            view(event)
        except Exception:  # one view's failure is its own: it is dropped, the session and the others go on
            log.exception("ors_lab: the live view of session %s failed and was detached", sid)
            self.remove(sid)


_ROUTERS: weakref.WeakKeyDictionary[EventStream, _Router] = weakref.WeakKeyDictionary()
_ROUTERS_LOCK = threading.Lock()


def _router(stream: EventStream) -> _Router:
    with _ROUTERS_LOCK:
        router = _ROUTERS.get(stream)
        if router is None:
            router = _ROUTERS[stream] = _Router()
        return router


def _terminal() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


class SessionView:
    """A session's live view, as the session holds it: started before its ``/create``, closed with it.

    ``SessionView.start(session, events)`` makes, subscribes and shows it as ``live_views()`` says (None when
    views are off, or when it could not be made: logged). ``close()`` detaches it and draws the final
    state. Displaying it shows the same widget again.
    """

    def __init__(
        self,
        session: AsyncSession | Session,
        *,
        state: SessionState | None = None,
        mode: str | None = None,
        text_stream: TextIO | None = None,
        text_interval: float | None = None,
        events: EventStream | None = None,
    ) -> None:
        aio = session.aio if isinstance(session, Session) else session
        self.state = state if state is not None else SessionState.of(aio)
        options: dict[str, Any] = {} if text_interval is None else {"text_interval": text_interval}
        self.live = LiveView(self.state, mode=mode, text_stream=text_stream, **options)
        self._stream: EventStream = events if events is not None else aio.events
        self._attached = False

    def __repr__(self) -> str:
        return repr(self.live)

    @classmethod
    def start(cls, session: AsyncSession, events: EventStream) -> SessionView | None:
        """The view of a session about to open: subscribed to ``events`` (its own), then shown. Never raises.

        The notebook's answer to ``ors_lab.display.live`` for a session.
        """
        view = None
        try:
            mode = resolve()
            if mode == "off" or (mode == "text" and live_views() == "auto" and not _terminal()):
                return None  # "auto" draws a session's text line on a terminal only: a log gets none per session
            view = cls(session, mode=mode, events=events)
            view.state.opening = True  # its /create is about to go
            view.attach()
            view.live.show()
        except Exception:
            log.exception("ors_lab: the live view of session %s could not be shown", session.sid)
            if view is not None:
                view.close()
            return None
        return view

    def attach(self) -> SessionView:
        """Receive the session's events from now on."""
        if not self._attached:
            _router(self._stream).add(self._stream, self.state.session_id, self.live)
            self._attached = True
        return self

    def close(self) -> None:
        """Detach, and draw the final state (the widget, and the static summary a saved notebook keeps).

        Never raises: a failure is logged.
        """
        try:
            if self._attached:
                _router(self._stream).remove(self.state.session_id)
                self._attached = False
            self.state.finish()
            self.live.close()
        except Exception:
            log.exception("ors_lab: the live view of session %s could not be closed", self.state.session_id)

    @property
    def updates(self) -> int:
        """How many times the front end (or the text line) was updated."""
        return self.live.updates

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self.live._repr_mimebundle_(include, exclude)


def session_bundle(session: AsyncSession) -> dict[str, Any]:
    """How a session shows itself when displayed: its live view (the same widget), else its static card."""
    if session.view is not None:
        return session.view._repr_mimebundle_()
    return {"text/html": SessionState.of(session).html(), "text/plain": repr(session)}


def sync_session_bundle(session: Session) -> dict[str, Any]:
    """A sync ``Session`` shows itself as its async one does, with its own text when it has no view."""
    bundle = session_bundle(session.aio)
    if session.aio.view is None:
        bundle["text/plain"] = repr(session)
    return bundle
