"""JupyterLab in headless Debian Chromium, driven as a person drives it (Playwright).

One ``JupyterLab`` server (127.0.0.1, a token, Jupyter state in a scratch directory) serves any
number of runs; each ``run_all`` opens a copy of a notebook (outputs cleared, so a stored output
never passes for a fresh one) in a new browser page, waits for the kernel, and picks Run All from
the Run menu, so every cell is queued at once as in a person's Run All::

    with JupyterLab(tmp_path) as lab:
        with lab.run_all(Path("notebooks/02-evaluate.ipynb")) as run:
            first = run.sample(".ors-lab .ol-progress")           # DOM samples while cells run
            ...
            run.finish()                                           # the marker line, then the checks
        assert not run.problems, run.report()

``finish()`` waits until the last cell prints ``notebook ok`` (or the run stops: an error, a
timeout), then collects the problems: page errors, error and stderr outputs, cells left running
(``[*]``) or never run, widgets shown as text (``VBox(children=...``, "Error displaying widget")
instead of views, fewer widget views than the committed notebook has, a static twin left visible beside the
widgets drawn (their style sheet hides it). It takes the screenshots:
``<name>.png`` (the notebook, code collapsed), ``<name>-widget-<i>.png`` (each widget view) and
``<name>-FAILED.png`` at the first problem output, in ``screenshot_dir()``: ``$ORS_LAB_SCREENSHOTS``,
else ``build/screenshots`` (ignored by git; ``make test`` keeps it as the run's artefact).
Leaving the ``with`` block finishes the run if the test did not, shuts the notebook's kernel down
and closes the browser, whatever happened; leaving the server's block stops the server. Each run
starts its own Playwright and Chromium (about a second): while Playwright's sync API is started it
leaves a running event loop in the thread, which the asyncio tests that follow cannot share.

The browser is ``/usr/bin/chromium`` (Debian's; never ``playwright install``) with the flags that
work as root in a container. JupyterLab runs with the settings overrides a test run needs (no news
toast over the screenshots, widget state saved with the notebook).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from playwright.sync_api import Browser, Page, sync_playwright

REPO_ROOT = Path(__file__).resolve().parents[2]
MARKER = "notebook ok"
"""What every notebook's last cell prints: it ran to the end."""
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
]
SETTINGS_OVERRIDES = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True},
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
}
"""Lab's settings for a test run: no "official Jupyter news?" toast over the screenshots, widget state saved
with the notebook, and every cell kept in the DOM (no windowing), so the checks see all of them."""

APPS = {"lab": "/lab/tree/{path}?reset&", "notebook": "/notebooks/{path}?"}
"""The front ends a run can use, by their page for a notebook: JupyterLab 4 and Notebook 7."""

APP_ERRORS = {"notebook": ("Cannot read properties of undefined (reading 'schema')", "/static/notebook/notebook_core.")}
"""Errors an app raises by itself, left out of a run's problems: Notebook 7.6's core bundle raises this one while
it loads its settings, on an empty notebook too, with no ors_lab code on the page (only when it comes from there)."""

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
STDERR = ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
WIDGET_VIEW = ".jp-OutputArea-output:not([data-mime-type])"
"""A widget view's output: a rendered mime output carries its data-mime-type, a widget's does not."""
TEXT_FALLBACKS = ("VBox(children=", "HBox(children=", "Error displaying widget", "Loading widget...")
"""Text that shows a widget was not drawn as a view."""

_STATE_JS = """(marker) => {
  const cells = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')];
  const prompts = cells.map(c => (c.querySelector('.jp-InputPrompt')?.textContent || '').trim());
  const last = cells[cells.length - 1];
  const lastText = last ? [...last.querySelectorAll('.jp-OutputArea-output')].map(o => o.textContent).join('') : '';
  return {prompts, marker: lastText.includes(marker)};
}"""


def screenshot_dir() -> Path:
    """Where screenshots go: ``$ORS_LAB_SCREENSHOTS``, else ``build/screenshots`` in the repository."""
    path = Path(os.environ.get("ORS_LAB_SCREENSHOTS") or REPO_ROOT / "build" / "screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def stop_group(server: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM to a server's process group (its kernels too), SIGKILL if it lingers; nothing if it has ended."""
    if server is None or server.poll() is not None:
        return
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=15)


