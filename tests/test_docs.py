"""The documentation's examples are tests: every block of README.md and docs/*.md runs as written.

Sybil finds the fenced blocks; each is one test (its id is the file and the block's line), tested
as what it is:

- A ``python`` block runs in a fresh interpreter, as if pasted into one: ``python example.py`` in a
  temporary directory holding a copy of the committed ``recordings/`` (so ``recordings/demo.parquet``
  is there, and nothing is written into the work tree), without ``$OPENAI_API_KEY`` or ors_lab's
  settings from the environment. It must exit 0. A block that needs a server starts the demo
  environments itself (``ors_lab.demo.launch``), as a reader's would.
- A ``python`` block whose first line names a file (``# test_guessing.py``, ``# conftest.py``) is a
  file of a pytest project: here it must compile; the ``sh`` block that runs ``pytest`` on it is its
  test. That block's lines run in a temporary directory holding the document's files:
  ``ors-lab demo-server`` on a free port (in place of 8080), then each ``pytest`` line, which must
  pass every test; a line without ``--ors-upstream`` runs once the server is stopped (offline).
- Every ``ors-lab`` line of an ``sh`` block must parse with the CLI's own parser: the commands
  and flags exist and take the values shown.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from sybil import Example, Sybil
from sybil.parsers.markdown import CodeBlockParser

from ors_lab.cli import _parser

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FILE_LINE = re.compile(r"#\s*((?:test_\w+|conftest)\.py)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
"""A Markdown link ``[text](target)``: its target."""
FRONT_PAGE_LINES = 300
"""The README is a front page: at most this many lines (the guides are pages of docs/)."""
TIMEOUT = 180.0
"""Seconds a block (or one command of an ``sh`` block) may take."""
UNSET = ("OPENAI_API_KEY", "PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_PLUGINS")
"""Taken out of a block's environment, with every ``ORS_LAB_*`` setting: a fresh shell has none of them."""
OUR_PLUGINS_OFF = "-p no:nbval -p no:hypothesispytest"
"""Plugins of this repository's own test stack, which a reader's project has no use for: off in the
project's pytest runs, where they would take 3 of its 4 seconds to start (ors_lab's plugin loads as usual)."""

pytestmark = pytest.mark.timeout(300)


def file_name(source: str) -> str | None:
    """The file a block is (``test_guessing.py`` for a block starting ``# test_guessing.py``), else None."""
    found = FILE_LINE.fullmatch(source.split("\n", 1)[0].strip())
    return found.group(1) if found else None


def fresh_environment() -> dict[str, str]:
    """This process's environment as a fresh shell would have it: no key, no ors_lab or pytest settings."""
    environment = {k: v for k, v in os.environ.items() if k not in UNSET and not k.startswith("ORS_LAB_")}
    environment["OPENREWARD_DISABLE_UPDATE_CHECK"] = "1"
    return environment


def failure(example: Example, what: str, done: subprocess.CompletedProcess[str]) -> str:
    """Why a block failed: where it is, what ran, the exit status and its output."""
    return (
        f"{where(example)}: {what} exited {done.returncode}\n--- the block ---\n{example.parsed}"
        f"--- stdout ---\n{done.stdout}--- stderr ---\n{done.stderr}"
    )


def where(example: Example) -> str:
    return f"{Path(example.path).relative_to(ROOT)}:{example.line}"


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    """A temporary directory holding a copy of the committed recordings (``ors-lab demo``'s own are not)."""
    with tempfile.TemporaryDirectory(prefix="ors-lab-doc-") as name:
        path = Path(name)
        shutil.copytree(ROOT / "recordings", path / "recordings", ignore=shutil.ignore_patterns("demo-*"))
        yield path


# -- python blocks -----------------------------------------------------------------------------------


