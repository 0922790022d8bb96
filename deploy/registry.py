"""Robot interfaces by (robot kind, flavour): the one table the deploy node, the HIL robot and
calibration build their interface from.

A new interface is one RobotInterface subclass (deploy/interfaces.py: its codecs, and
`from_settings` to build it) and one entry, at run time:

    register_interface("legged", "my-native", MyNative)

or, from a package, without editing simreal, in its pyproject.toml (loaded on first lookup;
a built-in or explicitly registered pair wins over an entry point of the same name):

    [project.entry-points."simreal.interfaces"]
    "legged.my-native" = "my_pkg.interfaces:MyNative"     # <robot kind>.<flavour>

The robot kinds are robots/description.py's: robots/ sits below deploy/ and cannot consult this
table, so a kind is checked against it here, when an interface is looked up.
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points

from simreal.deploy.arm import ArmGeneric
from simreal.deploy.interfaces import (
    Go2Native,
    InterfaceError,
    InterfaceSettings,
    JointGeneric,
    Px4Native,
    QuadGeneric,
    RobotInterface,
)
from simreal.robots import Robot
from simreal.robots.registry import UnknownNameError, load_object

log = logging.getLogger("simreal.interfaces")

ENTRY_POINT_GROUP = "simreal.interfaces"

INTERFACES: dict[tuple[str, str], type[RobotInterface]] = {
    ("quadrotor", "generic"): QuadGeneric,
    ("quadrotor", "native"): Px4Native,  # PX4 (uXRCE-DDS)
    ("legged", "generic"): JointGeneric,
    ("legged", "native"): Go2Native,  # Unitree Go2 (unitree_go LowState / LowCmd)
    ("arm", "generic"): ArmGeneric,  # ros2_control
}

_entry_points_loaded = False


class UnknownInterfaceError(UnknownNameError, InterfaceError):
    """No interface is registered for a (kind, flavour); the message lists the pairs that are."""


def register_interface(kind: str, flavour: str, cls: type[RobotInterface],
                       replace: bool = False) -> type[RobotInterface]:
    """Serve robots of `kind` with `cls` as their `flavour` interface; returns `cls`."""
    if not (isinstance(cls, type) and issubclass(cls, RobotInterface)):
        raise TypeError(f"interface {kind}.{flavour}: {cls!r} is not a RobotInterface subclass")
    key = (kind, flavour)
    if not replace and INTERFACES.get(key, cls) is not cls:
        raise ValueError(f"interface {kind}.{flavour} is already {INTERFACES[key].__name__}; "
                         "pass replace=True to replace it")
    INTERFACES[key] = cls
    return cls


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        kind, _, flavour = ep.name.partition(".")
        if not kind or not flavour:
            log.warning("entry point %r (%s) skipped: name it <robot kind>.<flavour>", ep.name,
                        ENTRY_POINT_GROUP)
            continue
        if (kind, flavour) not in INTERFACES:
            register_interface(kind, flavour, load_object(ep.value))


def registered() -> dict[tuple[str, str], type[RobotInterface]]:
    """Every (kind, flavour) and its class, entry points included."""
    _load_entry_points()
    return dict(INTERFACES)


def flavours_of(kind: str) -> list[str]:
    """The flavours a robot of `kind` has, in registration order."""
    return [f for k, f in registered() if k == kind]


def flavours() -> list[str]:
    """Every registered flavour name, of any kind (what a configuration may name)."""
    return sorted({f for _, f in registered()})


def known_pairs() -> str:
    return ", ".join(f"{k}.{f}" for k, f in sorted(registered()))


def interface_class(kind: str, flavour: str) -> type[RobotInterface]:
    """The class serving robots of `kind` as their `flavour` interface."""
    try:
        return registered()[(kind, flavour)]
    except KeyError:
        raise UnknownInterfaceError(
            f"robot kind {kind!r} has no {flavour!r} interface; registered (kind.flavour): "
            f"{known_pairs()}") from None


def build_interface(robot: Robot, flavour: str, settings: InterfaceSettings) -> RobotInterface:
    """The robot's `flavour` interface: the one factory of the node, the HIL robot and
    calibration (each wraps InterfaceError in its own error type)."""
    return interface_class(robot.spec.kind, flavour).from_settings(robot, settings)
