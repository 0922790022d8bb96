"""simreal: sim-to-real robot control. The Python API behind the `simreal` command.

    from simreal import make_env, train, export, evaluate
"""

import os

# MuJoCo's batch threads and torch's OpenMP threads share the cores: OpenMP workers that
# spin after each torch op slow the physics by ~20% (measured). Read when torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from simreal.api import evaluate, export, make_env, train  # noqa: E402

__all__ = ["evaluate", "export", "make_env", "train"]