def run_python(example: Example) -> None:
    """Run the block in a fresh interpreter in a directory of its own; or, for a file of a project, compile it."""
    source: str = example.parsed
    name = file_name(source)
    if name is not None:  # run with its project, by the sh block that runs pytest
        compile(source, f"{where(example)} ({name})", "exec")
        return
    with workdir() as work:
        (work / "example.py").write_text(source)
        done = subprocess.run([sys.executable, "example.py"], cwd=work, env=fresh_environment(),
                              capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    if done.returncode != 0:
        pytest.fail(failure(example, "python example.py", done), pytrace=False)


# -- sh blocks --------------------------------------------------------------------------------------


def command_lines(block: str) -> list[list[str]]:
    """The block's commands, each split as a shell would (comments dropped, continued lines joined)."""
    commands = [shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines()]
    return [command for command in commands if command]


def check_shell(example: Example) -> None:
    """Every ``ors-lab`` line parses with the CLI's parser; a block that runs ``pytest`` runs, with its project."""
    commands = command_lines(example.parsed)
    for command in commands:
        if command[0] == "ors-lab":
            errors = io.StringIO()
            with contextlib.redirect_stderr(errors), contextlib.suppress(SystemExit):
                _parser().parse_args(command[1:])
                continue
            pytest.fail(f"{where(example)}: `{shlex.join(command)}` does not parse:\n{errors.getvalue()}",
                        pytrace=False)  # fmt: skip
    if any(command[0] == "pytest" for command in commands):
        run_pytest_project(example, commands)


def run_pytest_project(example: Example, commands: list[list[str]]) -> None:
    """Write the document's files (the blocks before this one that name one) into a directory and run the
    block's commands there: the demo server on a free port in place of 8080, then each pytest line."""
    files = {}
    for other in example.document.examples():
        name = file_name(other.parsed) if isinstance(other.parsed, str) else None
        if name is not None and other.start < example.start:
            files[name] = other.parsed
    tests = sum(len(re.findall(r"^def test_", source, re.MULTILINE)) for source in files.values())
    assert tests, f"{where(example)} runs pytest, but no block before it is a test file (# test_NAME.py)"
    port = str(free_port())
    server: subprocess.Popen[str] | None = None
    with workdir() as project:
        for name, source in files.items():
            (project / name).write_text(source)
        try:
            for command in commands:
                command = [part.replace("8080", port) for part in command]
                if command[:2] == ["ors-lab", "demo-server"]:
                    server = demo_server(command[2:])
                    continue
                assert command[0] == "pytest", f"{where(example)}: no test runs `{shlex.join(command)}`"
                if "--ors-upstream" not in " ".join(command) and server is not None:
                    stop(server)  # replay only: with no server to reach
                environment = {**fresh_environment(), "PYTEST_ADDOPTS": OUR_PLUGINS_OFF}
                done = subprocess.run([sys.executable, "-m", *command], cwd=project, env=environment,
                                      capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip
                if done.returncode != 0 or f"{tests} passed" not in done.stdout:
                    pytest.fail(failure(example, shlex.join(command), done), pytrace=False)
        finally:
            if server is not None:
                stop(server)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def demo_server(arguments: list[str]) -> subprocess.Popen[str]:
    """``ors-lab demo-server ARGUMENTS``, once it says where it serves."""
    cli = Path(sys.executable).with_name("ors-lab")
    server = subprocess.Popen([str(cli), "demo-server", *arguments], stdout=subprocess.PIPE, text=True,
                              env=fresh_environment())  # fmt: skip
    assert server.stdout is not None
    ready, _, _ = select.select([server.stdout], [], [], TIMEOUT)
    line = server.stdout.readline() if ready else ""
    if "served at http://127.0.0.1:" not in line:
        stop(server)
        pytest.fail(f"ors-lab demo-server {shlex.join(arguments)} did not start: {line!r}", pytrace=False)
    return server


def stop(server: subprocess.Popen[str]) -> None:
    """Ctrl-C's twin for the demo server: SIGTERM, then SIGKILL if it does not end."""
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    if server.stdout is not None:
        server.stdout.close()


# -- the tests -------------------------------------------------------------------------------------

SYBIL = Sybil(parsers=[CodeBlockParser("python", run_python), CodeBlockParser("sh", check_shell)])


def examples() -> list[Example]:
    return [example for path in DOCUMENTS for example in SYBIL.parse(path)]


@pytest.mark.parametrize("example", examples(), ids=where)
def test_example(example: Example) -> None:
    """The block runs as written (a Python block in a fresh interpreter; a pytest project's blocks by its sh block)."""
    example.evaluate()


def test_every_python_block_is_an_example() -> None:
    """Each ```python fence of the documents is collected (none is missed by the parser)."""
    for path in DOCUMENTS:
        fences = len(re.findall(r"^\s*```python\s*$", path.read_text(), re.MULTILINE))
        python = [e for e in SYBIL.parse(path) if e.region.evaluator is run_python]
        assert len(python) == fences, path


# -- the documents' shape ----------------------------------------------------------------------------


def prose(text: str) -> str:
    """The document without its fenced blocks and inline code, where a ``[x](y)`` or a ``#`` is no Markdown."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.MULTILINE | re.DOTALL))


def anchors(text: str) -> set[str]:
    """The anchors of a document's headings, made as GitHub makes them (lower case, punctuation dropped,
    spaces as hyphens, ``-1``, ``-2``... after a repeated one)."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*$", prose(text.replace("`", "")), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_leads_somewhere(path: Path) -> None:
    """Each relative link of the documents names a file of the repository, and a heading of it when it names one."""
    broken = []
    for target in LINK.findall(prose(path.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # an absolute URL: not this repository's
        name, _, anchor = target.partition("#")
        linked = (path.parent / name).resolve() if name else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text()):
            broken.append(f"{target}: no such heading in {linked.relative_to(ROOT)}")
    assert not broken, f"{path.relative_to(ROOT)}: " + "; ".join(broken)


def test_readme_is_a_front_page() -> None:
    """README.md is at most 300 lines and links to every page of docs/."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= FRONT_PAGE_LINES
    linked = {Path(target.partition("#")[0]).name for target in LINK.findall(prose(readme))}
    assert {page.name for page in DOCUMENTS[1:]} <= linked


def test_architecture_draws_the_layer_contract() -> None:
    """docs/architecture.md's picture of the layers is pyproject.toml's layers contract, line for line, top first."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [contract["layers"] for contract in contracts if contract["type"] == "layers"]
    text = (ROOT / "docs" / "architecture.md").read_text()
    picture = re.search(r"^## The layers, top first\n+```\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert picture is not None, "docs/architecture.md has no picture under '## The layers, top first'"
    drawn = [re.split(r"\s{2,}", line.strip())[0] for line in picture.group(1).splitlines() if line.strip()]
    assert drawn == layers
