"""The test environments on the ors-sdk reference server (`from ors import ...`).

Serve with `serve("tests.envs.ors_sdk_envs:ENVIRONMENTS", sdk="ors-sdk")`. The code is
`tests/envs/lab_envs.py`, made here on ors-sdk; the data and texts are in `tests/envs/common.py`.
"""

from __future__ import annotations

import ors

from tests.envs.lab_envs import environments

Lab, Echo = environments(ors)
ENVIRONMENTS: list[type[ors.Environment]] = [Lab, Echo]
