"""The wild-shaped test environments on the openreward reference server (`from openreward.environments import ...`).

Serve with `serve("tests.envs.wild_openreward:ENVIRONMENTS", sdk="openreward")`. The code is `tests/envs/wild_envs.py`,
loaded here on openreward.
"""

from tests.envs.wild_common import load_for

ENVIRONMENTS = load_for("openreward.environments", __name__).ENVIRONMENTS
