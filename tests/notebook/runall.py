"""Run a notebook's code cells the way JupyterLab's Run All does: every execute_request queued at once.

nbval and nbclient send one cell at a time and wait for its reply, which hides bugs that show only
when later cells already wait in the kernel's queue (nest_asyncio with ipykernel 7: "cannot enter
context ... is already entered", cells left at ``[*]``). This runner needs no browser: a kernel
from this venv, started in the notebook's directory, as the notebook's own kernel would be.

    run = run_queued(Path("notebooks/02-evaluate.ipynb"))
    assert not run.problems, run.report()

or, from a shell: ``python -m tests.notebook.runall NOTEBOOK [TIMEOUT_S]`` (exit 1 on a problem).
Any error, any stderr output, a cell that never finished and a missing final marker line are
problems (strict on purpose: a notebook a person runs should print no warning).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty
from typing import Any

import nbformat
from jupyter_client.manager import start_new_kernel

MARKER = "notebook ok"
"""What every notebook's last cell prints: it ran to the end."""


@dataclass
class QueuedRun:
    """What a queued run saw: code cells, seconds from the first request, stdout per cell, problems."""

    path: Path
    cells: int = 0
    seconds: float = 0.0
    stdout: dict[int, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def report(self) -> str:
        """The run in a few lines, its problems listed."""
        lines = [
            f"{self.path.name}: {self.cells} code cells queued, {self.seconds:.1f} s, {len(self.problems)} problem(s)"
        ]
        return "\n".join(lines + [f"  {problem}" for problem in self.problems])


def run_queued(path: Path, *, timeout: float = 300.0, marker: str = MARKER) -> QueuedRun:
    """Queue every code cell of the notebook at ``path`` in a fresh kernel at once; wait for them all."""
    notebook = nbformat.read(path, as_version=4)
    sources = [cell.source for cell in notebook.cells if cell.cell_type == "code"]
    run = QueuedRun(path=path, cells=len(sources))
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(path.parent.resolve()))
    started = time.monotonic()
    try:
        ids = {client.execute(source, allow_stdin=False, stop_on_error=True): i for i, source in enumerate(sources)}
        _collect(client, ids, run, deadline=started + timeout)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    run.seconds = time.monotonic() - started
    last = len(sources) - 1
    if marker and marker not in run.stdout.get(last, ""):
        run.problems.append(f"the last cell (cell {last}) did not print {marker!r}")
    return run


def _collect(client: Any, ids: dict[str, int], run: QueuedRun, *, deadline: float) -> None:
    """Read iopub and shell until every cell replied and went idle (or the kernel wedged, or time ran out)."""
    idle: set[str] = set()
    replies: dict[str, str] = {}
    quiet = 0
    while time.monotonic() < deadline:
        while True:  # the replies: ok, error, or aborted (queued behind a cell that failed)
            try:
                reply = client.get_shell_msg(timeout=0)
            except Empty:
                break
            parent = reply["parent_header"].get("msg_id")
            if parent in ids:
                replies[parent] = reply["content"]["status"]
        if len(replies) == len(ids) and all(p in idle or status == "aborted" for p, status in replies.items()):
            break
        try:
            message = client.get_iopub_msg(timeout=0.2)
        except Empty:
            quiet += 1
            if run.problems and quiet >= 25:  # an error seen, and 5 s of silence: the kernel is wedged
                break
            continue
        quiet = 0
        parent, kind, content = message["parent_header"].get("msg_id"), message["msg_type"], message["content"]
        cell = ids.get(parent)
        if kind == "error":
            run.problems.append(f"cell {cell}: {content['ename']}: {content['evalue']}")
        elif kind == "stream" and content["name"] == "stderr":
            run.problems.append(f"cell {cell} wrote to stderr: {content['text'][:300]!r}")
        elif kind == "stream" and cell is not None:
            run.stdout[cell] = run.stdout.get(cell, "") + content["text"]
        elif kind == "status" and content["execution_state"] == "idle" and parent in ids:
            idle.add(parent)
    aborted = sorted(ids[p] for p, status in replies.items() if status == "aborted")
    if aborted:
        run.problems.append(f"cells {aborted} did not run (an earlier cell failed)")
    unfinished = sorted(cell for p, cell in ids.items() if p not in idle and replies.get(p) != "aborted")
    if unfinished:
        run.problems.append(f"cells {unfinished} never finished (left at [*])")


def main(argv: list[str]) -> int:
    """``python -m tests.notebook.runall NOTEBOOK [TIMEOUT_S]``: print the run; 1 on any problem."""
    run = run_queued(Path(argv[0]), timeout=float(argv[1]) if len(argv) > 1 else 300.0)
    print(run.report())
    return 1 if run.problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
