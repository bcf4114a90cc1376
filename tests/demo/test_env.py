"""The bundled demo environments, over HTTP on the ors-sdk server, and their pure helpers."""

from __future__ import annotations

import pytest

from ors_lab.demo import env
from ors_lab.demo.launch import ServerProcess
from tests import wire


def test_lists_the_demo_environments(demo_server: ServerProcess) -> None:
    """The demo server serves arithmetic (the default) and guessing."""
    assert wire.get_json(demo_server.url, "/list_environments") == ["arithmetic", "guessing"]
    for name in ("arithmetic", "guessing"):
        assert wire.get_json(demo_server.url, f"/{name}/splits") == [
            {"name": "train", "type": "train"},
            {"name": "test", "type": "test"},
        ]


@pytest.mark.parametrize(
    ("name", "tasks_of", "sizes"),
    [
        ("arithmetic", env.arithmetic_tasks, {"train": 20, "test": 10}),
        ("guessing", env.guessing_tasks, {"train": 10, "test": 10}),
    ],
)
def test_tasks_are_deterministic(
    demo_server: ServerProcess, name: str, tasks_of: object, sizes: dict[str, int]
) -> None:
    """Task lists are the same on every request and equal to what env.py computes in this process."""
    assert callable(tasks_of)
    for split, size in sizes.items():
        first = wire.post_json(demo_server.url, f"/{name}/tasks", {"split": split})["tasks"]
        again = wire.post_json(demo_server.url, f"/{name}/tasks", {"split": split})["tasks"]
        assert first == again == tasks_of(split)
        assert len(first) == size
        assert len({task["id"] for task in first}) == size


def test_arithmetic_tasks_are_well_formed() -> None:
    """Every arithmetic task has a question and a positive whole-number answer; ids are unique."""
    tasks = env.arithmetic_tasks("train") + env.arithmetic_tasks("test")
    assert len({task["id"] for task in tasks}) == len(tasks)
    for task in tasks:
        assert str(task["question"]).endswith("?")
        assert str(task["answer"]).isdigit()
        assert int(task["answer"]) > 0
    for task in env.guessing_tasks("train") + env.guessing_tasks("test"):
        assert (task["low"], task["high"], task["max_guesses"]) == (1, 100, 7)
        assert 1 <= int(task["secret"]) <= 100


def test_tools_have_schemas_and_descriptions(demo_server: ServerProcess) -> None:
    """Tool docstrings and pydantic Field descriptions become the published tool specs."""
    tools = {t["name"]: t for t in wire.get_json(demo_server.url, "/arithmetic/tools")["tools"]}
    assert sorted(tools) == ["calculator", "submit"]
    assert tools["submit"]["input_schema"]["required"] == ["answer"]
    assert tools["submit"]["input_schema"]["properties"]["answer"]["description"]
    assert tools["calculator"]["description"].startswith("Evaluate an arithmetic expression")
    (guess,) = wire.get_json(demo_server.url, "/guessing/tools")["tools"]
    assert guess["name"] == "guess"
    assert guess["input_schema"]["properties"]["number"]["type"] == "integer"


def test_arithmetic_episode_with_the_right_answer(demo_server: ServerProcess) -> None:
    """Prompt, then submit of the right answer: `end` has reward 1.0, finished, gold and submitted."""
    task = env.arithmetic_tasks("test")[0]
    with wire.session(demo_server.url, "arithmetic", "test", 0) as sid:
        prompt = wire.get_json(demo_server.url, "/arithmetic/prompt", **{"X-Session-ID": sid})
        assert str(task["question"]) in prompt[0]["text"]
        events = wire.call(demo_server.url, "arithmetic", sid, "submit", {"answer": task["answer"]})
    assert [e.event for e in events] == ["task_id", "end"]
    output = wire.result_of(events)["output"]
    assert (output["reward"], output["finished"]) == (1.0, True)
    assert output["blocks"][0]["text"] == "Correct!"
    assert output["metadata"] == {"gold": task["answer"], "submitted": task["answer"]}


