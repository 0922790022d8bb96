"""Where tasks are found: the built-in tasks, then other packages' entry points.

A user's package adds a task without editing simreal, in its pyproject.toml:

    [project.entry-points."simreal.tasks"]
    my-task = "my_pkg.tasks:MyTask"

or by naming it as `package.module:Class` on the command line. `module:Class@robot` binds a
task class written for a kind of robot to one robot (registered name or folder): a second
quadruped's velocity tracking is its robot folder plus

    a1-flat = "simreal.sim.tasks.legged:LeggedVelocity@a1"

with no task code. Names resolve to import paths without importing them, so listing tasks
costs neither torch nor mujoco.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib.metadata import entry_points

from simreal.robots.registry import UnknownNameError, load_object

BUILTIN_TASKS: dict[str, str] = {
    "quadrotor-hover": "simreal.sim.tasks.quadrotor_hover:QuadrotorHover@crazyflie",
    "quadrotor-track": "simreal.sim.tasks.quadrotor_track:QuadrotorTrack@crazyflie",
    "go2-flat": "simreal.sim.tasks.legged:LeggedVelocity@go2",
    "go2-rough": "simreal.sim.tasks.legged_rough:LeggedRough@go2",
    "arm-reach": "simreal.sim.tasks.arm_reach:ArmReach@panda",
    "arm-lift": "simreal.sim.tasks.arm_lift:ArmLift@panda",
}


@dataclass(frozen=True)
class TaskEntry:
    """A registered task: its `module:Class[@robot]` target, not imported."""

    target: str

    @property
    def robot(self) -> str:
        """The robot it runs: the target's binding, else (importing it) the class's own."""
        path, _, robot = self.target.partition("@")
        return robot or load_object(path).robot_name


def task_names() -> dict[str, str]:
    names = dict(BUILTIN_TASKS)
    for ep in entry_points(group="simreal.tasks"):
        names.setdefault(ep.name, ep.value)
    return names


@functools.cache
def _load(target: str, name: str | None) -> type:
    """The class `target` names; with `@robot`, a subclass bound to that robot and to `name`
    (the task name its contracts and checkpoints record). Cached: one class per binding."""
    path, _, robot = target.partition("@")
    cls = load_object(path)
    if not robot or (robot == cls.robot_name and name in (None, cls.name)):
        return cls
    attrs = {"robot_name": robot, "__module__": cls.__module__}
    if name is not None:
        attrs["name"] = name
    return type(cls.__name__, (cls,), attrs)


def task_entries() -> dict[str, TaskEntry]:
    return {name: TaskEntry(target) for name, target in task_names().items()}


def get_task(name: str) -> type:
    """The task class for a registered name or a `module:Class[@robot]` path."""
    known = task_names()
    if name in known:
        return _load(known[name], name)
    if ":" in name:
        try:
            return _load(name, None)
        except (ImportError, AttributeError) as exc:
            raise UnknownNameError(f"cannot load task {name!r}: {exc}") from None
    raise UnknownNameError(f"unknown task {name!r}; known tasks: {', '.join(sorted(known))}")
