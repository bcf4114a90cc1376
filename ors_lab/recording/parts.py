"""A trace's files: the compacted Parquet file, and the parts of one being written.

While a trace at ``PATH`` is recorded, its rows land in ``PATH.parts/part-NNNNNNNNN.arrow``
(Arrow IPC, each written to a hidden temporary name and renamed, so a part is whole or absent); a
finished trace appended to becomes ``PATH.parts/part-000000000.parquet`` among them. ``close()``
compacts them into ``PATH``. The writer holds ``PATH.parts/.lock`` (``ors_lab.recording.lock``).
This module names them (``ors_lab.recording.reading`` reads them), with no Arrow: a recorder finds its
parts and its lock before pyarrow is imported.

Only names ``part-`` + nine digits + ``.arrow`` or ``.parquet`` are parts: hidden temporary files
(``.part-*.tmp``), the lock and anything else in the folder are not read.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from ors_lab.protocol.errors import TraceFormatError
from ors_lab.recording.columns import METADATA_SCHEMA_VERSION, METADATA_SERVERS, READABLE_VERSIONS

__all__ = [
    "BAD_PART_HINT",
    "PART",
    "PART_GLOB",
    "check_metadata",
    "part_files",
    "part_format",
    "parts_dir",
    "remove_stale",
]

PART_GLOB = "part-*"  # part-NNNNNNNNN.arrow, and .parquet: a compacted trace appended to
PART = ".arrow"
PART_NAME = re.compile(r"part-(\d{9})\.(arrow|parquet)")
BAD_PART_HINT = (
    "move it out of the parts folder to go on without its rows, or read the other parts with "
    "load_trace(path, skip_bad_parts=True)"
)


def parts_dir(path: Path) -> Path:
    """Where the parts of the trace at ``path`` live while it is being written."""
    return path.with_name(path.name + ".parts")


def part_files(parts: Path) -> list[Path]:
    """The parts in ``parts``, in order (only ``part-NNNNNNNNN.arrow`` / ``.parquet``: no temporary file)."""
    try:
        names = [entry.name for entry in os.scandir(parts) if PART_NAME.fullmatch(entry.name)]
    except FileNotFoundError:
        return []
    return [parts / name for name in sorted(names)]


def part_format(path: Path) -> str:
    """The file format of a part, by its name, for messages."""
    return "Arrow IPC" if path.suffix == PART else "Parquet"


def check_metadata(path: Path, metadata: dict[bytes, bytes] | None, kind: str = "Parquet") -> dict[str, Any]:
    """A trace file's ``ors_lab.*`` metadata, decoded and checked: ``TraceFormatError`` naming the file,
    the key and what is wrong (a version this ors_lab cannot read, text that is not UTF-8, servers
    that are not a JSON list of strings)."""
    metadata = metadata or {}
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if not key.startswith(b"ors_lab."):
            continue
        try:
            out[key.decode()] = value.decode()
        except UnicodeDecodeError as exc:
            raise TraceFormatError(f"{path} has metadata {key!r} that is not UTF-8 text ({exc})") from exc
    version = out.get(METADATA_SCHEMA_VERSION.decode())
    if version is None:
        raise TraceFormatError(f"{path} is {kind} but not an ors_lab trace (no schema version in its metadata)")
    if version not in READABLE_VERSIONS:
        raise TraceFormatError(
            f"{path} has trace schema version {version}; this ors_lab reads versions {', '.join(READABLE_VERSIONS)}"
        )
    servers_key = METADATA_SERVERS.decode()
    try:
        servers = json.loads(out.get(servers_key, "[]"))
    except ValueError as exc:
        raise TraceFormatError(f"{path} has metadata {servers_key} that is not JSON: {exc}") from exc
    if not (isinstance(servers, list) and all(isinstance(s, str) for s in servers)):
        raise TraceFormatError(f"{path} has metadata {servers_key} that is not a JSON list of URLs: {servers!r:.80}")
    out[servers_key] = servers
    return out


def remove_stale(path: Path, parts: Path) -> None:
    """Remove what a writer killed mid-write left (half-written parts, a half-compacted file).

    Call it only holding the trace's lock: then no live writer owns them."""
    for stale in (*parts.glob(".part-*.tmp"), path.with_name(f".{path.name}.tmp")):
        stale.unlink(missing_ok=True)
