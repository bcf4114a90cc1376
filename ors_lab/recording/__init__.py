"""Recording: every wire event with its timing into Parquet traces, and reading them back."""

from ors_lab.recording.recorder import Recorder
from ors_lab.recording.schema import SCHEMA, SCHEMA_VERSION
from ors_lab.recording.trace import Trace, load_trace

__all__ = ["SCHEMA", "SCHEMA_VERSION", "Recorder", "Trace", "load_trace"]
