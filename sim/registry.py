"""Where tasks are found: the built-in tasks, then other packages' entry points.

A user's package adds a task without editing simreal, in its pyproject.toml:

    [project.entry-points."simreal.tasks"]
    my-task = "my_pkg.tasks:MyTask"

or by naming it as `package.module:Class` on the command line. Names resolve to import paths
without importing them, so listing tasks costs neither torch nor mujoco.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from simreal.robots.registry import UnknownNameError, load_object

BUILTIN_TASKS: dict[str, str] = {
    "quadrotor-hover": "simreal.sim.tasks.quadrotor_hover:QuadrotorHover",
    "go2-flat": "simreal.sim.tasks.go2_locomotion:Go2Flat",
    "go2-rough": "simreal.sim.tasks.go2_rough:Go2Rough",
    "arm-reach": "simreal.sim.tasks.arm_reach:ArmReach",
    "arm-lift": "simreal.sim.tasks.arm_lift:ArmLift",
}


def task_names() -> dict[str, str]:
    names = dict(BUILTIN_TASKS)
    for ep in entry_points(group="simreal.tasks"):
        names.setdefault(ep.name, ep.value)
    return names


def get_task(name: str) -> type:
    """The task class for a registered name or a `module:Class` path."""
    known = task_names()
    if name in known:
        return load_object(known[name])
    if ":" in name:
        try:
            return load_object(name)
        except (ImportError, AttributeError) as exc:
            raise UnknownNameError(f"cannot load task {name!r}: {exc}") from None
    raise UnknownNameError(f"unknown task {name!r}; known tasks: {', '.join(sorted(known))}")
