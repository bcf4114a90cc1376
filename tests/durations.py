"""The tests' recorded durations, which `make check` (`pytest --quick`) reads to leave the long ones to `make test`.

`python -m tests.durations build/junit-*.xml` rewrites `tests/durations.json` from the JUnit reports of a run
(`make test` writes them to build/): each test that took at least `KEPT_S`, by node id, in seconds (setup,
call and teardown). A test not listed counts as quick, so a new test runs in `make check` until it is timed.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

__all__ = ["DURATIONS", "KEPT_S", "load", "node_id"]

ROOT = Path(__file__).resolve().parents[1]
DURATIONS = ROOT / "tests" / "durations.json"
KEPT_S = 0.5


def node_id(classname: str, name: str) -> str:
    """A JUnit test case's pytest node id: its module's file, then its class (if any) and name."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (ROOT / path).is_file():
            return "::".join([path.as_posix(), *parts[cut:], name])
    return f"{classname}::{name}"


def load() -> dict[str, float]:
    """The recorded durations (none if the file is missing)."""
    try:
        return dict(json.loads(DURATIONS.read_text()))
    except FileNotFoundError:
        return {}


def main(reports: list[str]) -> int:
    if not reports:
        print("usage: python -m tests.durations build/junit-*.xml", file=sys.stderr)
        return 2
    found: dict[str, float] = {}
    for report in reports:
        for case in ET.parse(report).iter("testcase"):
            found[node_id(case.get("classname", ""), case.get("name", ""))] = float(case.get("time", 0))
    kept = {key: round(value, 2) for key, value in sorted(found.items()) if value >= KEPT_S}
    DURATIONS.write_text(json.dumps(kept, indent=0, sort_keys=True) + "\n")
    print(f"{DURATIONS.relative_to(ROOT)}: {len(kept)} of {len(found)} tests took {KEPT_S} s or more")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
