"""A scripted session run by an official ORS client, in its own process; prints what it got as JSON.

``python -m tests.official {ors-sdk|openreward} URL [--no-variant]``. The official clients keep
global state (event loops, threads, aiohttp sessions they never close), so tests run them apart.
With ``-`` for URL the process runs one session per URL read from stdin, with a new client each
time, printing one JSON line each: a test that runs several sessions imports the SDK once (openreward
takes 5 s of CPU to import).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("step", {"value": 1}),
    ("big_output", {"n_chars": 5000, "fill": "x"}),
    ("image", {}),
    ("echo_missing", {}),
    ("submit", {"answer": "4"}),
]


def _outcome(call: Any) -> dict[str, Any]:
    try:
        out = call()
    except Exception as exc:  # the official clients raise on ok:false (ToolCallError)
        return {"raised": type(exc).__name__}
    return {
        "blocks": [getattr(b, "type", None) for b in out.blocks],
        "text": "".join(getattr(b, "text", "") or "" for b in out.blocks),
        "reward": out.reward,
        "finished": out.finished,
    }


def run(sdk: str, url: str, variant: bool) -> list[Any]:
    """Open a session on lab/train/0 by task, read prompt and tools, make the CALLS, close."""
    if sdk == "ors-sdk":
        from ors.client import ORS

        client: Any = ORS(base_url=url)  # kept: its event loop closes when it is collected
        env: Any = client.environment("lab")
    else:
        os.environ["OPENREWARD_DISABLE_UPDATE_CHECK"] = "1"
        from openreward import OpenReward

        client = OpenReward()
        env = client.environments.get("lab", variant="lab" if variant else None, base_url=url)
    task = env.list_tasks("train")[0]
    got: list[Any] = [task.task_spec]
    with env.session(task=task) as session:
        got.append([b.text for b in session.get_prompt()])
        got.append(sorted(t.name for t in session.list_tools()))
        got.extend(_outcome(lambda n=name, i=args: session.call_tool(n, i)) for name, args in CALLS)
    return got


if __name__ == "__main__":
    sdk_name, target, with_variant = sys.argv[1], sys.argv[2], "--no-variant" not in sys.argv
    for line in sys.stdin if target == "-" else [target]:
        print(json.dumps(run(sdk_name, line.strip(), with_variant)), flush=True)
