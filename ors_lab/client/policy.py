"""When the client tries again, and how long it waits.

- A request is tried again only when the answer (or the failure) proves it did not run, or when
  running it twice does no harm:

  - a failure before the request was sent (``BEFORE_SENDING``: it could not connect) is retried,
    up to ``attempts`` tries, ``backoff`` apart (doubling);
  - ``429`` and ``502``/``503``/``504`` are retried up to ``attempts`` tries, honouring
    ``Retry-After``; every other 4xx and 5xx is final (``ServerError``);
  - openreward's ``503`` with ``x-backend-state: starting`` (the environment is still setting up)
    is waited out by the clock: until ``starting_timeout`` seconds have passed since the first
    such answer, following its ``Retry-After``.

- A first ``/call`` (no ``task_id`` yet) runs a tool, and tools are not idempotent, so it is sent
  again only after an answer that proves nothing ran: ``429``, or ``503`` "starting" (and a failure
  before sending). A ``3xx``/``4xx`` is the server refusing it (``ServerError``). A ``5xx`` of any
  other kind, or a connection that fails after the request may have left, raises
  ``OutcomeUnknownError``: a gateway's ``502`` or ``504`` can come after the tool ran. So does any
  answer marked ``x-ors-lab-outcome: unknown`` (``ors-lab proxy`` answers ``424`` with it when its
  upstream hung up before the ``task_id``).
- A ``/call`` stream that drops after ``task_id`` is resumed with that task_id, which is safe
  (re-attaching runs nothing again): drops and ``429``/``502``/``503``/``504`` answers to a resume
  count against ``resume_attempts``. One that drops before ``task_id`` is never sent again.
- No wait after an error answer is shorter than ``MIN_RETRY_WAIT``, whatever ``Retry-After`` says
  (``0``, a date in the past, junk), and none is longer than ``max_retry_after`` (unless that is
  below the floor); so no answer can make the client spin, and every retry loop is bounded by a
  count or by the clock.
"""

from __future__ import annotations

import email.utils
import time
from dataclasses import dataclass

import httpx2

__all__ = [
    "BEFORE_SENDING",
    "MIN_RETRY_WAIT",
    "OUTCOME_HEADER",
    "RETRY_STATUSES",
    "RetryPolicy",
    "is_starting",
    "outcome_unknown",
]

RETRY_STATUSES = frozenset({429, 502, 503, 504})
"""Answers a request (not a first /call) is tried again after."""

CALL_RETRY_STATUSES = frozenset({429})
"""Answers a first /call is tried again after (besides 503 "starting"): they prove the tool did not run."""

MIN_RETRY_WAIT = 0.5
"""The least wait, in seconds, before trying again after an error answer. A server that says
``Retry-After: 0`` (or sends "starting" with no pause) gets at most two requests a second from one
request of this client, not thousands."""

STARTING_WAIT = 2.0
"""The wait between tries while an environment starts, when its answer has no ``Retry-After``
(openreward sends ``retry-after: 2``)."""

BEFORE_SENDING: tuple[type[Exception], ...] = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)
"""Failures that prove the request never reached the server, so sending it again is safe."""


OUTCOME_HEADER = "x-ors-lab-outcome"
"""A header whose value ``unknown`` says: this request may or may not have run (``ors-lab proxy`` sets it)."""


def outcome_unknown(response: httpx2.Response) -> bool:
    """True for an answer to a first /call that leaves open whether the tool ran: a 5xx other than
    "starting", or an answer marked ``x-ors-lab-outcome: unknown``."""
    if response.headers.get(OUTCOME_HEADER, "").lower() == "unknown":
        return True
    return response.status_code >= 500 and not is_starting(response)


def is_starting(response: httpx2.Response) -> bool:
    """True for openreward's "the environment is still starting": a 503 with ``x-backend-state: starting``."""
    return response.status_code == 503 and response.headers.get("x-backend-state", "").lower() == "starting"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounds on retries: ``attempts`` tries per request, backoff ``backoff * 2**(n-1)`` capped at
    ``max_backoff`` seconds (after a connection failure or a 5xx without ``Retry-After``),
    ``Retry-After`` capped at ``max_retry_after``, "starting" waited out for ``starting_timeout``
    seconds by the clock, ``resume_attempts`` resumes of a dropped /call stream. Waits after an error
    answer are at least ``MIN_RETRY_WAIT``."""

    attempts: int = 3
    backoff: float = 0.5
    max_backoff: float = 10.0
    max_retry_after: float = 60.0
    starting_timeout: float = 600.0
    resume_attempts: int = 5

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be 1 or more (1: no retry), not {self.attempts}")
        if self.resume_attempts < 0:
            raise ValueError(f"resume_attempts must be 0 or more, not {self.resume_attempts}")
        for name in ("backoff", "max_backoff", "max_retry_after", "starting_timeout"):
            value = getattr(self, name)
            if not value >= 0 or value == float("inf"):
                raise ValueError(f"{name} must be a finite number of seconds, 0 or more, not {value}")

    def backoff_for(self, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt + 1``."""
        return float(min(self.max_backoff, self.backoff * 2 ** max(0, attempt - 1)))

    def wait_after(
        self,
        response: httpx2.Response,
        attempt: int,
        starting_since: float | None = None,
        *,
        first_call: bool = False,
    ) -> float | None:
        """Seconds to wait before trying again after this error answer, or None when it is final.

        ``attempt``: the tries made so far. ``starting_since``: ``time.monotonic()`` when this request
        first got "starting" (None if it has not). ``first_call``: the request is a /call with no
        task_id yet, which is tried again only after an answer that proves the tool did not run.
        """
        if is_starting(response):
            retry_after = retry_after_seconds(response.headers.get("retry-after"))
            elapsed = 0.0 if starting_since is None else time.monotonic() - starting_since
            left = self.starting_timeout - elapsed
            if left <= 0:
                return None
            wait = STARTING_WAIT if retry_after is None else retry_after
            return min(max(MIN_RETRY_WAIT, min(wait, self.max_retry_after)), left)
        statuses = CALL_RETRY_STATUSES if first_call else RETRY_STATUSES
        if response.status_code not in statuses or attempt >= self.attempts:
            return None
        return self.pause_after(response, attempt)

    def pause_after(self, response: httpx2.Response, attempt: int) -> float:
        """Seconds to wait after this error answer when it is tried again: its ``Retry-After`` (capped
        at ``max_retry_after``), else the backoff for ``attempt``; never less than ``MIN_RETRY_WAIT``."""
        retry_after = retry_after_seconds(response.headers.get("retry-after"))
        wait = self.backoff_for(attempt) if retry_after is None else retry_after
        return max(MIN_RETRY_WAIT, min(wait, self.max_retry_after))


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds: a number of seconds or an HTTP date; None if absent or invalid."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if seconds == seconds else None  # NaN is junk
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
