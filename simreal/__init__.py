"""simreal: sim-to-real robot control. The Python API behind the `simreal` command.

    from simreal import make_env, train, export, evaluate

Every stage is a subpackage (`simreal.sim`, `simreal.train`, `simreal.deploy`, ...), each
mapped from its top-level folder (pyproject.toml).
"""

import os
import types

# MuJoCo's batch threads and torch's OpenMP threads share the cores: OpenMP workers that
# spin after each torch op slow the physics by ~20% (measured). Read when torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__all__ = ["evaluate", "export", "make_env", "train"]


class _CallableTrainPackage(types.ModuleType):
    """`simreal.train` is both the training package and, called, the API's `train()`.

    Python binds a subpackage to its parent's attribute of the same name whenever it is
    imported, so `from simreal import train` yields the package once anything imported
    `simreal.train.*`. Calling the package runs the API function, so both readings of
    `simreal.train` hold whatever was imported first.
    """

    def __call__(self, *args, **kwargs):
        from simreal.api import train

        return train(*args, **kwargs)


def _make_train_callable() -> None:
    import importlib

    # the package's __init__ alone: no torch
    importlib.import_module("simreal.train").__class__ = _CallableTrainPackage


_make_train_callable()


def __getattr__(name: str):
    # the API (and with it torch) loads on first use, so that `simreal deploy` and
    # `simreal tasks` stay free of torch and mujoco
    if name in __all__:
        from simreal import api

        return getattr(api, name)
    raise AttributeError(f"module 'simreal' has no attribute {name!r}")
