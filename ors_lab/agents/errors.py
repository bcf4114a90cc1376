"""The seed's structured ``error`` events for what goes wrong in an episode: ``error_event`` for an
exception, ``provider_error`` for an LLM provider's failure with the provider's own code and details
(``code`` like ``ANTHROPIC_429``, ``provider: {name, statusCode, requestId}``), and ``REPORTED``, the
note on an exception whose event was already published."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ors_lab.events import ErrorEvent
from ors_lab.protocol.errors import (
    EnvironmentStartingError,
    OutcomeUnknownError,
    ProviderReportedError,
    ReplayMismatchError,
)
from ors_lab.protocol.replay import MISMATCH, REPLAY_HEADER, mismatch_error

__all__ = ["REPORTED", "error_event", "provider_error", "replay_mismatch", "reported", "retryable_status"]

REPORTED = "ors_lab: reported as an agent error event"
"""The note on an exception whose ``error`` event was already published (so the harness does not repeat it)."""


def error_event(exc: BaseException, *, source: str) -> ErrorEvent:
    """The seed's structured error for an exception, from ``source`` (``platform``, ``provider`` or ``tool``).

    ``error_type`` is one of the seed's: ``rate_limit_error`` for a 429, ``authentication_error``
    for a 401 or 403, ``provider_overloaded`` for a provider's 503 or 529 and ``provider_error`` for
    its other failures, ``tool_error`` for the environment's, ``internal_error`` for the harness's
    and the agent's own; ``code`` is the exception's type. ``retryable`` and ``retry_after`` come
    from the HTTP answer behind the exception when it has one (429, 502, 503 and 504 are retryable,
    and ``Retry-After`` seconds are passed on); an ``OutcomeUnknownError`` never is, whatever its
    status: the tool may have run.
    """
    status = getattr(exc, "status_code", None)
    if status == 429:
        kind = "rate_limit_error"
    elif status in (401, 403):
        kind = "authentication_error"
    elif source == "provider":
        kind = "provider_overloaded" if status in (503, 529) else "provider_error"
    elif source == "tool":
        kind = "tool_error"
    else:
        kind = "internal_error"
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    retry_after: float | str | None = headers.get("retry-after") if headers is not None else None
    try:
        if retry_after is not None:
            retry_after = float(retry_after)
    except ValueError:  # an HTTP date: keep the text
        pass
    return ErrorEvent(
        error_type=kind,
        message=str(exc) or type(exc).__name__,
        source=source,
        retryable=(status in (429, 502, 503, 504, 529) and not isinstance(exc, OutcomeUnknownError))
        or isinstance(exc, EnvironmentStartingError),
        retry_after=retry_after,
        code=type(exc).__name__,
    )


def retryable_status(status: int) -> bool:
    """What the providers say to retry: 408, 409, 429 and every 5xx."""
    return status in (408, 409, 429) or status >= 500


def provider_error(
    exc: BaseException, provider: str, *, status: int | None = None, request_id: str | None = None
) -> ErrorEvent:
    """The seed's error for a provider's failure, with the provider's details: ``code`` is
    ``<PROVIDER>_<status>`` (``ANTHROPIC_429``; for an error in the stream, its HTTP-like code or its
    type, ``ANTHROPIC_overloaded_error`` aside: typed as the status it stands for by the decoder),
    ``retryable`` by that status, and ``provider: {name, statusCode, requestId}``; ``status`` and
    ``request_id`` are the answer's (an HTTP error's own are read from its ``response``)."""
    event = error_event(exc, source="provider")
    response = getattr(exc, "response", None)
    if response is not None and getattr(response, "status_code", None) is not None:  # an HTTP error status
        status, request_id = response.status_code, response.headers.get("request-id") or request_id
    code = exc.status_code if isinstance(exc, ProviderReportedError) else getattr(exc, "status_code", None)
    prefix = provider.upper()
    if isinstance(code, int):
        event.code = f"{prefix}_{code}"
        event.retryable = retryable_status(code)
    elif isinstance(exc, ProviderReportedError) and exc.code:
        event.code = f"{prefix}_{exc.code}"
    event.provider = {"name": provider, "statusCode": status, "requestId": request_id}
    return event


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from or during (an SDK's error wraps the HTTP error behind it)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def replay_mismatch(exc: BaseException) -> ReplayMismatchError | None:
    """A replay's answer to a request its trace lacks (behind ``exc`` or what caused it), as the
    ``ReplayMismatchError`` it stands for; else None."""
    for link in _chain(exc):
        if isinstance(link, ReplayMismatchError):
            return link
        response = getattr(link, "response", None)
        headers = getattr(response, "headers", None)
        if headers is not None and headers.get(REPLAY_HEADER) == MISMATCH:
            mismatch = mismatch_error(response.status_code, _body(response))  # type: ignore[union-attr]
            mismatch.__cause__ = exc
            return mismatch
    return None


def reported(exc: BaseException, responses: list[Any]) -> bool:
    """True when ``exc``'s ``error`` event was already published: it (or what caused it) carries the
    ``REPORTED`` note, or its HTTP answer is one of ``responses`` (those an episode's LLM client reported)."""
    for link in _chain(exc):
        if REPORTED in getattr(link, "__notes__", ()):
            return True
        response = getattr(link, "response", None)
        if response is not None and any(response is r for r in responses):
            return True
    return False


def _body(response: Any) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text
