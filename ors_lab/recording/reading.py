"""Reading a trace's files (``ors_lab.recording.parts`` names them): every file is read whole into memory, never
memory-mapped, and validated before any of it is used (``Table.validate(full=True)``: offsets, lengths, UTF-8): a
part changed on disk, by a bad block, a bad copy or a hand, is a ``TraceFormatError`` naming the file and what is
wrong, never a crash. And reopening a trace to append to it (``reopen``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ors_lab.protocol.errors import TraceFormatError
from ors_lab.recording.columns import METADATA_SCHEMA_VERSION, METADATA_SERVERS
from ors_lab.recording.parts import BAD_PART_HINT, check_metadata, part_files, part_format, remove_stale
from ors_lab.recording.schema import kind_mask, upgrade

__all__ = [
    "check_appendable",
    "part_schema",
    "read_checked",
    "read_part",
    "read_trace_file",
    "reopen",
    "select_rows",
]


def read_part(path: Path, columns: list[str] | None = None) -> pa.Table:
    """One part of an unfinished trace (an Arrow IPC ``.arrow`` file, or a ``.parquet`` one), as written
    (``upgrade`` it to this schema version before mixing it with others), read whole and validated.

    ``TraceFormatError`` names the part and what is wrong with it."""
    return _read(path, part_format(path), columns, hint=BAD_PART_HINT)


def read_trace_file(path: Path, columns: list[str] | None = None) -> pa.Table:
    """A compacted trace (Parquet, whatever its name), read and validated; ``TraceFormatError`` if unreadable."""
    return _read(path, "Parquet", columns, hint="")


def _read(path: Path, kind: str, columns: list[str] | None, *, hint: str) -> pa.Table:
    try:
        if kind == "Arrow IPC":
            # read into memory, not mapped: a corrupt offset in a mapped file reads past its end (SIGSEGV)
            with pa.ipc.open_file(pa.py_buffer(path.read_bytes())) as reader:
                table = reader.read_all()
            if columns is not None:
                table = table.select(columns)
        else:
            table = pq.read_table(path, columns=columns)
        table.validate(full=True)
    except FileNotFoundError:
        raise
    except Exception as exc:  # whatever a damaged file makes the reader raise: pyarrow's errors, MemoryError, ...
        detail = f"; {hint}" if hint else ""
        raise TraceFormatError(f"{path} is not a readable {kind} file: {exc}{detail}") from exc
    return table


def read_checked(path: Path, *, part: bool) -> pa.Table:
    """A part (``part=True``) or a compacted trace, read, validated, its metadata checked, and made this
    schema version (``upgrade``): the one way every reader of trace files takes. ``TraceFormatError``
    names the file and what is wrong with it."""
    table = read_part(path) if part else read_trace_file(path)
    kind = part_format(path) if part else "Parquet"
    metadata = check_metadata(path, table.schema.metadata, kind)
    try:
        return upgrade(table, metadata[METADATA_SCHEMA_VERSION.decode()])
    except ValueError as exc:
        raise TraceFormatError(f"{path} {exc}" + (f"; {BAD_PART_HINT}" if part else "")) from exc


def select_rows(table: pa.Table, columns: Sequence[str], kinds: Sequence[str] | None = None) -> pa.Table:
    """The rows of ``table`` of ``kinds`` (all when None), with ``columns`` only, in that order."""
    if kinds is None:
        return table.select(list(columns))
    kept = table.select(list(dict.fromkeys([*columns, "kind"])))  # what is filtered: these columns only
    return kept.filter(kind_mask(kept["kind"], kinds)).select(list(columns))


def part_schema(path: Path) -> pa.Schema:
    """The schema (and metadata) of one part, without reading its rows; ``TraceFormatError`` if unreadable."""
    kind = part_format(path)
    try:
        if kind == "Arrow IPC":
            with pa.OSFile(str(path)) as source, pa.ipc.open_file(source) as reader:
                return reader.schema
        return pq.read_schema(path)
    except FileNotFoundError:
        raise
    except Exception as exc:
        raise TraceFormatError(f"{path} is not a readable {kind} file: {exc}; {BAD_PART_HINT}") from exc


def reopen(path: Path, parts: Path) -> tuple[int, int, int, set[str]]:
    """Make the trace at ``path`` (compacted, or the parts of a killed run) parts again, to append to.

    Returns the next part number, the next sequence number, the next ``t_ns`` and the servers seen.
    A compacted file becomes the first part (renamed: whole or absent, at any moment). Call it
    holding the trace's lock. Every part is read and validated first: a bad one is a
    ``TraceFormatError`` naming it, and nothing is changed.
    """
    parts.mkdir(parents=True, exist_ok=True)
    remove_stale(path, parts)
    existing = part_files(parts)
    if path.is_file():
        if existing and _compacted_from(path, existing):  # killed after compacting, before removing the parts
            for part in existing:
                part.unlink()
            existing = []
        if existing:
            raise FileExistsError(f"{path} is a finished trace, yet {parts} holds parts too; remove one of them")
        check_appendable(path, part=False)
        target = parts / "part-000000000.parquet"  # a Parquet part among the Arrow ones: read_part reads both
        os.replace(path, target)
        existing = [target]
    if not existing:
        return 0, 0, 0, set()
    last_seq, last_ns = -1, -1
    servers: set[str] = set()
    for part in existing:
        servers |= set(check_appendable(part, part=True))
        table = read_checked(part, part=True)  # whole: a damaged part is found now, not when close() compacts
        if table.num_rows:
            last_seq = max(last_seq, int(pc.max(table["seq"]).as_py()))
            last_ns = max(last_ns, int(pc.max(table["t_ns"]).as_py()))
    return int(existing[-1].name[5:14]) + 1, last_seq + 1, last_ns + 1, servers


def _compacted_from(path: Path, parts: list[Path]) -> bool:
    """True when the compacted trace ``path`` holds exactly the rows of ``parts`` (their run and seq, in order)."""
    try:
        compacted = read_trace_file(path, columns=["run_id", "seq"])
        tables = [read_part(part, columns=["run_id", "seq"]) for part in parts]
    except TraceFormatError:
        return False
    try:
        together = pa.concat_tables([table.cast(compacted.schema) for table in tables])
    except pa.ArrowException:
        return False
    return bool(together.num_rows == compacted.num_rows and together.equals(compacted))


def check_appendable(path: Path, *, part: bool) -> list[str]:
    """Refuse to append to a file (a compacted trace, whatever its name, or a part) of no readable schema
    version or unreadable metadata; returns the servers it names."""
    kind = part_format(path) if part else "Parquet"
    if part:
        schema = part_schema(path)  # its error names the part and what to do
    else:
        try:
            schema = pq.read_schema(path)
        except Exception as exc:
            raise TraceFormatError(f"cannot append to {path}: it is not a readable {kind} file ({exc})") from exc
    try:
        metadata = check_metadata(path, schema.metadata, kind)
    except TraceFormatError as exc:
        raise TraceFormatError(f"cannot append: {exc}") from exc
    servers: list[str] = metadata[METADATA_SERVERS.decode()]
    return servers
