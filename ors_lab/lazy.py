"""Names a package gives that load on first use: what keeps ``import ors_lab`` (and the packages an evaluation's
first episode needs) free of pandas, pyarrow, uvicorn and the other heavy libraries until something asks for them.

    __getattr__, __dir__ = lazy(__name__, {"Trace": "ors_lab.analysis.trace", ...})

It imports nothing of ours, so every layer may use it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy"]


def lazy(package: str, names: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the module ``package``: each of ``names`` imported from the module it
    maps to when first read (then kept in the module, so the next read costs nothing)."""

    def __getattr__(name: str) -> Any:
        where = names.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return __getattr__, __dir__
