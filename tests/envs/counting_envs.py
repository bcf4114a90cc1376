"""The `lab` test environment on ors-sdk, counting its live sessions where a test can read them.

Serve with `serve("tests.envs.counting_envs:ENVIRONMENTS", sdk="ors-sdk", env={LIVE_FILE_VAR: path, ...})`.
The server appends one line to the file at `path` when a session's environment is set up (`+ID`)
and one when it is torn down (`- ID`): what the server itself holds, whatever the client believes.
`live_sessions(path)` reads the count, `sessions_made(path)` how many were set up. Tasks, tools and
rewards are those of `tests/envs/ors_sdk_envs.py`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from pathlib import Path

from ors import Environment, JSONObject

from tests.envs import ors_sdk_envs

LIVE_FILE_VAR = "ORS_LAB_TEST_LIVE_SESSIONS"
"""The environment variable naming the file the server writes its session count to."""


def live_sessions(path: str | os.PathLike[str]) -> set[str]:
    """The sessions the server holds: set up and not yet torn down, as the file at `path` records them."""
    try:
        lines = Path(path).read_text().split()
    except FileNotFoundError:
        return set()
    made = {line[1:] for line in lines if line.startswith("+")}
    gone = {line[1:] for line in lines if line.startswith("-")}
    return made - gone


def sessions_made(path: str | os.PathLike[str]) -> int:
    """How many sessions the server has set up so far, as the file at `path` records them."""
    try:
        return sum(line.startswith("+") for line in Path(path).read_text().split())
    except FileNotFoundError:
        return 0


def _mark(line: str) -> None:
    """Append one line (a single small O_APPEND write: whole even with concurrent writers)."""
    fd = os.open(os.environ[LIVE_FILE_VAR], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


class Lab(ors_sdk_envs.Lab):
    """`lab` (the same name, tasks and tools), recording each session's setup and teardown."""

    def __init__(self, task_spec: JSONObject | None = None, secrets: Mapping[str, str] | None = None) -> None:
        """As `ors_sdk_envs.Lab`, with an id for the count."""
        super().__init__(task_spec=task_spec, secrets=secrets)
        self.mark = uuid.uuid4().hex

    def setup(self) -> None:
        """The server made the session: count it."""
        _mark(f"+{self.mark}")

    def teardown(self) -> None:
        """The server dropped the session: uncount it."""
        _mark(f"-{self.mark}")


ENVIRONMENTS: list[type[Environment]] = [Lab]
