"""A trace's files: the compacted Parquet file, and the parts of one being written.

While a trace at ``PATH`` is recorded, its rows land in ``PATH.parts/part-NNNNNNNNN.arrow``
(Arrow IPC, each written to a hidden temporary name and renamed, so a part is whole or absent); a
finished trace appended to becomes ``PATH.parts/part-000000000.parquet`` among them. ``close()``
compacts them into ``PATH``. This module names them and reads them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ors_lab.protocol.errors import TraceFormatError
from ors_lab.recording.schema import METADATA_SCHEMA_VERSION, METADATA_SERVERS, READABLE_VERSIONS

__all__ = ["PART", "PART_GLOB", "check_appendable", "part_format", "part_schema", "parts_dir", "read_part", "reopen"]

PART_GLOB = "part-*"  # part-NNNNNNNNN.arrow, and .parquet: a compacted trace appended to
PART = ".arrow"


def parts_dir(path: Path) -> Path:
    """Where the parts of the trace at ``path`` live while it is being written."""
    return path.with_name(path.name + ".parts")


def read_part(path: Path, columns: list[str] | None = None) -> pa.Table:
    """One part of an unfinished trace (an Arrow IPC ``.arrow`` file, or a ``.parquet`` one), as written
    (``upgrade`` it to this schema version before mixing it with others)."""
    if path.suffix == PART:
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_file(source).read_all()  # memory-mapped: selecting columns copies nothing
        return table if columns is None else table.select(columns)
    return pq.read_table(path, columns=columns)  # a compacted trace appended to can be large: read only these


def part_schema(path: Path) -> pa.Schema:
    """The schema (and metadata) of one part, without reading its rows."""
    if path.suffix == PART:
        with pa.memory_map(str(path)) as source:
            return pa.ipc.open_file(source).schema
    return pq.read_schema(path)


def part_format(path: Path) -> str:
    """The file format of a part, by its name, for messages."""
    return "Arrow IPC" if path.suffix == PART else "Parquet"


def reopen(path: Path, parts: Path) -> tuple[int, int, int, set[str]]:
    """Make the trace at ``path`` (compacted, or the parts of a killed run) parts again, to append to.

    Returns the next part number, the next sequence number, the next ``t_ns`` and the servers seen.
    A compacted file becomes the first part (renamed: whole or absent, at any moment).
    """
    parts.mkdir(parents=True, exist_ok=True)
    for stale in parts.glob(".part-*.tmp"):  # a part half-written when the process died
        stale.unlink()
    existing = sorted(parts.glob(PART_GLOB))
    if path.is_file():
        if existing:
            raise FileExistsError(f"{path} is a finished trace, yet {parts} holds parts too; remove one of them")
        check_appendable(path, part=False)
        target = parts / "part-000000000.parquet"  # a Parquet part among the Arrow ones: read_part reads both
        os.replace(path, target)
        existing = [target]
    if not existing:
        return 0, 0, 0, set()
    last_seq, last_ns = -1, -1
    for part in existing:
        check_appendable(part, part=True)
        table = read_part(part, columns=["seq", "t_ns"])
        if table.num_rows:
            last_seq = max(last_seq, int(pc.max(table["seq"]).as_py()))
            last_ns = max(last_ns, int(pc.max(table["t_ns"]).as_py()))
    metadata = part_schema(existing[-1]).metadata or {}
    servers = set(json.loads(metadata.get(METADATA_SERVERS, b"[]")))
    return int(existing[-1].name[5:14]) + 1, last_seq + 1, last_ns + 1, servers


def check_appendable(path: Path, *, part: bool) -> None:
    """Refuse to append to a file (a compacted trace, whatever its name, or a part) of no readable schema version."""
    try:
        metadata = (part_schema(path) if part else pq.read_schema(path)).metadata or {}
    except (pa.ArrowInvalid, OSError) as exc:
        kind = part_format(path) if part else "Parquet"
        raise TraceFormatError(f"cannot append to {path}: it is not a readable {kind} file ({exc})") from exc
    version = metadata.get(METADATA_SCHEMA_VERSION, b"").decode()
    if version not in READABLE_VERSIONS:
        raise TraceFormatError(
            f"cannot append to {path}: its trace schema version is {version or 'missing'}, this ors_lab reads "
            f"{', '.join(READABLE_VERSIONS)}"
        )
