"""Where tasks and robots are found: built-ins, then other packages' entry points.

A user's package extends simreal without editing it, by declaring in its pyproject.toml

    [project.entry-points."simreal.tasks"]
    my-task = "my_pkg.tasks:MyTask"

    [project.entry-points."simreal.robots"]
    my-robot = "my_pkg.robots:ROBOT_DIR"     # a str or Path of the folder with robot.yaml

or, for a task, by naming it as `package.module:Class` on the command line.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from robots import Robot, load_robot_dir

BUILTIN_TASKS: dict[str, str] = {
    "quadrotor-hover": "sim.tasks.quadrotor_hover:QuadrotorHover",
    "go2-flat": "sim.tasks.go2_locomotion:Go2Flat",
    "go2-rough": "sim.tasks.go2_rough:Go2Rough",
    "arm-reach": "sim.tasks.arm_reach:ArmReach",
    "arm-lift": "sim.tasks.arm_lift:ArmLift",
}
ROBOTS_DIR = Path(__file__).resolve().parent.parent / "robots"


class UnknownNameError(LookupError):
    """An unknown task or robot; the message lists the known ones."""


def _load_object(target: str) -> Any:
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, attr) if attr else module


def task_names() -> dict[str, str]:
    names = dict(BUILTIN_TASKS)
    for ep in entry_points(group="simreal.tasks"):
        names.setdefault(ep.name, ep.value)
    return names


def get_task(name: str) -> type:
    """The task class for a registered name or a `module:Class` path."""
    known = task_names()
    if name in known:
        return _load_object(known[name])
    if ":" in name:
        try:
            return _load_object(name)
        except (ImportError, AttributeError) as exc:
            raise UnknownNameError(f"cannot load task {name!r}: {exc}") from None
    raise UnknownNameError(f"unknown task {name!r}; known tasks: {', '.join(sorted(known))}")


def robot_dirs() -> dict[str, Path]:
    dirs = {p.parent.name: p.parent for p in sorted(ROBOTS_DIR.glob("*/robot.yaml"))}
    for ep in entry_points(group="simreal.robots"):
        dirs.setdefault(ep.name, Path(_load_object(ep.value)))
    return dirs


def get_robot(name: str) -> Robot:
    """A robot by registered name, or by the path of its folder."""
    dirs = robot_dirs()
    if name in dirs:
        return load_robot_dir(dirs[name])
    if Path(name).is_dir():
        return load_robot_dir(name)
    raise UnknownNameError(f"unknown robot {name!r}; known robots: {', '.join(sorted(dirs))}")
