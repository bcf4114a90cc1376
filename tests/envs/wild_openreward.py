"""The wild-shaped test environments on the openreward reference server (`from openreward.environments import ...`).

Serve with `serve("tests.envs.wild_openreward:ENVIRONMENTS", sdk="openreward")`. The code is `tests/envs/wild_envs.py`,
made here on openreward.
"""

from __future__ import annotations

from openreward import environments as sdk

from tests.envs.wild_envs import environments

Game2048, GSM8K, Port = environments(sdk)
ENVIRONMENTS: list[type[sdk.Environment]] = [Game2048, GSM8K, Port]
