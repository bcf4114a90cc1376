"""What the wild-shaped test environments share across both reference servers.

Public ORS environments written by others have shapes the `lab` and `echo` environments lack. These
three environments have them, each in the way such environments are written:

- `game2048` (a 2048 game): every hook and tool is a plain sync function (openreward runs them in a
  thread, ors-sdk on its event loop); the game is dealt in `get_prompt`, so a tool called before
  `/prompt` raises (an SSE `error`); the board tool takes an empty input model
  (`{"properties": {}}`) and answers `reward: null`; the tiles come from one random generator the
  whole server process shares, seeded by each game's `get_prompt`, so a seed replays its game only
  while one session plays at a time.
- `gsm8k` (grade-school word problems): only a `train` split; `submit` ends the episode, and what a
  second `submit` gets is the SDK's own rule (openreward refuses it, ors-sdk grades it again).
- `port` (a container port's shift): ten tools; three read the state (`reward: null`, empty input
  models, one of them a ~11 KB manifest that comes in three SSE events), seven act and earn small
  rewards (`end_shift`, which ends the episode, takes an empty model too), which sum to
  `PORT_FULL_REWARD` (0.15) over a well-played episode.

`tests/envs/wild_ors_sdk.py` (ors-sdk) and `tests/envs/wild_openreward.py` (openreward) serve them
with the one code of `tests/envs/wild_envs.py`; the games, the problems, the port and every text
live here, and tests import this module to know what the servers answer.
The word problems are written for these tests in GSM8K's shape (a question; an answer whose last line
is `#### <number>`); none is GSM8K's own.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

ENV_NAMES = ["game2048", "gsm8k", "port"]  # registration order: "game2048" is the default env

# -- game2048 ------------------------------------------------------------------------------------------

SIZE = 4
Board = list[list[int]]
Direction = Literal["up", "down", "left", "right"]
DIRECTIONS: tuple[Direction, ...] = ("up", "down", "left", "right")
REWARD_SCALE = 100
"""A move's reward is the value of the tiles it merged over this (merging two 2s earns 0.04)."""
NO_GAME = "no game is dealt yet: get_prompt deals the board"
"""What a game2048 tool raises before the session's `/prompt` (the public 2048 environment fails the
same way, with an AttributeError on its missing game)."""
GAME_OVER = "the game is over"

GAME_TASKS: dict[str, list[dict[str, Any]]] = {
    "train": [{"id": "g0", "seed": 7, "max_moves": 6}, {"id": "g1", "seed": 8, "max_moves": 6}],
    "test": [
        {"id": "g2", "seed": 20, "max_moves": 5},
        {"id": "g3", "seed": 21, "max_moves": 5},
        {"id": "g4", "seed": 22, "max_moves": 5},
    ],
}
GAME_SPLITS_WIRE = [{"name": "train", "type": "train"}, {"name": "test", "type": "test"}]
GAME_TOOLS = ["board", "move"]

RNG = random.Random()
"""The one generator a server process deals and spawns every game's tiles from (as the public 2048
environment uses the `random` module): each `get_prompt` seeds it with its task's seed."""


def _slide_row(row: Sequence[int]) -> tuple[list[int], int]:
    """One row slid to the left, equal neighbours merged once; and the value of the merged tiles."""
    tiles = [value for value in row if value]
    out: list[int] = []
    gained = 0
    i = 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(2 * tiles[i])
            gained += 2 * tiles[i]
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return out + [0] * (SIZE - len(out)), gained


def slide(board: Board, direction: Direction) -> tuple[Board, int]:
    """The board after sliding it towards `direction`, and the value of the tiles merged."""
    turned = [list(col) for col in zip(*board, strict=True)] if direction in ("up", "down") else [*map(list, board)]
    if direction in ("right", "down"):
        turned = [row[::-1] for row in turned]
    slid, gained = [], 0
    for row in turned:
        new, value = _slide_row(row)
        slid.append(new)
        gained += value
    if direction in ("right", "down"):
        slid = [row[::-1] for row in slid]
    if direction in ("up", "down"):
        slid = [list(col) for col in zip(*slid, strict=True)]
    return slid, gained


def board_text(board: Board) -> str:
    """The board as rows of right-aligned numbers, `.` for an empty cell."""
    return "\n".join(" ".join(f"{value or '.':>4}" for value in row) for row in board)