def tail(log: Path, chars: int = 3000) -> str:
    """The end of a server's log."""
    try:
        return log.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def cleared_copy(notebook: Path, into: Path) -> Path:
    """A copy of ``notebook`` in ``into/notebooks/`` with every output and execution count cleared.

    What the notebook may read beside it is linked, not copied: the files next to it (not other
    notebooks) and the repository's ``recordings/`` as ``into/recordings``, so the copy finds
    ``../recordings/...`` where the original does.
    """
    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nb.metadata.pop("widgets", None)
    folder = into / "notebooks"
    folder.mkdir(parents=True, exist_ok=True)
    for sibling in notebook.resolve().parent.iterdir():
        if sibling.suffix != ".ipynb" and not sibling.name.startswith(".") and not (folder / sibling.name).exists():
            (folder / sibling.name).symlink_to(sibling)
    if (REPO_ROOT / "recordings").is_dir() and not (into / "recordings").exists():
        (into / "recordings").symlink_to(REPO_ROOT / "recordings")
    copy = folder / notebook.name
    nbformat.write(nb, copy)
    return copy


def committed_widget_views(notebook: Path) -> int:
    """How many widget views the committed notebook's outputs hold (the run must draw at least these)."""
    nb = nbformat.read(notebook, as_version=4)
    return sum(
        WIDGET_MIME in output.get("data", {})
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    )


class JupyterLab:
    """A JupyterLab server on 127.0.0.1 and a headless Chromium, both stopped on leaving the ``with``."""

    def __init__(self, scratch: Path, *, start_timeout: float = 90.0) -> None:
        self.scratch = scratch
        self.root = scratch / "root"
        self.token = secrets.token_hex(16)
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.start_timeout = start_timeout
        self.log = scratch / "jupyterlab.log"
        self.server_start_s = 0.0
        self._server: subprocess.Popen[bytes] | None = None
        self._started = False

    # -- the server and the browser -------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        """This process's environment with Jupyter, IPython and Chromium state in the scratch directory."""
        config = self.scratch / "jupyter-config"
        (config / "labconfig").mkdir(parents=True, exist_ok=True)
        (config / "labconfig" / "default_setting_overrides.json").write_text(json.dumps(SETTINGS_OVERRIDES))
        return dict(
            os.environ,
            JUPYTER_CONFIG_DIR=str(config),
            JUPYTER_DATA_DIR=str(self.scratch / "jupyter-data"),
            JUPYTER_RUNTIME_DIR=str(self.scratch / "jupyter-runtime"),
            IPYTHONDIR=str(self.scratch / "ipython"),
            XDG_CONFIG_HOME=str(self.scratch / "xdg-config"),
            XDG_CACHE_HOME=str(self.scratch / "xdg-cache"),
        )

    def __enter__(self) -> JupyterLab:
        self.root.mkdir(parents=True, exist_ok=True)
        self._started = True
        try:
            self._start_server()
        except BaseException:
            self._stop_server()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop_server()

    @contextlib.contextmanager
    def _browser(self) -> Iterator[Browser]:
        """Playwright and a headless Chromium for one run only: Playwright's sync API leaves a running
        event loop in this thread for as long as it is started, which later asyncio tests cannot share."""
        env: dict[str, str | float | bool] = dict(self._env())
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, env=env)
            try:
                yield browser
            finally:
                browser.close()

    def _start_server(self) -> None:
        started = time.monotonic()
        command = [
            sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={self.port}",
            f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root}", "--allow-root",
            "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        ]  # fmt: skip
        with self.log.open("wb") as log:  # the child keeps its own copy of the descriptor
            self._server = subprocess.Popen(
                command, env=self._env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        while time.monotonic() - started < self.start_timeout:
            if self._server.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self._server.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.base}/api/status?token={self.token}", timeout=2):
                    self.server_start_s = time.monotonic() - started
                    return
            except OSError:
                time.sleep(0.25)
        raise RuntimeError(f"JupyterLab did not answer within {self.start_timeout:.0f} s:\n{self.log_tail()}")

    def _stop_server(self) -> None:
        """SIGTERM to the server's process group (it shuts its kernels down), SIGKILL if it lingers."""
        server, self._server = self._server, None
        stop_group(server)

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the server's log."""
        return tail(self.log, chars)

    def api(self, method: str, path: str) -> Any:
        """One call of the server's REST API (``/api/...``); the JSON answer, or None."""
        request = urllib.request.Request(
            f"{self.base}{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            body = answer.read()
        return json.loads(body) if body else None

    # -- runs -----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def run_all(
        self,
        notebook: Path,
        *,
        name: str | None = None,
        timeout: float = 240.0,
        viewport: tuple[int, int] = (1280, 1000),
        app: str = "lab",
    ) -> Iterator[LabRun]:
        """Open a cleared copy of ``notebook``, Run All from the Run menu, and yield the run while it goes on.

        ``name`` (default: the notebook's stem) names the screenshots and the copy's directory.
        ``timeout``: seconds ``finish()`` waits for the marker line. ``app``: ``"lab"`` (JupyterLab 4)
        or ``"notebook"`` (Notebook 7, served by the same server; the same Run menu).
        """
        if app not in APPS:
            raise ValueError(f"app must be one of {', '.join(APPS)}, not {app!r}")
        if not self._started:
            raise RuntimeError("use JupyterLab as a context manager: with JupyterLab(scratch) as lab: ...")
        name = name or notebook.stem
        copy = cleared_copy(notebook, self.root / name)
        with self._browser() as browser:
            page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
            run = LabRun(
                lab=self,
                page=page,
                name=name,
                path=copy.relative_to(self.root).as_posix(),
                widget_views=committed_widget_views(notebook),
                timeout=timeout,
                app=app,
            )
            page.on("pageerror", run.page_error)
            page.on("console", lambda msg: run.console_errors.append(msg.text) if msg.type == "error" else None)
            try:
                run.start()
                yield run
                run.finish()
            except BaseException:
                with contextlib.suppress(Exception):
                    run.screenshot(f"{name}-FAILED")
                raise
            finally:
                with contextlib.suppress(Exception):
                    run.shutdown_kernel()


