"""An import-linter contract of our own: no private name is imported across the packages of ``ors_lab``.

A package is ``ors_lab.<name>`` (a subpackage, or a top-level module such as ``ors_lab.events``).
Inside one, modules share what they like; across two, only public names travel: importing a name
that starts with ``_`` (not a dunder), or any module whose path has a part starting with ``_``, from
another package breaks the contract. ``make test`` runs it with the layers contract
(``[tool.importlinter]`` in pyproject.toml).
"""

from __future__ import annotations

import ast
import importlib.util
from functools import cache
from typing import Any

from importlinter import Contract, ContractCheck, fields, output

__all__ = ["PrivateImportsContract"]


def _package(module: str, root: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == root and len(parts) > 1 else module


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@cache
def _imports_at(module: str) -> dict[int, list[tuple[str, str]]]:
    """Line number -> the (module, name) pairs its ``from ... import`` or ``import`` statement names."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return {}
    with open(spec.origin, encoding="utf-8") as source:
        tree = ast.parse(source.read(), spec.origin)
    found: dict[int, list[tuple[str, str]]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.setdefault(node.lineno, []).extend((node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.setdefault(node.lineno, []).extend((alias.name, "") for alias in node.names)
    return found


class PrivateImportsContract(Contract):
    """No module imports a private name, or a private module, from another package of ``root``."""

    root = fields.StringField()

    def check(self, graph: Any, verbose: bool) -> ContractCheck:
        root = str(self.root)
        broken: list[str] = []
        for importer in sorted(graph.find_descendants(root) | {root}):
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                if not imported.startswith(root + ".") or _package(importer, root) == _package(imported, root):
                    continue
                for detail in graph.get_import_details(importer=importer, imported=imported):
                    for module, name in _imports_at(importer).get(detail["line_number"], []):
                        if not (module == imported or module.startswith(imported + ".")):
                            continue
                        names = [*module.split(".")[1:], *([name] if name else [])]
                        private = [part for part in names if _private(part)]
                        if private:
                            where = f"{importer}:{detail['line_number']}"
                            broken.append(f"{where} imports {', '.join(private)} from {module}")
        return ContractCheck(kept=not broken, metadata={"broken": sorted(set(broken))})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for line in check.metadata["broken"]:
            output.print_error(f"- {line}", bold=False)
            output.new_line()
