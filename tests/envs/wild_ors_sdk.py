"""The wild-shaped test environments on the ors-sdk reference server (`from ors import ...`).

Serve with `serve("tests.envs.wild_ors_sdk:ENVIRONMENTS", sdk="ors-sdk")`. The code is `tests/envs/wild_envs.py`,
loaded here on ors-sdk.
"""

from tests.envs.wild_common import load_for

ENVIRONMENTS = load_for("ors", __name__).ENVIRONMENTS
