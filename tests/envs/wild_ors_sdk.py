"""The wild-shaped test environments on the ors-sdk reference server (`from ors import ...`).

Serve with `serve("tests.envs.wild_ors_sdk:ENVIRONMENTS", sdk="ors-sdk")`. The code is `tests/envs/wild_envs.py`,
made here on ors-sdk.
"""

from __future__ import annotations

import ors as sdk

from tests.envs.wild_envs import environments

Game2048, GSM8K, Port = environments(sdk)
ENVIRONMENTS: list[type[sdk.Environment]] = [Game2048, GSM8K, Port]
