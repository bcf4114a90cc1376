"""Recording, the writing side of traces: the ``Recorder`` (a subscriber), the declared schema,
redaction, parts and their compaction, and trace merging (the recording proxy is ``ors_lab.replay.proxy``)."""

from ors_lab.recording.recorder import Recorder
from ors_lab.recording.schema import SCHEMA, SCHEMA_VERSION

__all__ = ["SCHEMA", "SCHEMA_VERSION", "Recorder"]
