"""marimo in headless Debian Chromium, driven as a person drives it (Playwright), with nothing off this machine.

``MarimoServer(notebook, scratch)`` copies a notebook of ``notebooks/`` into ``scratch`` (``../recordings`` beside
it, linked) and serves it with ``marimo run`` on 127.0.0.1 with a token; marimo's state goes to ``scratch``, its
update check is off. ``export_html(notebook, scratch)`` runs ``marimo export html`` on such a copy.

``offline_context(browser, allowed)`` is a browser context in which every request goes through one router: a
request to an allowed origin (the marimo server) or a ``data:``/``blob:``/``file:`` URL goes on, one for marimo's
own front end at its CDN address (which an exported page names) is answered with the same file from the installed
marimo package, and any other is aborted and kept in ``requests_off`` for the test to assert on. A page served or
opened this way can reach nothing beyond this machine, and the test sees everything it tried.

``figures(text)`` reads the figures a run's dashboard and its ``EvalResult`` card both show.
"""

from __future__ import annotations

import contextlib
import mimetypes
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from playwright.sync_api import Browser, BrowserContext, Route

from tests.notebook.lab import REPO_ROOT, _free_port, stop_group, tail

MARIMO_CDN = "https://cdn.jsdelivr.net/npm/@marimo-team/frontend@{version}/dist/"
"""Where an exported marimo page loads marimo's own front end from (``marimo._templates.get_default_asset_url``)."""


def marimo_environment(scratch: Path) -> dict[str, str]:
    """This process's environment with marimo's config, cache and state in ``scratch`` and its update check off."""
    return dict(
        os.environ,
        MARIMO_SKIP_UPDATE_CHECK="1",
        HOME=str(scratch / "home"),
        XDG_CONFIG_HOME=str(scratch / "xdg-config"),
        XDG_CACHE_HOME=str(scratch / "xdg-cache"),
        XDG_STATE_HOME=str(scratch / "xdg-state"),
        XDG_DATA_HOME=str(scratch / "xdg-data"),
    )


def notebook_copy(notebook: Path, scratch: Path) -> Path:
    """``notebook`` copied to ``scratch/notebooks/`` with the repository's ``recordings/`` linked beside it."""
    folder = scratch / "notebooks"
    folder.mkdir(parents=True, exist_ok=True)
    if not (scratch / "recordings").exists():
        (scratch / "recordings").symlink_to(REPO_ROOT / "recordings")
    copy = folder / notebook.name
    shutil.copy(notebook, copy)
    return copy


class MarimoServer:
    """``marimo run NOTEBOOK`` on 127.0.0.1 with a token (a copy of the notebook); stopped on leaving the ``with``."""

    def __init__(self, notebook: Path, scratch: Path, *, start_timeout: float = 60.0) -> None:
        self.scratch = scratch
        self.copy = notebook_copy(notebook, scratch)
        self.token = secrets.token_hex(16)
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/?access_token={self.token}"
        self.log = scratch / "marimo.log"
        self.start_timeout = start_timeout
        self.start_s = 0.0
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> MarimoServer:
        started = time.monotonic()
        command = [
            sys.executable, "-m", "marimo", "run", str(self.copy.relative_to(self.scratch)), "--headless",
            "--host", "127.0.0.1", "--port", str(self.port), "--token", "--token-password", self.token, "--no-sandbox",
        ]  # fmt: skip
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(command, cwd=self.scratch, env=marimo_environment(self.scratch),
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            while time.monotonic() - started < self.start_timeout:
                if self.process.poll() is not None:
                    raise RuntimeError(f"marimo exited with {self.process.returncode}:\n{self.log_tail()}")
                with contextlib.suppress(OSError):
                    with urllib.request.urlopen(f"{self.base}/health", timeout=2):
                        self.start_s = time.monotonic() - started
                        return self
                time.sleep(0.2)
            raise RuntimeError(f"marimo did not answer within {self.start_timeout:.0f} s:\n{self.log_tail()}")
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGTERM to the server's process group (its kernel too), SIGKILL if it lingers."""
        process, self.process = self.process, None
        stop_group(process)

    def log_tail(self, chars: int = 3000) -> str:
        return tail(self.log, chars)


def export_html(notebook: Path, scratch: Path, *, timeout: float = 240.0) -> tuple[Path, float]:
    """``marimo export html`` of a copy of ``notebook`` in ``scratch``: the page written, and the seconds it took."""
    copy = notebook_copy(notebook, scratch)
    page = scratch / f"{notebook.stem}.html"
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "marimo", "export", "html", "--no-sandbox", str(copy), "-o", str(page), "--force"],
        cwd=scratch, env=marimo_environment(scratch), capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    if done.returncode != 0 or not page.exists():
        raise AssertionError(f"marimo export html exited {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-999:]}")
    return page, time.monotonic() - started


@dataclass
class Offline:
    """A browser context's router (``offline_context``): what it let through, served locally, and refused."""

    allowed: tuple[str, ...]
    static: Path
    cdn: str
    requests_off: list[str] = field(default_factory=list)
    served_locally: int = 0

    def route(self, route: Route) -> None:
        url = route.request.url
        if url.startswith(("data:", "blob:", "file:", *self.allowed)):
            route.continue_()
            return
        if url.startswith(self.cdn):
            path = self.static / url[len(self.cdn) :].split("?", 1)[0].split("#", 1)[0]
            if path.is_file():
                self.served_locally += 1
                kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
                route.fulfill(path=str(path), headers={"Access-Control-Allow-Origin": "*", "Content-Type": kind})
                return
        self.requests_off.append(url)
        route.abort()


@contextlib.contextmanager
def offline_context(browser: Browser, allowed: tuple[str, ...] = ()) -> Iterator[tuple[BrowserContext, Offline]]:
    """A browser context whose requests reach only ``allowed`` origins, local URLs and marimo's own front end (from
    the installed package); everything else is refused and kept in ``Offline.requests_off``."""
    import marimo  # the test extra's marimo: its front end is the one the export names

    offline = Offline(allowed, Path(marimo.__file__).parent / "_static", MARIMO_CDN.format(version=marimo.__version__))
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    try:
        context.route("**/*", offline.route)
        yield context, offline
    finally:
        context.close()


FIGURES = {
    "mean": re.compile(r"mean reward\s*([\d.]+ ± [\d.]+)"),
    "pass@1": re.compile(r"pass@1\s*([\d.]+)"),
    "pass@3": re.compile(r"pass@3\s*([\d.]+)"),
    "success": re.compile(r"success(?: rate)?\s*([\d.]+)"),
    "errors": re.compile(r"errors\s*(\d+)"),
    "episodes": re.compile(r"(?:(\d+)/\d+ episodes|episodes\s*(\d+))"),
}
"""The figures a run's dashboard and its EvalResult card both show, as each writes them."""


def figures(text: str) -> dict[str, str]:
    """The figures ``FIGURES`` finds in ``text`` (a dashboard's or a card's): name -> the text shown."""
    found = {}
    for name, pattern in FIGURES.items():
        match = pattern.search(text)
        if match:
            found[name] = next(group for group in match.groups() if group is not None)
    return found
