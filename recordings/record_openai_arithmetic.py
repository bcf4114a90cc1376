"""Record `openai-arithmetic.parquet`: the OpenAI-compatible agent on the demo arithmetic tasks.

    PYTHONPATH=. .venv/bin/python recordings/record_openai_arithmetic.py

The model is the scripted chat-completions server of the tests (`tests/llm_server.py`): it streams
its reasoning, a sentence and a `submit` call with the answer, and reports its token usage. It
knows every test problem but one, which it gets wrong, and answers another in text only (no
tool call: that episode ends unfinished). `notebooks/02-evaluate.ipynb` replays the trace with
`ReplayServer` and `AgentReplayTransport`, with no server, model or network.
"""

from __future__ import annotations

from pathlib import Path

import ors_lab as ol
from ors_lab.demo.env import arithmetic_tasks
from ors_lab.demo.launch import serve
from tests.llm_server import LLMServer

HERE = Path(__file__).resolve().parent
TRACE = HERE / "openai-arithmetic.parquet"
MODEL = "scripted-model"


def main() -> None:
    tasks = arithmetic_tasks("test")
    answers = {task["question"]: task["answer"] for task in tasks}
    answers[tasks[3]["question"]] = str(int(tasks[3]["answer"]) + 1)  # a wrong answer
    for path in (TRACE, TRACE.with_name(TRACE.name + ".parts")):
        if path.exists():
            raise SystemExit(f"{path} exists: remove it first (a run would resume it)")
    with serve() as server, ol.Client(server.url) as client, LLMServer(
        answers, model=MODEL, modes={tasks[5]["question"]: "text"}, usage=True
    ) as llm:
        agent = ol.OpenAIAgent(MODEL, base_url=llm.url + "/v1", api_key=llm.api_key)
        result = ol.evaluate(client.environment("arithmetic"), agent, split="test", rollouts=2, concurrency=4,
                             record=TRACE, progress=False)  # fmt: skip
    print(result)
    print(f"trace: {TRACE} ({TRACE.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
