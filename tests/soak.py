"""How many seeded cases the long hostile tests run: a few by default, all of them with ``ORS_LAB_SOAK=1``.

The seeded interrupts and kills (``tests/hostile/test_interrupts.py``, ``test_kill_resume.py``) are
soak tests: each case is one more moment of the same run. ``make test`` runs a few, spread over the
whole run as the full set is, so that it stays within its time; ``ORS_LAB_SOAK=1 make test`` runs
every case, as before a release or after a change to interrupts, sessions or the recorder.
"""

from __future__ import annotations

import os

__all__ = ["SOAK", "cases"]

SOAK = os.environ.get("ORS_LAB_SOAK", "").strip() not in ("", "0")


def cases(full: int, default: int) -> int:
    """``full`` under ``ORS_LAB_SOAK=1``, else ``default``."""
    return full if SOAK else default
