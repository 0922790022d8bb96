"""Joint limits for the safety layer, read from the robot description without MuJoCo.

Position ranges come from the MJCF as MuJoCo would resolve them: a joint's own `range`, else
its class's (`class`, or the nearest enclosing body's `childclass`, else the top default),
through the chain of nested `<default>` classes; in degrees unless `<compiler angle="radian">`
(MuJoCo's default unit for hinge ranges is the degree). Velocity and torque limits and PD gains
come from robot.yaml (`joints[i].velocity_limit`, `torque_limit`, `kp`, `kd`); a policy
contract's `action.kp`/`action.kd`, when present, win over robot.yaml's gains.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import numpy as np

from simreal.deploy.contract import PolicyContract
from simreal.robots import Robot


class LimitsError(ValueError):
    pass


def _defaults(root: ET.Element) -> dict[str, dict[str, str]]:
    """Joint attributes of each default class, inherited down the class tree."""
    out: dict[str, dict[str, str]] = {}

    def walk(el: ET.Element, name: str, inherited: dict[str, str]) -> None:
        attrs = dict(inherited)
        for joint in el.findall("joint"):
            attrs.update(joint.attrib)
        out[name] = attrs
        for child in el.findall("default"):
            walk(child, child.get("class", name), attrs)

    for top in root.findall("default"):
        walk(top, top.get("class", "main"), {})
    return out


def joint_ranges(robot: Robot) -> dict[str, tuple[float, float] | None]:
    """(low, high) in radians (or metres) of every joint in the MJCF; None when unlimited."""
    root = ET.parse(robot.mjcf_path).getroot()
    compiler = root.find("compiler")
    degrees = compiler is None or compiler.get("angle", "degree") == "degree"
    defaults = _defaults(root)
    out: dict[str, tuple[float, float] | None] = {}

    def walk(el: ET.Element, childclass: str) -> None:
        for child in el:
            if child.tag == "body":
                walk(child, child.get("childclass", childclass))
            elif child.tag == "joint" and child.get("name"):
                attrs = dict(defaults.get(child.get("class", childclass), {}))
                attrs.update(child.attrib)
                rng = attrs.get("range")
                if rng is None or attrs.get("limited") == "false":
                    out[child.get("name")] = None
                    continue
                lo, hi = (float(v) for v in rng.split())
                if degrees and attrs.get("type", "hinge") == "hinge":
                    lo, hi = math.radians(lo), math.radians(hi)
                out[child.get("name")] = (lo, hi)

    for world in root.findall("worldbody"):
        walk(world, "main")
    return out


@dataclass(frozen=True)
class CommandLimits:
    """Per-command limits in policy order, as arrays."""

    low: np.ndarray
    high: np.ndarray
    rate: np.ndarray | None  # units per second
    torque: np.ndarray | None  # N m per joint (inf where none)
    kp: np.ndarray | None
    kd: np.ndarray | None
    # torque_bounds' per-joint constants, computed once: (torque, kp) with (inf, 1) where a
    # joint has no torque limit or no positive kp
    _pd: tuple[np.ndarray, np.ndarray] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pd = None
        if self.torque is not None and self.kp is not None and self.kd is not None:
            free = ~np.isfinite(self.torque) | ~(self.kp > 0)
            pd = (np.where(free, np.inf, self.torque), np.where(free, 1.0, self.kp))
        object.__setattr__(self, "_pd", pd)


def command_limits(robot: Robot, contract: PolicyContract) -> CommandLimits:
    spec = robot.spec
    if contract.action.kind == "rotor_speed":
        n = len(robot.actuator_names)
        return CommandLimits(np.zeros(n), np.ones(n), None, None, None, None)
    ranges = joint_ranges(robot)
    missing = [j.name for j in spec.joints if ranges.get(j.name) is None]
    if missing:
        raise LimitsError(f"{robot.mjcf_path}: joints {missing} have no range; the safety "
                          "layer clamps joint position targets to each joint's range")
    low = np.array([ranges[j.name][0] for j in spec.joints])
    high = np.array([ranges[j.name][1] for j in spec.joints])

    def per_joint(values: list[float | None] | None) -> np.ndarray | None:
        if values is None or all(v is None for v in values):
            return None
        return np.array([np.inf if v is None else float(v) for v in values])

    rate = per_joint([j.velocity_limit for j in spec.joints])
    torque = per_joint([j.torque_limit for j in spec.joints])
    kp = contract.action.kp or [j.kp for j in spec.joints]
    kd = contract.action.kd or [j.kd for j in spec.joints]
    kp_a = None if any(v is None for v in kp) else np.array(kp, dtype=np.float64)
    kd_a = None if any(v is None for v in kd) else np.array(kd, dtype=np.float64)
    return CommandLimits(low, high, rate, torque, kp_a, kd_a)


def torque_bounds(limits: CommandLimits, q: np.ndarray, qd: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray] | None:
    """Position targets whose PD torque kp*(target - q) - kd*qd stays within the torque limit.

    None when the robot has no torque limits or no gains; +-inf for a joint without a limit
    (or without a positive kp). q and qd are finite (the node checks the state first); a NaN in
    them gives NaN bounds, which the safety layer ignores.
    """
    if limits._pd is None:
        return None
    torque, kp = limits._pd  # inf torque: the infinities give the unbounded joints' +-inf
    damp = limits.kd * qd
    return q + (damp - torque) / kp, q + (damp + torque) / kp
