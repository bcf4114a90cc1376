"""Reading traces back: `load_trace` answers a path that holds no trace with TraceFormatError."""

from __future__ import annotations

import pytest

import ors_lab


@pytest.mark.parametrize("path", ["", "."])
def test_a_path_without_a_file_name_is_no_trace(path: str) -> None:
    """`load_trace("")` and `load_trace(".")` raise TraceFormatError ("no trace at ..."), not a pathlib ValueError."""
    with pytest.raises(ors_lab.TraceFormatError, match="no trace at"):
        ors_lab.load_trace(path)
