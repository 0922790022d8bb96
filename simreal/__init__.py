"""simreal: sim-to-real robot control. The Python API behind the `simreal` command.

    from simreal import make_env, train, export, evaluate
"""

import os

# MuJoCo's batch threads and torch's OpenMP threads share the cores: OpenMP workers that
# spin after each torch op slow the physics by ~20% (measured). Read when torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__all__ = ["evaluate", "export", "make_env", "train"]


def __getattr__(name: str):
    # the API (and with it torch) loads on first use, so that `simreal deploy` and
    # `simreal tasks` stay free of torch and mujoco
    if name in __all__:
        from simreal import api

        return getattr(api, name)
    raise AttributeError(f"module 'simreal' has no attribute {name!r}")
