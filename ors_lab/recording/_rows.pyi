"""Types of the C extension ``_rows.c``: the recorder's hot path."""

from typing import Any

INT64: int
INT32: int
FLOAT64: int
BOOL: int
STRING: int
LARGE_STRING: int
LARGE_BINARY: int

class Rows:
    _sessions: dict[Any, tuple[Any, ...]]
    _calls: dict[Any, dict[int, tuple[Any, Any]]]
    _urls: dict[Any, tuple[str, bool]]
    @property
    def _header_items(self) -> int: ...
    _error: BaseException | None
    _t0: int
    _next_seq: int
    _part_rows: int
    _closing: bool
    _patterns: bool
    @property
    def _waiting(self) -> int: ...
    def emit(self, kind: str, /, **fields: Any) -> None:
        """Record one event now. ``fields`` are column values (see docs/trace-format.md)."""
    def _setup(
        self,
        columns: list[tuple[str, int]],
        stamped: tuple[str, ...],
        kind_layer: dict[str, str],
        agent_layer: str,
        headers_type: type,
        json: Any,
    ) -> None: ...
    def _take(self) -> list[tuple[int, int, bytes | None, bytes, bytes | None]]: ...
