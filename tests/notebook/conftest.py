"""The notebook tests' shared JupyterLab: one server for the whole session (each run starts its own Chromium)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.notebook.lab import JupyterLab


@pytest.fixture(scope="session")
def jupyter_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLab]:
    """JupyterLab on 127.0.0.1; ``jupyter_lab.run_all(notebook)`` runs one notebook in Debian's Chromium."""
    with JupyterLab(tmp_path_factory.mktemp("jupyterlab")) as lab:
        yield lab


@pytest.fixture(scope="session")
def notebook7(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLab]:
    """A server of its own for Notebook 7 runs: after JupyterLab runs, the state Lab leaves on its server makes
    Notebook 7's page call a command it does not have (``filebrowser:open-path``)."""
    with JupyterLab(tmp_path_factory.mktemp("notebook7")) as lab:
        yield lab
