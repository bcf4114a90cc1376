"""The public face of the package: what `import ors_lab` gives, and what it costs."""

from __future__ import annotations

import subprocess
import sys

import ors_lab


def test_all_is_sorted_and_complete() -> None:
    """`__all__` is sorted, and every name in it exists."""
    assert ors_lab.__all__ == sorted(ors_lab.__all__)
    for name in ors_lab.__all__:
        assert hasattr(ors_lab, name), name


def test_public_names() -> None:
    """The names the design promises are exported."""
    expected = {"Client", "AsyncClient", "ToolResult", "ToolOutput", "TextBlock", "ImageBlock", "Task", "Split"}
    assert expected <= set(ors_lab.__all__)


def test_import_stays_light() -> None:
    """`import ors_lab` loads no pandas, IPython, ipywidgets, uvicorn or reference-server SDK."""
    code = "import sys, ors_lab; print(sorted(m for m in ('pandas', 'IPython', 'ipywidgets', 'uvicorn', 'ors', "
    code += "'openreward', 'nest_asyncio2') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"
