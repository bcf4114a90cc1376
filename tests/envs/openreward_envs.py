"""The test environments on the openreward reference server (`from openreward.environments import ...`).

Serve with `serve("tests.envs.openreward_envs:ENVIRONMENTS", sdk="openreward")`. The code is
`tests/envs/lab_envs.py`, made here on openreward; the data and texts are in `tests/envs/common.py`.
"""

from __future__ import annotations

from openreward import environments as sdk

from tests.envs.lab_envs import environments

Lab, Echo = environments(sdk)
ENVIRONMENTS: list[type[sdk.Environment]] = [Lab, Echo]
