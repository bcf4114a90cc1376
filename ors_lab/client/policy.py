"""When the client tries again, and how long it waits.

- Only 429, 502, 503 and 504, and connection failures before the request was sent, are retried;
  ``Retry-After`` is honoured. Every other 4xx is final.
- openreward's ``503`` with ``x-backend-state: starting`` (the environment is still setting up) is
  waited out, following its ``Retry-After``, for up to ``starting_timeout`` seconds.
- A ``/call`` stream that drops after ``task_id`` is resumed with that task_id up to
  ``resume_attempts`` times; one that drops earlier is never sent again (``OutcomeUnknownError``).
"""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass

import httpx2

__all__ = ["BEFORE_SENDING", "RETRY_STATUSES", "RetryPolicy"]

RETRY_STATUSES = frozenset({429, 502, 503, 504})

BEFORE_SENDING: tuple[type[Exception], ...] = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)
"""Failures that prove the request never reached the server, so sending it again is safe."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounds on retries: ``attempts`` per request, backoff ``backoff * 2**(n-1)`` capped at
    ``max_backoff`` seconds, ``Retry-After`` capped at ``max_retry_after``."""

    attempts: int = 3
    backoff: float = 0.5
    max_backoff: float = 10.0
    max_retry_after: float = 60.0
    starting_timeout: float = 600.0
    resume_attempts: int = 5

    def backoff_for(self, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt + 1``."""
        return float(min(self.max_backoff, self.backoff * 2 ** max(0, attempt - 1)))

    def wait_after(self, response: httpx2.Response, attempt: int, waited_starting: float) -> float | None:
        """Seconds to wait before retrying after this error response, or None when it is final."""
        status = response.status_code
        retry_after = retry_after_seconds(response.headers.get("retry-after"))
        if status == 503 and response.headers.get("x-backend-state", "").lower() == "starting":
            wait = retry_after if retry_after is not None else 2.0
            return wait if waited_starting + wait <= self.starting_timeout else None
        if status not in RETRY_STATUSES or attempt >= self.attempts:
            return None
        if retry_after is not None:
            return min(retry_after, self.max_retry_after)
        return self.backoff_for(attempt)


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds: a number of seconds or an HTTP date; None if absent or invalid."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