@dataclass
class LabRun:
    """One notebook's Run All in the browser: the page, the timings, and what went wrong."""

    lab: JupyterLab
    page: Page
    name: str
    path: str
    widget_views: int
    timeout: float
    app: str = "lab"
    timings: dict[str, float] = field(default_factory=dict)
    page_errors: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    app_errors: int = 0
    problems: list[str] = field(default_factory=list)
    screenshots: list[Path] = field(default_factory=list)
    finished: bool = False
    _run_started: float = 0.0

    def start(self) -> None:
        """Open the notebook, wait for its kernel to be idle, then Run -> Run All Cells."""
        started = time.monotonic()
        page = self.page
        page.goto(f"{self.lab.base}{APPS[self.app].format(path=self.path)}token={self.lab.token}")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
        self._wait_for_idle_kernel(60.0)
        self.timings["open_s"] = time.monotonic() - started
        with contextlib.suppress(Exception):  # Lab's file browser folded away: the screenshots show the notebook
            if self.app == "lab":
                page.click(".jp-SideBar.jp-mod-left .lm-TabBar-tab.lm-mod-current", timeout=2_000)
        page.click(".lm-MenuBar-item:has-text('Run')")
        page.click(".lm-Menu-item[data-command='runmenu:run-all']")
        self._run_started = time.monotonic()

    @property
    def elapsed(self) -> float:
        """Seconds since Run All."""
        return time.monotonic() - self._run_started

    def state(self) -> dict[str, Any]:
        """The code cells' prompts (``[*]:`` while queued or running) and whether the marker is out."""
        result: dict[str, Any] = self.page.evaluate(_STATE_JS, MARKER)
        return result

    def sample(self, selector: str, script: str = "e => e.textContent") -> Any:
        """``script`` run on the first element matching ``selector`` (waits up to 30 s for it): a DOM sample."""
        self.page.wait_for_selector(selector, timeout=30_000)
        return self.page.eval_on_selector(selector, script)

    def running(self) -> bool:
        """True while some cell is queued or running."""
        return any("*" in prompt for prompt in self.state()["prompts"])

    def screenshot(self, name: str, selector: str | None = None) -> Path:
        """A screenshot of the page (or of the first element matching ``selector``) as ``<name>.png``."""
        path = screenshot_dir() / f"{name}.png"
        if selector is None:
            self.page.screenshot(path=str(path))
        else:
            self.page.locator(selector).first.screenshot(path=str(path))
        self.screenshots.append(path)
        return path

    def finish(self) -> list[str]:
        """Wait for the marker line (or the run to stop), collect the problems, take the screenshots."""
        if self.finished:
            return self.problems
        self.finished = True
        self._wait()
        self.page.wait_for_timeout(300)  # the last widget messages
        self._check()
        self._screenshots()
        return self.problems

    def _wait(self) -> None:
        """Until the marker is out and no cell is left running, or nothing runs for 3 s, or the timeout."""
        deadline = self._run_started + self.timeout
        seen_running, stopped_since = False, None
        while time.monotonic() < deadline:
            state = self.state()
            running = any("*" in prompt for prompt in state["prompts"])
            seen_running = seen_running or running
            if state["marker"] and not running:
                break
            if seen_running and not running:
                stopped_since = stopped_since or time.monotonic()
                if time.monotonic() - stopped_since > 3:
                    break  # the run stopped before the marker: an error, most likely
            else:
                stopped_since = None
            time.sleep(0.25)
        self.timings["run_all_s"] = self.elapsed

    def _check(self) -> None:
        page, problems = self.page, self.problems
        state = self.state()
        problems.extend(f"page error: {error[:500]}" for error in self.page_errors)
        problems.extend(f"widget error: {text[:500]}" for text in self.console_errors if "anywidget" in text.lower())
        for i, text in enumerate(page.locator(STDERR).all_text_contents()):
            problems.append(f"error or stderr output #{i}: {text[:800]}")
        left = [i for i, prompt in enumerate(state["prompts"]) if "*" in prompt]
        if left:
            problems.append(f"code cells {left} still running ([*]) after {self.elapsed:.0f} s")
        unrun = [i for i, prompt in enumerate(state["prompts"]) if not re.search(r"\[\d+\]", prompt)]
        if unrun and not left:
            problems.append(f"code cells {unrun} never ran")
        if not state["marker"]:
            problems.append(f"the last cell did not print {MARKER!r}")
        text = "\n".join(page.locator(".jp-OutputArea-output").all_text_contents())
        problems.extend(f"a widget shown as text: {fallback!r}" for fallback in TEXT_FALLBACKS if fallback in text)
        views = page.locator(WIDGET_VIEW).count()
        if views < self.widget_views:
            problems.append(f"{views} widget views drawn; the committed notebook has {self.widget_views}")
        twins = page.locator(".ol-twin:visible").count()
        if views and twins:  # the widgets' style sheet hides their static twins (ors_lab.notebook.hosts)
            problems.append(f"{twins} static twins shown beside the {views} widget views drawn")

    def _screenshots(self) -> None:
        page = self.page
        if self.problems and page.locator(STDERR).count():
            page.locator(STDERR).first.scroll_into_view_if_needed()
            self.screenshot(f"{self.name}-FAILED")
        for i in range(page.locator(WIDGET_VIEW).count()):
            view = page.locator(WIDGET_VIEW).nth(i)
            path = screenshot_dir() / f"{self.name}-widget-{i}.png"
            view.screenshot(path=str(path))
            self.screenshots.append(path)
        page.click(".lm-MenuBar-item:has-text('View')")  # code collapsed: the outputs fit on the screen
        page.click(".lm-Menu-item[data-command='notebook:hide-all-cell-code']")
        page.wait_for_timeout(300)
        page.locator(".jp-Notebook .jp-Cell").first.scroll_into_view_if_needed()
        self.screenshot(self.name)

    def page_error(self, error: Any) -> None:
        """Keep an error the page raised, unless it is one of the app's own known ones (``APP_ERRORS``)."""
        stack = getattr(error, "stack", None) or ""
        known = APP_ERRORS.get(self.app)
        if known and str(error) == known[0] and known[1] in stack.splitlines()[1]:
            self.app_errors += 1
            return
        self.page_errors.append(str(error))

    def _wait_for_idle_kernel(self, timeout: float) -> None:
        """Until the server says this notebook's kernel is started and idle (the same in either app)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for session in self.lab.api("GET", "/api/sessions") or []:
                kernel = session.get("kernel") or {}
                if session.get("path") == self.path and kernel.get("execution_state") == "idle":
                    self.page.wait_for_timeout(300)  # the page's own kernel connection settles
                    return
            time.sleep(0.2)
        raise TimeoutError(f"the kernel of {self.path} was not idle within {timeout:g} s")

    def shutdown_kernel(self) -> None:
        """Shut down the kernels of this notebook's sessions (the server would keep them running)."""
        for session in self.lab.api("GET", "/api/sessions") or []:
            if session.get("path") == self.path and session.get("kernel"):
                self.lab.api("DELETE", f"/api/kernels/{session['kernel']['id']}")

    def report(self) -> str:
        """The run in a few lines: timings, problems, screenshots, and the server log's end on a problem."""
        timings = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.timings.items())
        lines = [f"{self.name}: {timings}; {len(self.problems)} problem(s)"]
        lines += [f"  {problem}" for problem in self.problems]
        lines += [f"  screenshot: {path}" for path in self.screenshots]
        lines += [f"  console error: {text[:300]}" for text in self.console_errors]
        if self.problems:
            lines += ["  JupyterLab log (end):", self.lab.log_tail(1500)]
        return "\n".join(lines)
