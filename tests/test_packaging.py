"""ors_lab installs anywhere: a pure-Python wheel, built and installed with no C compiler; its version written once."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import ors_lab
from tests.conftest import REPO_ROOT

NO_COMPILER = {"CC": "/bin/false", "CXX": "/bin/false", "LDSHARED": "/bin/false"}


def _pip(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **NO_COMPILER, "PIP_NO_INPUT": "1"}
    return subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel pip builds from this checkout with the compiler broken (CC=/bin/false), offline."""
    out = tmp_path_factory.mktemp("wheel")
    built = _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(out), str(REPO_ROOT),
                 cwd=out)  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    (path,) = out.glob("*.whl")
    return path


def test_the_wheel_is_pure_python(wheel: Path) -> None:
    """The wheel is py3-none-any, holds no native source or library, and carries py.typed."""
    assert wheel.name == f"ors_lab-{ors_lab.__version__}-py3-none-any.whl"
    names = zipfile.ZipFile(wheel).namelist()
    assert not [name for name in names if name.endswith((".c", ".h", ".so", ".pyd", ".pyx"))]
    assert "ors_lab/py.typed" in names and "ors_lab/recording/recorder.py" in names
    metadata = zipfile.ZipFile(wheel).read(f"ors_lab-{ors_lab.__version__}.dist-info/METADATA").decode()
    assert f"Version: {ors_lab.__version__}\n" in metadata


def test_the_wheel_carries_the_license_and_the_views_front_end(wheel: Path) -> None:
    """The MIT license file the metadata names, and the live views' JavaScript and style sheet (no CDN at run time)."""
    names = zipfile.ZipFile(wheel).namelist()
    info = f"ors_lab-{ors_lab.__version__}.dist-info"
    metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    assert "License-Expression: MIT\n" in metadata and "License-File: LICENSE\n" in metadata
    assert f"{info}/licenses/LICENSE" in names
    assert zipfile.ZipFile(wheel).read(f"{info}/licenses/LICENSE") == (REPO_ROOT / "LICENSE").read_bytes()
    scripts = ("common", "session", "run", "trace", "main", "page", "report", "watch")  # the views, the pages
    static = {f"ors_lab/viewer/static/{name}.js" for name in scripts}
    assert static | {"ors_lab/html/style.css"} <= set(names)


def test_it_installs_and_records_without_a_compiler(wheel: Path, tmp_path: Path) -> None:
    """pip installs the wheel with CC=/bin/false, and the installed ors_lab records a trace and reads it back."""
    target = tmp_path / "site"
    installed = _pip("install", "--no-deps", "--no-index", "--target", str(target), str(wheel), cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr[-3000:]
    code = (
        "import sys, ors_lab as ol\n"
        "from ors_lab.events import EventStream, PingEvent\n"
        "stream = EventStream()\n"
        "with ol.Recorder(sys.argv[1]) as rec:\n"
        "    stream.subscribe(rec)\n"
        "    for n in range(3): stream.publish(PingEvent(session_id=f's{n}'))\n"
        "print(ol.__file__, len(ol.load_trace(sys.argv[1])))\n"
    )
    env = {**os.environ, **NO_COMPILER, "PYTHONPATH": str(target)}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "t.parquet")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    where, rows = done.stdout.split()
    assert Path(where).is_relative_to(target) and rows == "3"


def test_the_version_is_written_once() -> None:
    """The installed metadata, ors_lab.__version__ and the client's User-Agent all say ors_lab/version.py's version."""
    from ors_lab.client.aclient import USER_AGENT
    from ors_lab.version import __version__

    assert ors_lab.__version__ == __version__ == importlib.metadata.version("ors-lab")
    assert f"ors-lab/{__version__}" == USER_AGENT
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert "version" in project["dynamic"] and "version" not in project
    assert "__version__ =" not in (REPO_ROOT / "ors_lab" / "__init__.py").read_text()


@pytest.mark.parametrize("hook", ["build_wheel", "build_editable"])
def test_the_build_prints_no_warning(hook: str, tmp_path: Path) -> None:
    """setuptools builds the wheel and the editable wheel (what `make demo` installs) without a warning or banner."""
    code = f"import sys\nfrom setuptools import build_meta\nprint(build_meta.{hook}(sys.argv[1]))\n"
    env = {**os.environ, **NO_COMPILER, "PYTHONWARNINGS": "default"}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr  # distutils' log lines ("warning: byte-compiling is disabled") are not warnings
    assert "Warning" not in output and "!!" not in output, output[-3000:]
    assert (tmp_path / done.stdout.split()[-1]).is_file()
