"""Trace merging: one trace's rows appended to another's, as one file (the pytest plugin's new episodes)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ors_lab.recording.columns import METADATA_SERVERS

__all__ = ["write_appended"]


def write_appended(old: pa.Table, new: pa.Table, out: Path, *, compression: str = "zstd") -> None:
    """Write ``old``'s rows, then ``new``'s, to the Parquet file ``out``.

    ``new``'s ``seq`` and ``exchange`` are numbered on from ``old``'s (so both stay unique); its
    rows keep their own ``run_id`` and ``t_ns``. The file takes ``new``'s metadata, with the
    servers of both.
    """
    table = new
    for column in ("seq", "exchange"):
        top = pc.max(old[column]).as_py()
        base = 0 if top is None else int(top) + (1 if column == "seq" else 0)
        index = table.schema.get_field_index(column)
        table = table.set_column(index, table.schema.field(column), pc.add(table[column], base))
    metadata = dict(new.schema.metadata or {})
    servers = [*_servers(old), *_servers(new)]
    metadata[METADATA_SERVERS] = json.dumps(list(dict.fromkeys(servers))).encode()
    merged = pa.concat_tables([old.replace_schema_metadata(metadata), table.replace_schema_metadata(metadata)])
    pq.write_table(merged, out, compression=compression)


def _servers(table: pa.Table) -> list[str]:
    return list(json.loads((table.schema.metadata or {}).get(METADATA_SERVERS, b"[]")))
