"""The wild-shaped test environments, written once for both reference servers.

Plain Python: this module imports no SDK. `environments(sdk)` makes the three environment classes on
the SDK module it is handed, `ors` (ors-sdk) or `openreward.environments` (openreward), as
`tests/envs/lab_envs.py` makes `lab` and `echo`: `tests/envs/wild_ors_sdk.py` and
`tests/envs/wild_openreward.py` are the adapters that hand their SDK over. The games, problems, port
and texts are in `tests/envs/wild_common.py`.

No `from __future__ import annotations` here: both SDKs read a tool's annotations with
`get_type_hints`, which cannot resolve the names of the SDK this function is handed (they are its
locals) from text, so the annotations are the objects themselves.
"""

from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from tests.envs import wild_common
from tests.envs.wild_common import AnswerInput, BerthInput, BlockInput, ContainerInput, CountInput, MoveInput, NoInput


def environments(sdk: ModuleType) -> tuple[Any, Any, Any]:
    """`Game2048`, `GSM8K` and `Port`, in registration order ("game2048" is the default env), made on `sdk`."""
    Environment, JSONObject, Split, TextBlock, ToolOutput, tool = (
        sdk.Environment, sdk.JSONObject, sdk.Split, sdk.TextBlock, sdk.ToolOutput, sdk.tool)  # fmt: skip

    def _text(text: str, **fields: object) -> ToolOutput:
        """A ToolOutput of one text block (plus reward, finished, metadata as given)."""
        return ToolOutput(blocks=[TextBlock(text=text)], **fields)

    class Game2048(Environment):
        """2048, written in plain sync functions, the game dealt in get_prompt from the process's one generator."""

        def __init__(self, task_spec: JSONObject | None = None, secrets: Mapping[str, str] | None = None) -> None:
            """No game until get_prompt deals one."""
            super().__init__(task_spec=task_spec or {}, secrets=dict(secrets or {}))
            self.game: wild_common.Game | None = None

        @classmethod
        def list_splits(cls) -> Sequence[Split | str]:
            """`train` and `test`, bare."""
            return ["train", "test"]

        @classmethod
        def list_tasks(cls, split: str) -> Sequence[JSONObject]:
            """The fixed games of `split`."""
            return [dict(task) for task in wild_common.GAME_TASKS[split]]

        def get_prompt(self) -> list[TextBlock]:
            """Deal the game (seeding the shared generator) and show it."""
            self.game = wild_common.new_game(self.task_spec)
            return [TextBlock(text=wild_common.game_prompt(self.game))]

        def _game(self) -> wild_common.Game:
            if self.game is None:
                raise RuntimeError(wild_common.NO_GAME)
            return self.game

        @tool
        def board(self, params: NoInput) -> ToolOutput:
            """Show the board, the score and the moves made."""
            game = self._game()
            return _text(wild_common.board_text(game.board), metadata=game.state())

        @tool
        def move(self, params: MoveInput) -> ToolOutput:
            """Slide the tiles up, down, left or right: the merged tiles' value / 100 as reward."""
            game = self._game()
            text, reward, finished = game.move(params.direction)
            metadata = {**game.state(), "on_event_loop": wild_common.on_event_loop()}
            return _text(text, reward=reward, finished=finished, metadata=metadata)

    class GSM8K(Environment):
        """Word problems with only a `train` split; `submit` grades the answer and ends the episode."""

        @classmethod
        def list_splits(cls) -> Sequence[Split | str]:
            """Only `train`."""
            return [Split(name="train", type="train")]

        @classmethod
        def list_tasks(cls, split: str) -> Sequence[JSONObject]:
            """The problems of `split`."""
            return [dict(task) for task in wild_common.GSM8K_TASKS[split]]

        async def get_prompt(self) -> list[TextBlock]:
            """The question."""
            return [TextBlock(text=wild_common.gsm8k_prompt(self.task_spec))]

        @tool
        async def submit(self, params: AnswerInput) -> ToolOutput:
            """Submit the final answer: reward 1.0 if its last number is right, else 0.0; ends the episode."""
            text, reward, metadata = wild_common.gsm8k_grade(self.task_spec, params.answer)
            return _text(text, reward=reward, finished=True, metadata=metadata)

    class Port(Environment):
        """A shift at a container port: ten tools, small rewards for the work done."""

        def __init__(self, task_spec: JSONObject | None = None, secrets: Mapping[str, str] | None = None) -> None:
            """The ship of the task, waiting at sea."""
            super().__init__(task_spec=task_spec or {}, secrets=dict(secrets or {}))
            self.port = wild_common.Port(self.task_spec)

        @classmethod
        def list_splits(cls) -> Sequence[Split | str]:
            """Only `test`."""
            return ["test"]

        @classmethod
        def list_tasks(cls, split: str) -> Sequence[JSONObject]:
            """The ships of `split`."""
            return [dict(task) for task in wild_common.PORT_TASKS[split]]

        async def get_prompt(self) -> list[TextBlock]:
            """The ship and the work to do."""
            return [TextBlock(text=wild_common.port_prompt(self.task_spec))]

        def _act(self, result: tuple[str, float, bool]) -> ToolOutput:
            text, reward, finished = result
            return _text(text, reward=reward, finished=finished)

        @tool
        async def manifest(self, params: NoInput) -> ToolOutput:
            """List the ship's containers (one is on customs hold)."""
            return _text(wild_common.manifest_text(self.task_spec))

        @tool
        async def berths(self, params: NoInput) -> ToolOutput:
            """Show which berths are free."""
            return _text(self.port.berths())

        @tool
        async def weather(self, params: NoInput) -> ToolOutput:
            """Show the wind at the cranes."""
            return _text(self.port.weather())

        @tool
        async def assign_berth(self, params: BerthInput) -> ToolOutput:
            """Berth the ship at a free berth."""
            return self._act(self.port.assign_berth(params.berth))

        @tool
        async def move_crane(self, params: BerthInput) -> ToolOutput:
            """Move the crane to the ship's berth."""
            return self._act(self.port.move_crane(params.berth))

        @tool
        async def unload(self, params: CountInput) -> ToolOutput:
            """Unload containers from the ship (the crane must be at its berth)."""
            return self._act(self.port.unload(params.count))

        @tool
        async def inspect(self, params: ContainerInput) -> ToolOutput:
            """Inspect a container (the one on customs hold must be)."""
            return self._act(self.port.inspect(params.container))

        @tool
        async def stack(self, params: BlockInput) -> ToolOutput:
            """Stack the unloaded containers in a yard block."""
            return self._act(self.port.stack(params.block))

        @tool
        async def dispatch_truck(self, params: CountInput) -> ToolOutput:
            """Truck stacked containers out (nothing leaves before the hold is inspected)."""
            return self._act(self.port.dispatch_truck(params.count))

        @tool
        async def end_shift(self, params: NoInput) -> ToolOutput:
            """End the shift: ends the episode."""
            return self._act(self.port.end_shift())

    return Game2048, GSM8K, Port
