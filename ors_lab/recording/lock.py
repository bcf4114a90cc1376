"""One writer per trace: the lock a recorder holds in its parts folder while it writes.

A ``Recorder`` takes ``PATH.parts/.lock`` before it touches anything of the trace at ``PATH``
(before appending reopens it, before ``overwrite=True`` removes it) and holds it until ``close()``
has compacted the parts and removed the folder. A second recorder on the same trace, in this
process or another, gets ``TraceLockedError`` naming the holder: its pid, host, run id and since when.

The lock is ``fcntl.flock`` on the lock file, not the file's existence: the kernel releases a
flock when its holder dies, however it dies (SIGKILL, a dead kernel, a full disk), so a crashed
recorder's lock never blocks the next one, and no pid has to be checked for liveness (a pid can be
reused; a pid means nothing on another host sharing the folder). The file's content, the holder's
JSON, is only for the message. Two ``open()`` calls in one process conflict as two processes do
(a flock belongs to the open file description), so two recorders in two threads are refused too.

Where ``flock`` is missing (Windows) or refused by the file system (some network mounts), the
recorder goes on without a lock and logs a warning once: one writer per trace is then the user's
own care.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

from ors_lab.protocol.errors import TraceLockedError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["LOCK_NAME", "TraceLock", "holder_of"]

log = logging.getLogger("ors_lab.recording")

LOCK_NAME = ".lock"
_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class TraceLock:
    """The lock on the trace at ``path`` (in ``parts``), taken by ``acquire`` and given back by ``release``."""

    def __init__(self, path: Path, parts: Path, *, run_id: str) -> None:
        self.path = path
        self.file = parts / LOCK_NAME
        self.run_id = run_id
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, creating the parts folder if need be; ``TraceLockedError`` if another writer holds it."""
        if fcntl is None:  # pragma: no cover - Windows
            log.warning("ors_lab: no file locks on this platform; %s is not guarded against a second writer", self.path)
            return
        for _ in range(100):  # the folder may be removed under us by a writer closing: try again
            self.file.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(self.file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read(fd)
                os.close(fd)
                raise _locked(self.path, holder) from None
            except OSError as exc:
                os.close(fd)
                if exc.errno not in _UNSUPPORTED:
                    raise
                log.warning("ors_lab: %s cannot be locked (%s); it is not guarded against a second writer",
                            self.path, exc)  # fmt: skip
                return
            # the file we locked may have been removed (with its folder) by the writer that held it: then
            # the lock is on a file no one else will open; lock the one at the path now
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.file))
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps(self._holder()).encode())
            self._fd = fd
            return
        raise TraceLockedError(f"cannot take the lock {self.file}: its folder keeps being removed", path=str(self.path))

    def _holder(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "run_id": self.run_id,
        }

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self, *, remove: bool = False) -> None:
        """Give the lock back (``remove``: delete the lock file first, when the parts folder goes too)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if remove:
            self.file.unlink(missing_ok=True)
        os.close(fd)  # closing the last descriptor releases the flock


def holder_of(parts: Path) -> dict[str, Any] | None:
    """What the lock file in ``parts`` says of its writer (None when there is none or it is unreadable).

    It says who took the lock last: whether that writer still holds it only ``acquire`` can tell."""
    try:
        fd = os.open(parts / LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _read(fd)
    finally:
        os.close(fd)


def _read(fd: int) -> dict[str, Any] | None:
    try:
        raw = os.pread(fd, 4096, 0)
        value = json.loads(raw)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _locked(path: Path, holder: dict[str, Any] | None) -> TraceLockedError:
    if holder is None:
        who = "another writer (it has not said who yet)"
    else:
        who = (
            f"process {holder.get('pid', '?')} on {holder.get('host', '?')} (run {holder.get('run_id', '?')}), "
            f"recording since {holder.get('since', '?')}"
        )
    return TraceLockedError(
        f"{path} is being recorded by {who}: one writer per trace at a time. Wait for that run to finish "
        "(its close() compacts the trace), or record into another path",
        path=str(path),
        holder=holder,
    )