class Game:
    """A 2048 game: dealt from `rng` seeded with `seed`, over after `max_moves` moves or when stuck.

    Tests play it with generators of their own to know what the servers answer.
    """

    def __init__(self, seed: int, max_moves: int, rng: random.Random) -> None:
        rng.seed(seed)
        self.rng = rng
        self.max_moves = max_moves
        self.board: Board = [[0] * SIZE for _ in range(SIZE)]
        self.score = 0
        self.moves = 0
        self.spawn()
        self.spawn()

    def spawn(self) -> None:
        """A 2 (or, one time in ten, a 4) on a random empty cell."""
        empty = [(r, c) for r in range(SIZE) for c in range(SIZE) if not self.board[r][c]]
        r, c = self.rng.choice(empty)
        self.board[r][c] = 4 if self.rng.random() < 0.1 else 2

    def stuck(self) -> bool:
        """No direction moves a tile."""
        return all(slide(self.board, direction)[0] == self.board for direction in DIRECTIONS)

    def over(self) -> bool:
        return self.moves >= self.max_moves or self.stuck()

    def move(self, direction: Direction) -> tuple[str, float, bool]:
        """(text, reward, finished) of one move; a new tile appears after a move that changed the board."""
        if self.over():
            return f"{GAME_OVER}: score {self.score}", 0.0, True
        slid, gained = slide(self.board, direction)
        self.moves += 1
        if slid == self.board:
            text = f"{direction}: nothing moved"
        else:
            self.board = slid
            self.score += gained
            self.spawn()
            text = f"{direction}: +{gained}"
        return f"{text}\n{board_text(self.board)}", gained / REWARD_SCALE, self.over()

    def state(self) -> dict[str, int]:
        """The metadata of every game2048 result: the score and the moves made."""
        return {"score": self.score, "moves": self.moves}


def new_game(task: Mapping[str, Any], rng: random.Random = RNG) -> Game:
    """The game of a game2048 task, dealt from `rng` (the server's shared one unless given)."""
    return Game(int(task["seed"]), int(task["max_moves"]), rng)


def game_prompt(game: Game) -> str:
    """The game2048 prompt: the rules and the dealt board."""
    return (
        f"Play 2048 for at most {game.max_moves} moves with the move tool (up, down, left, right); "
        f"merged tiles score.\n{board_text(game.board)}"
    )


def on_event_loop() -> bool:
    """Whether the calling code runs on an asyncio event loop (ors-sdk's sync tools do; openreward's run in a
    worker thread): game2048's `move` says it in its metadata."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class NoInput(BaseModel):  # no docstring: its schema is then only `{"properties": {}, "title": ..., "type": "object"}`
    pass


class MoveInput(BaseModel):
    """Input of `move`."""

    direction: Direction = Field(description="Where to slide the tiles.")


# -- gsm8k ------------------------------------------------------------------------------------------

GSM8K_TASKS: dict[str, list[dict[str, str]]] = {
    "train": [
        {
            "id": "w0",
            "question": "Muffins come in boxes of 6. Mia buys 4 boxes and gives 5 muffins away. "
            "How many muffins does she have left?",
            "answer": "4 boxes hold 4 * 6 = <<4*6=24>>24 muffins.\n24 - 5 = <<24-5=19>>19 are left.\n#### 19",
        },
        {
            "id": "w1",
            "question": "A train runs at 45 miles an hour for 3 hours, then at 60 miles an hour for 2 hours. "
            "How many miles does it run in all?",
            "answer": "45 * 3 = <<45*3=135>>135 and 60 * 2 = <<60*2=120>>120.\n135 + 120 = <<135+120=255>>255"
            "\n#### 255",
        },
        {
            "id": "w2",
            "question": "Leo saves $12 a week. How many weeks does he need to save for a bike that costs $1,020?",
            "answer": "1020 / 12 = <<1020/12=85>>85 weeks.\n#### 85",
        },
        {
            "id": "w3",
            "question": "A garden has 8 rows of 14 tulips. A rabbit eats 23 of them. How many tulips are left?",
            "answer": "8 * 14 = <<8*14=112>>112 tulips.\n112 - 23 = <<112-23=89>>89.\n#### 89",
        },
    ]
}
GSM8K_SPLITS_WIRE = [{"name": "train", "type": "train"}]
GSM8K_TOOLS = ["submit"]
CORRECT = "Correct!"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def gold(task: Mapping[str, Any]) -> str:
    """The number after the answer's `####`."""
    return str(task["answer"]).rsplit("####", 1)[1].strip()


