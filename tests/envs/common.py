"""What the test environments share across both reference servers.

`tests/envs/ors_sdk_envs.py` (ors-sdk) and `tests/envs/openreward_envs.py` (openreward) serve the
same two environments, `Lab` ("lab", the default) and `Echo` ("echo"), both made from the one code
of `tests/envs/lab_envs.py`. Tasks, expected rewards, tool texts, tool input models and the tally
counter live here. Tests import this module to know what the servers will answer.
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Mapping

from pydantic import BaseModel, Field

ENV_NAMES = ["lab", "echo"]  # registration order: "lab" is the default env

LAB_TASKS: dict[str, list[dict[str, str]]] = {
    "train": [
        {"id": "t0", "question": "What is 2 + 2?", "answer": "4"},
        {
            "id": "t1",
            "question": "What is the capital of France?",
            "answer": "Paris",
            "hint": "It is also called the City of Light.",
        },
        {"id": "t2", "question": "Spell 'cat' backwards.", "answer": "tac"},
    ],
    "test": [
        {"id": "t3", "question": "What is 3 * 5?", "answer": "15"},
        {"id": "t4", "question": "What colour is a clear daytime sky?", "answer": "blue"},
    ],
}
LAB_SPLITS_WIRE = [{"name": "train", "type": "train"}, {"name": "test", "type": "test"}]
HINT_INDEX = ("train", 1)  # the only task with a "hint", hence a task-only `hint` tool

ECHO_TASKS: dict[str, list[dict[str, str]]] = {
    "dev": [{"id": "e0", "text": "hello"}, {"id": "e1", "text": "world"}],
}
ECHO_SPLITS_WIRE = [{"name": "dev", "type": "validation"}]  # a bare non-standard name
ECHO_REWARD = 0.5

# (split, index, submitted answer) -> the reward `submit` returns. Answers are compared after
# stripping, case-insensitively.
EXPECTED: dict[tuple[str, int, str], float] = {
    ("train", 0, "4"): 1.0,
    ("train", 0, " 4 "): 1.0,
    ("train", 0, "5"): 0.0,
    ("train", 1, "Paris"): 1.0,
    ("train", 1, "paris"): 1.0,
    ("train", 1, "Lyon"): 0.0,
    ("train", 2, "tac"): 1.0,
    ("train", 2, "cat"): 0.0,
    ("test", 0, "15"): 1.0,
    ("test", 0, "16"): 0.0,
    ("test", 1, "blue"): 1.0,
    ("test", 1, ""): 0.0,
}

LAB_TOOLS = [
    "big_output",
    "crash",
    "image",
    "secret_keys",
    "slow",
    "step",
    "submit",
    "tally",
    "tally_big",
    "tally_count",
]  # shared tools, as /tools lists them (sorted by name)
HINT_DESCRIPTION = "Get a hint for this task (only offered on tasks that have one)."
NO_HINT = "there is no hint for this task"
CRASH_MESSAGE = "boom: deliberate failure"
STEP_DONE_AT = 3  # `step` finishes the episode at value >= 3
NO_SECRETS = "(none)"
QUICK_PING_S = 2.0  # the quick-ping servers (`tests/envs/quick_pings.py`) ping a running call every 2 s, not 10


def _png_1x1() -> bytes:
    """A valid 1x1 opaque red PNG, built from its chunks."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        """One PNG chunk: length, type, data, CRC."""
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    pixels = zlib.compress(b"\x00\xff\x00\x00")  # filter byte 0, then one red pixel
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


PNG_1X1 = _png_1x1()
PNG_1X1_B64 = base64.b64encode(PNG_1X1).decode("ascii")
IMAGE_CAPTION = "a pixel:"


def lab_prompt(task: Mapping[str, object]) -> str:
    """The Lab prompt for a task."""
    return f"{task['question']} Answer with the submit tool."


def echo_prompt(task: Mapping[str, object]) -> str:
    """The Echo prompt for a task."""
    return f"Call echo with the text {task['text']!r}."


def lab_reward(task: Mapping[str, object], answer: str) -> float:
    """1.0 if `answer` matches the task's answer (stripped, case-insensitive), else 0.0."""
    return 1.0 if answer.strip().casefold() == str(task["answer"]).casefold() else 0.0


def submit_text(reward: float, task: Mapping[str, object]) -> str:
    """What `submit` says."""
    return "Correct!" if reward == 1.0 else f"Incorrect, the answer was {task['answer']}"


def step_result(value: int) -> tuple[str, float, bool]:
    """(text, reward, finished) of `step(value)`."""
    return f"step {value}", value / 10, value >= STEP_DONE_AT


def fill_text(n_chars: int, fill: str) -> str:
    """Exactly `n_chars` characters: `fill` repeated and cut."""
    return (fill * (n_chars // len(fill) + 1))[:n_chars]


def secret_names_text(secrets: Mapping[str, str]) -> str:
    """The sorted secret names, comma-separated, or "(none)"."""
    return ", ".join(sorted(secrets)) or NO_SECRETS


# A module-global counter, one per server process, to prove a tool body ran exactly once.
TALLY: dict[str, int] = {}


def bump(key: str) -> int:
    """Add one to the tally of `key` and return the new count."""
    TALLY[key] = TALLY.get(key, 0) + 1
    return TALLY[key]


def tally_big_text(n_chars: int) -> str:
    """What `tally_big` returns: `n_chars` characters, non-ASCII and spaces among them (the count is not in it)."""
    return fill_text(n_chars, "tally é 😀  ")


def tally_of(key: str) -> int:
    """The tally of `key`, without changing it."""
    return TALLY.get(key, 0)


# Tool inputs (pydantic models: both SDKs take one BaseModel parameter and publish its JSON schema).


class SubmitInput(BaseModel):
    """Input of `submit`."""

    answer: str = Field(description="Your answer.")


class StepInput(BaseModel):
    """Input of `step`."""

    value: int = Field(description="The step value: reward is value / 10, finished when value >= 3.")


class BigOutputInput(BaseModel):
    """Input of `big_output`."""

    n_chars: int = Field(ge=0, le=64 * 1024 * 1024, description="How many characters to return (at most 64 Mi).")
    fill: str = Field(default="x", min_length=1, description="The text to repeat (cut to n_chars).")


class SlowInput(BaseModel):
    """Input of `slow`."""

    seconds: float = Field(ge=0, le=600, description="How long to sleep.")


class TallyInput(BaseModel):
    """Input of `tally`."""

    key: str = Field(description="The counter to increment.")
    delay: float = Field(default=0.0, ge=0, le=600, description="Seconds to sleep before counting.")


class TallyBigInput(BaseModel):
    """Input of `tally_big`."""

    key: str = Field(description="The counter to increment.")
    n_chars: int = Field(ge=0, le=1024 * 1024, description="How many characters to return (at most 1 Mi).")


class TallyCountInput(BaseModel):
    """Input of `tally_count`."""

    key: str = Field(description="The counter to read.")


class EchoInput(BaseModel):
    """Input of `echo`."""

    text: str = Field(description="The text to echo back.")