@pytest.mark.parametrize(
    ("offset", "decorate", "reward"), [(0, " {} ", 1.0), (0, "{}.0", 1.0), (1, "{}", 0.0), (0, "x{}", 0.0)]
)
def test_submit_compares_numbers(demo_server: ServerProcess, offset: int, decorate: str, reward: float) -> None:
    """Answers are stripped and compared as numbers; a wrong one gives 0.0 and names the answer."""
    task = env.arithmetic_tasks("train")[3]
    answer = decorate.format(int(task["answer"]) + offset)
    with wire.session(demo_server.url, "arithmetic", "train", 3) as sid:
        result = wire.call_result(demo_server.url, "arithmetic", sid, "submit", {"answer": answer})
    assert (result["output"]["reward"], result["output"]["finished"]) == (reward, True)
    expected = "Correct!" if reward else f"Incorrect, the answer was {task['answer']}"
    assert wire.output_text(result) == expected


@pytest.mark.parametrize(
    ("expression", "text"),
    [
        ("(12 * 8) - 30", "66"),
        ("7 / 2", "3.5"),
        ("-(2 + 3) * +4", "-20"),
        ("0.1 + 0.2", "0.3"),
        ("2 ** 8", "error: unsupported syntax: Pow (only numbers, + - * / and parentheses)"),
        ("1 / (3 - 3)", "error: division by zero"),
        ("__import__('os')", "error: unsupported syntax: Call (only numbers, + - * / and parentheses)"),
        ("12 +", "error: not an expression: invalid syntax"),
        ("True + 1", "error: unsupported syntax: Constant (only numbers, + - * / and parentheses)"),
    ],
)
def test_calculator_tool(demo_server: ServerProcess, expression: str, text: str) -> None:
    """The calculator evaluates + - * / exactly and answers bad input with an error text, never a raise."""
    with wire.session(demo_server.url, "arithmetic", "test", 1) as sid:
        result = wire.call_result(demo_server.url, "arithmetic", sid, "calculator", {"expression": expression})
    assert wire.output_text(result) == text
    assert (result["output"]["reward"], result["output"]["finished"]) == (None, False)


def test_calculate_refuses_long_expressions() -> None:
    """calculate() refuses expressions over 200 characters before parsing them."""
    with pytest.raises(env.CalculatorError, match="longer than 200"):
        env.calculate("1+" * 100 + "1")


def _game_index(split: str) -> int:
    """A game whose secret is not the first binary-search guess, so it takes several steps."""
    return next(i for i, task in enumerate(env.guessing_tasks(split)) if task["secret"] != 50)


def test_guessing_by_binary_search(demo_server: ServerProcess) -> None:
    """Binary search finds the number within max_guesses; wrong guesses give 0.0, the right one 1.0."""
    index = _game_index("test")
    secret = env.guessing_tasks("test")[index]["secret"]
    steps = []
    low, high = 1, 100
    with wire.session(demo_server.url, "guessing", "test", index) as sid:
        prompt = wire.get_json(demo_server.url, "/guessing/prompt", **{"X-Session-ID": sid})
        assert "between 1 and 100" in prompt[0]["text"]
        assert "7 guesses" in prompt[0]["text"]
        while True:
            guess = (low + high) // 2
            output = wire.call_result(demo_server.url, "guessing", sid, "guess", {"number": guess})["output"]
            text = output["blocks"][0]["text"]
            steps.append((guess, text, output["reward"], output["finished"]))
            if output["finished"]:
                break
            low, high = (guess + 1, high) if text == "higher" else (low, guess - 1)
    assert 1 < len(steps) <= 7
    assert steps[-1] == (secret, "correct", 1.0, True)
    assert all(text in ("higher", "lower") and (reward, done) == (0.0, False) for _, text, reward, done in steps[:-1])


def test_guessing_runs_out_of_guesses(demo_server: ServerProcess) -> None:
    """Seven wrong guesses end the game with reward 0.0 and the number revealed."""
    index = _game_index("train")
    secret = int(env.guessing_tasks("train")[index]["secret"])
    wrong = 1 if secret != 1 else 2
    with wire.session(demo_server.url, "guessing", "train", index) as sid:
        outputs = [
            wire.call_result(demo_server.url, "guessing", sid, "guess", {"number": wrong})["output"] for _ in range(7)
        ]
        after = wire.call_result(demo_server.url, "guessing", sid, "guess", {"number": secret})["output"]
    assert [(o["reward"], o["finished"]) for o in outputs] == [(0.0, False)] * 6 + [(0.0, True)]
    assert outputs[-1]["blocks"][0]["text"] == f"out of guesses, the number was {secret}"
    assert outputs[-1]["metadata"] == {"guesses": 7, "remaining": 0}
    assert (after["reward"], after["finished"]) == (None, True)
