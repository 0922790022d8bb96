"""Where robots are found: the folders beside this file, then other packages' entry points.

A user's package adds a robot without editing simreal, in its pyproject.toml:

    [project.entry-points."simreal.robots"]
    my-robot = "my_pkg.robots:ROBOT_DIR"     # a str or Path of the folder with robot.yaml
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from simreal.robots.description import Robot, load_robot_dir

ROBOTS_DIR = Path(__file__).resolve().parent


class UnknownNameError(LookupError):
    """An unknown task, robot or interface; the message lists the known ones."""


def load_object(target: str) -> Any:
    """The object a `package.module:attr` path names (the module itself without `:attr`)."""
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module


def robot_dirs() -> dict[str, Path]:
    dirs = {p.parent.name: p.parent for p in sorted(ROBOTS_DIR.glob("*/robot.yaml"))}
    for ep in entry_points(group="simreal.robots"):
        dirs.setdefault(ep.name, Path(load_object(ep.value)))
    return dirs


def get_robot(name: str) -> Robot:
    """A robot by registered name, or by the path of its folder."""
    dirs = robot_dirs()
    if name in dirs:
        return load_robot_dir(dirs[name])
    if Path(name).is_dir():
        return load_robot_dir(name)
    raise UnknownNameError(f"unknown robot {name!r}; known robots: {', '.join(sorted(dirs))}")
