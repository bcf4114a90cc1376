"""The DataFrames of a run, built from the trace's rows; every frame's columns and dtypes are declared here.

Each builder takes a ``Source`` of trace rows: a loaded ``Trace``, read where it lies (its
``select``/``scan`` read only the columns and row groups a frame asks for), or an Arrow table (the
rows an evaluation keeps in memory, ``EvalResult``), so a run's episodes are the same frame however
they are looked at. The work is Arrow's (``pyarrow.compute``, ``Table.group_by`` with its ordered
"first"/"last", hash lookups by ``index_in`` for joins that keep the left order), over whole
columns; Python runs once per task (the exact mean and stderr, pass@k) or per call (its output
text), never per row, and pandas only takes the finished tables. ``episodes`` (with ``tasks``,
``errors``, ``summary`` and the viewer's ``listing``) reads the few kinds of rows an episode is made
of in one pass, a piece at a time, each kind slimmed to what is taken of it (``_EpisodeRows``); their
session ids, layers and kinds stay the file's dictionaries (kinds matched by their few values, the ids
integer codes from each piece's dictionary, made strings once, in the finished frame).
All columns are Arrow-backed (``pd.ArrowDtype``): nullable integers and booleans stay what they
are, strings stay Arrow strings.

- ``events``: every row; ``calls``: one row per tool call (the ``http``, ``sse`` and ``call``
  rows that share a session and call number); ``sessions``: one row per session that opened;
- ``steps``: one row per tool call that returned a result, numbered within its episode;
- ``episodes``: one row per episode (a session that opened, or an evaluation's episode that
  failed before its session did): what an evaluation recorded of it in its ``episode`` row, or,
  for a session no evaluation ran, its steps reduced as ``ors_lab.analysis.reduce`` decides;
- ``tasks``: one row per task, its episodes aggregated (mean reward, stderr, pass@k, ...);
- ``errors``: the episodes that failed; ``summary``: the run in one row (a ``Summary``: a one-row
  frame that shows itself as a short vertical table, each line a column's name and value, so what
  it shows is what indexes it);
- ``transcripts``: one row per turn of the agent, its streamed deltas joined into reasoning, text
  and tool calls (``ors_lab.transcript`` joins them, for the trace viewer too);
- ``listing``: what the trace viewer lists, one row per episode, built without the per-call frames
  so that a trace of many thousands of episodes opens at once.
"""

from ors_lab.analysis.frames.calls import calls_frame, events_frame, sessions_frame
from ors_lab.analysis.frames.columns import (
    CALLS_COLUMNS,
    EPISODES_COLUMNS,
    ERRORS_COLUMNS,
    FRAMES,
    LISTING_COLUMNS,
    SESSIONS_COLUMNS,
    STEPS_COLUMNS,
    SUMMARY_COLUMNS,
    TASKS_COLUMNS,
    TOKENS,
    TRANSCRIPTS_COLUMNS,
    pass_columns,
)
from ors_lab.analysis.frames.episodes import episodes_frame, finished_episodes, steps_frame
from ors_lab.analysis.frames.listing import listing_frame
from ors_lab.analysis.frames.source import RowReader, Source
from ors_lab.analysis.frames.summary import Summary, error_types, summary_frame, threshold_note
from ors_lab.analysis.frames.tasks import default_ks, errors_frame, tasks_frame
from ors_lab.analysis.frames.transcripts import transcripts_frame

__all__ = [
    "CALLS_COLUMNS",
    "EPISODES_COLUMNS",
    "ERRORS_COLUMNS",
    "FRAMES",
    "LISTING_COLUMNS",
    "SESSIONS_COLUMNS",
    "STEPS_COLUMNS",
    "SUMMARY_COLUMNS",
    "TASKS_COLUMNS",
    "TOKENS",
    "TRANSCRIPTS_COLUMNS",
    "RowReader",
    "Source",
    "Summary",
    "calls_frame",
    "default_ks",
    "episodes_frame",
    "error_types",
    "errors_frame",
    "events_frame",
    "finished_episodes",
    "listing_frame",
    "pass_columns",
    "sessions_frame",
    "steps_frame",
    "summary_frame",
    "tasks_frame",
    "threshold_note",
    "transcripts_frame",
]
