"""What ors_lab's replay adds to the protocol: one header, ``x-ors-lab-replay``, in both directions.

- **A mismatch.** A request the replay has no recorded answer for gets HTTP 400 with
  ``x-ors-lab-replay: mismatch`` and a JSON body: ``detail`` (the whole message), ``asked`` (the
  request as the replay saw it), ``differs`` (where it differs from the recorded one:
  ``body.model: "a" != recorded "b"``), ``nearest`` (the nearest unplayed recorded requests) and
  ``trace`` (the trace replayed). ``mismatch_error`` turns it into a ``ReplayMismatchError``.
- **The recorded episodes.** ``POST /{env}/num_tasks`` sent with ``x-ors-lab-replay: episodes`` is
  answered by a replay with its recorded answer plus ``recorded_episodes``: the ``[task index,
  rollout]`` pairs the trace holds for that split, sorted. Any other server ignores the header and
  answers as to any ``num_tasks``, so a client may ask any server
  (``AsyncEnvironment.recorded_episodes``); ``evaluate(..., tasks=None)`` does, and against a replay
  runs the episodes it holds rather than every task of the split.
- **The rollout of a session.** ``POST /create`` sent with ``x-ors-lab-replay: rollout=N`` (an
  evaluation's episodes send it) is given, by a replay, the recorded session of that task's rollout N
  when the trace's ``episode`` rows name one still unclaimed; otherwise, and by any other server, the
  header is ignored. Without it a replay hands out a task's sessions in recorded order, so two rollouts
  of a task opened at once could each get the other's, and meet its recorded calls.
"""

from __future__ import annotations

from typing import Any

from ors_lab.protocol.errors import ReplayMismatchError

__all__ = ["EPISODES", "MISMATCH", "RECORDED_EPISODES", "REPLAY_HEADER", "ROLLOUT", "mismatch_error", "rollout_of"]

REPLAY_HEADER = "x-ors-lab-replay"
MISMATCH = "mismatch"
"""The header's value on a mismatch answer."""
EPISODES = "episodes"
"""The header's value on a ``num_tasks`` request that asks for the recorded episodes."""
RECORDED_EPISODES = "recorded_episodes"
"""The key a replay adds to its ``num_tasks`` answer when asked for the episodes."""
ROLLOUT = "rollout="
"""The header's value on a ``/create``, before the rollout's number: ``rollout=2``."""


def rollout_of(value: str | None) -> int | None:
    """The rollout a ``/create``'s header value names (``rollout=2``), or None (no header, another value)."""
    if value is None or not value.startswith(ROLLOUT):
        return None
    number = value[len(ROLLOUT) :]
    return int(number) if number.isdigit() else None


def mismatch_error(status_code: int, body: Any, **context: Any) -> ReplayMismatchError:
    """The ``ReplayMismatchError`` for a replay's mismatch answer, from its JSON body (or its text)."""
    fields = body if isinstance(body, dict) else {}
    detail = fields.get("detail", body)
    nearest = fields.get("nearest")
    return ReplayMismatchError(
        str(detail),
        status_code=status_code,
        detail=detail,
        asked=_text(fields.get("asked")),
        differs=_text(fields.get("differs")),
        nearest=[str(item) for item in nearest] if isinstance(nearest, list) else [],
        trace=_text(fields.get("trace")),
        **context,
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
