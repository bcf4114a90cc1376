"""Recording, the writing side of traces: the ``Recorder`` (a subscriber), the declared schema,
redaction, parts and their compaction, and trace merging (the recording proxy is ``ors_lab.replay.proxy``).

The names load on first use: a recorder takes its first rows before pyarrow is imported (its writer thread
imports it to convert them)."""

from typing import TYPE_CHECKING

from ors_lab.lazy import lazy as _lazy

if TYPE_CHECKING:
    from ors_lab.recording.columns import SCHEMA_VERSION
    from ors_lab.recording.recorder import Recorder
    from ors_lab.recording.schema import SCHEMA

__all__ = ["SCHEMA", "SCHEMA_VERSION", "Recorder"]

__getattr__, __dir__ = _lazy(__name__, {
    "Recorder": "ors_lab.recording.recorder",
    "SCHEMA": "ors_lab.recording.schema",
    "SCHEMA_VERSION": "ors_lab.recording.columns",
})  # fmt: skip
