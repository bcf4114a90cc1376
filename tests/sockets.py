"""A process's sockets, counted for real from ``/proc``: its socket file descriptors, and those of them
connected to a port (``/proc/net/tcp``). Linux only, as the tests and benchmarks are."""

from __future__ import annotations

import os
from pathlib import Path


def socket_inodes(pid: int | str = "self") -> set[str]:
    """The inodes of a process's sockets, from its ``/proc/PID/fd``."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def sockets_to(port: int) -> set[str]:
    """The inodes of this process's TCP sockets to ``port`` on any IPv4 host (its socket fds in ``/proc/net/tcp``)."""
    mine = socket_inodes()
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[9] in mine and int(fields[2].rsplit(":", 1)[1], 16) == port:
            found.add(fields[9])
    return found


def connections_to(port: int) -> int:
    """How many TCP sockets this process has to ``port`` on any IPv4 host."""
    return len(sockets_to(port))