def number(text: str) -> float | None:
    """The last number in `text` ("$1,020" is 1020), or None."""
    found = _NUMBER.findall(text.replace(",", ""))
    return float(found[-1]) if found else None


def gsm8k_prompt(task: Mapping[str, Any]) -> str:
    """The gsm8k prompt for a task."""
    return f"{task['question']}\nGive your final answer, a number, with the submit tool."


def gsm8k_grade(task: Mapping[str, Any], answer: str) -> tuple[str, float, dict[str, Any]]:
    """(text, reward, metadata) of `submit(answer)`: 1.0 when its last number is the gold one."""
    right = number(answer) == float(gold(task))
    text = CORRECT if right else f"Incorrect: the answer was {gold(task)}"
    return text, 1.0 if right else 0.0, {"gold": gold(task), "submitted": answer}


class AnswerInput(BaseModel):
    """Input of `submit`."""

    answer: str = Field(description="Your final answer.")


# -- port ------------------------------------------------------------------------------------------

PORT_TASKS: dict[str, list[dict[str, Any]]] = {
    "test": [
        {"id": "p0", "ship": "MV Aurora", "berths": 3, "seed": 11, "containers": 156},
        {"id": "p1", "ship": "MV Borealis", "berths": 2, "seed": 12, "containers": 156},
        {"id": "p2", "ship": "MV Cassiopeia", "berths": 4, "seed": 13, "containers": 156},
    ]
}
PORT_SPLITS_WIRE = [{"name": "test", "type": "test"}]
PORT_TOOLS = [
    "assign_berth",
    "berths",
    "dispatch_truck",
    "end_shift",
    "inspect",
    "manifest",
    "move_crane",
    "stack",
    "unload",
    "weather",
]  # as /tools lists them (sorted by name)
PORT_READS = ("berths", "manifest", "weather")
"""The tools that read the state: `reward: null`, an empty input model."""
PORT_REWARDS = {
    "assign_berth": 0.02,
    "move_crane": 0.01,
    "unload": 0.03,
    "inspect": 0.01,
    "stack": 0.02,
    "dispatch_truck": 0.03,
    "end_shift": 0.03,
}
"""The most each acting tool earns in an episode (its share of the work done, in steps of the work)."""
PORT_FULL_REWARD = 0.15
"""The sum of PORT_REWARDS: what a well-played shift earns in all."""
YARD_BLOCKS = "ABCD"
HOLD = "customs hold"
_KINDS = ("dry", "reefer", "tank", "flat", "open-top")
_PLACES = ("Rotterdam", "Hamburg", "Antwerp", "Valencia", "Genoa", "Piraeus", "Gdansk", "Le Havre")


def manifest_lines(task: Mapping[str, Any]) -> list[str]:
    """One line per container of the ship (from the task's seed, by a generator of its own); one is on hold."""
    rng = random.Random(int(task["seed"]))
    held = rng.randrange(int(task["containers"]))
    lines = []
    for n in range(int(task["containers"])):
        owner = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(3))
        container = f"{owner}U{rng.randrange(10**7):07d}"
        size = rng.choice((20, 40))
        status = HOLD if n == held else "cleared"
        lines.append(f"{container}  {size}ft  {rng.choice(_KINDS):<8}  {rng.uniform(2, 30):5.1f} t  "
                     f"{rng.choice(_PLACES):<9}  seal {rng.randrange(10**6):06d}  {status}")  # fmt: skip
    return lines


def manifest_text(task: Mapping[str, Any]) -> str:
    """What `manifest` returns: a header, then the containers (about 11 KB)."""
    lines = manifest_lines(task)
    return f"manifest of {task['ship']}: {len(lines)} containers\n" + "\n".join(lines)


def held_container(task: Mapping[str, Any]) -> str:
    """The id of the container on customs hold."""
    return next(line.split()[0] for line in manifest_lines(task) if line.endswith(HOLD))


def occupied_berth(task: Mapping[str, Any]) -> int:
    """The berth another ship holds."""
    return int(task["seed"]) % int(task["berths"]) + 1


def port_prompt(task: Mapping[str, Any]) -> str:
    """The port prompt for a task."""
    return (
        f"{task['ship']} is arriving with {task['containers']} containers; the port has {task['berths']} berths. "
        "Berth it, unload it, clear customs, stack the containers in the yard, truck them out, then end the shift."
    )


