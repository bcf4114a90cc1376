"""Record `claude-arithmetic.parquet`: an agent of its own on Anthropic's SDK (`recordings/claude_agent.py`)
on the demo arithmetic tasks, through `episode.llm_client()`.

    PYTHONPATH=. .venv/bin/python recordings/record_claude_arithmetic.py

The model is the scripted server of the tests (`tests/llm_server.py`) speaking the Messages API: it thinks
(a thinking block with its signature), says a sentence and calls `submit` with the answer. It knows every
test problem but one, which it gets wrong, and answers another in text only (no tool call: that episode
ends unfinished). `notebooks/02-evaluate.ipynb` and `docs/evaluation-and-agents.md` replay the trace with
`ReplayServer` and `llm_replay=`, with no server, model, key or network.
"""

from __future__ import annotations

from pathlib import Path

import ors_lab as ol
from ors_lab.demo.env import arithmetic_tasks
from ors_lab.demo.launch import serve
from recordings.claude_agent import ClaudeLoop
from tests.llm_server import LLMServer

HERE = Path(__file__).resolve().parent
TRACE = HERE / "claude-arithmetic.parquet"
MODEL = "scripted-claude"


def main() -> None:
    tasks = arithmetic_tasks("test")
    answers = {task["question"]: task["answer"] for task in tasks}
    answers[tasks[3]["question"]] = str(int(tasks[3]["answer"]) + 1)  # a wrong answer
    for path in (TRACE, TRACE.with_name(TRACE.name + ".parts")):
        if path.exists():
            raise SystemExit(f"{path} exists: remove it first (a run would resume it)")
    with (
        serve() as server,
        ol.Client(server.url) as client,
        LLMServer(answers, model=MODEL, modes={tasks[5]["question"]: "text"}) as llm,
    ):
        agent = ClaudeLoop(MODEL, base_url=llm.url, api_key=llm.api_key)
        result = ol.evaluate(client.environment("arithmetic"), agent, split="test", rollouts=2, concurrency=4,
                             record=TRACE, progress=False)  # fmt: skip
    print(result)
    print(f"trace: {TRACE} ({TRACE.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