class Port:
    """One shift at the port: a ship to berth, unload, inspect, stack and dispatch.

    Each acting method returns (text, reward, finished); a reward is its tool's PORT_REWARDS share
    of the work it did (nothing when it did none), so a shift that does all of it earns 0.15.
    """

    def __init__(self, task: Mapping[str, Any]) -> None:
        self.task = task
        self.total = int(task["containers"])
        self.berth: int | None = None
        self.crane: int | None = None
        self.unloaded = 0
        self.inspected = False
        self.stacked = 0
        self.dispatched = 0

    def berths(self) -> str:
        taken = occupied_berth(self.task)
        lines = [f"berth {n}: " + ("occupied" if n == taken else self.task["ship"] if n == self.berth else "free")
                 for n in range(1, int(self.task["berths"]) + 1)]  # fmt: skip
        return "\n".join(lines)

    def weather(self) -> str:
        wind = 8 + int(self.task["seed"]) % 7
        return f"wind {wind} kn from the north-west: the cranes may work"

    def assign_berth(self, berth: int) -> tuple[str, float, bool]:
        if self.berth is not None:
            return f"{self.task['ship']} is at berth {self.berth} already", 0.0, False
        if not 1 <= berth <= int(self.task["berths"]):
            return f"there is no berth {berth}", 0.0, False
        if berth == occupied_berth(self.task):
            return f"berth {berth} is occupied", 0.0, False
        self.berth = berth
        return f"{self.task['ship']} berthed at {berth}", PORT_REWARDS["assign_berth"], False

    def move_crane(self, berth: int) -> tuple[str, float, bool]:
        if self.berth is None or berth != self.berth:
            return f"no ship of ours at berth {berth}", 0.0, False
        if self.crane == berth:
            return f"the crane is at berth {berth} already", 0.0, False
        self.crane = berth
        return f"crane at berth {berth}", PORT_REWARDS["move_crane"], False

    def _share(self, tool: str, done: int) -> float:
        return PORT_REWARDS[tool] * (done / self.total)

    def unload(self, count: int) -> tuple[str, float, bool]:
        if self.crane is None:
            return "no crane is at the ship", 0.0, False
        done = max(min(count, self.total - self.unloaded), 0)
        self.unloaded += done
        return f"unloaded {done}; {self.total - self.unloaded} on board", self._share("unload", done), False

    def inspect(self, container: str) -> tuple[str, float, bool]:
        ids = {line.split()[0] for line in manifest_lines(self.task)}
        if container not in ids:
            return f"no container {container} on the manifest", 0.0, False
        if container != held_container(self.task):
            return f"{container} is cleared already", 0.0, False
        if self.inspected:
            return f"{container} is inspected already", 0.0, False
        self.inspected = True
        return f"{container} inspected: released", PORT_REWARDS["inspect"], False

    def stack(self, block: str) -> tuple[str, float, bool]:
        if block not in YARD_BLOCKS:
            return f"there is no yard block {block!r}; the blocks are {', '.join(YARD_BLOCKS)}", 0.0, False
        done = self.unloaded - self.stacked
        self.stacked += done
        return f"stacked {done} in block {block}", self._share("stack", done), False

    def dispatch_truck(self, count: int) -> tuple[str, float, bool]:
        if not self.inspected:
            return f"{held_container(self.task)} is on {HOLD}: nothing leaves before it is inspected", 0.0, False
        done = max(min(count, self.stacked - self.dispatched), 0)
        self.dispatched += done
        text = f"dispatched {done}; {self.total - self.dispatched} still here"
        return text, self._share("dispatch_truck", done), False

    def end_shift(self) -> tuple[str, float, bool]:
        text = f"shift over: {self.dispatched} of {self.total} containers out"
        return text, self._share("end_shift", self.dispatched), True


class BerthInput(BaseModel):
    """Input of `assign_berth` and `move_crane`."""

    berth: int = Field(description="The berth's number.")


class CountInput(BaseModel):
    """Input of `unload` and `dispatch_truck`."""

    count: int = Field(ge=0, description="How many containers.")


class ContainerInput(BaseModel):
    """Input of `inspect`."""

    container: str = Field(description="The container's id, as the manifest lists it.")


class BlockInput(BaseModel):
    """Input of `stack`."""

    block: str = Field(description="The yard block: A, B, C or D.")
