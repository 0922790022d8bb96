"""Observation terms, written once against the Python array API.

The simulator calls these on batched torch tensors and the deploy runtime on numpy arrays, so
the policy sees the same function of the same physical state on both sides. Each term reads
named signals from a mapping (the signal names are the robot.yaml sensor roles plus the
runtime's own: `last_action` and the task's commands) and returns an array of shape (..., dim).

Conventions: quaternions are MuJoCo's (w, x, y, z), body to world; vectors are in the world
frame unless a name says otherwise; gyro readings are in the body frame.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from simreal.core.spatial import namespace as _namespace
from simreal.core.spatial import quat_to_matrix, rotate_inverse
from simreal.robots.legs import leg_odometry_velocity

Array = Any
Signals = Mapping[str, Array]


def _projected_gravity(s: Signals) -> Array:
    # R^T (0, 0, -1) is minus R's last row: rotate_inverse's numbers, without its temporaries
    return -quat_to_matrix(s["orientation"])[..., 2, :]


def _rotation_matrix(s: Signals) -> Array:
    r = quat_to_matrix(s["orientation"])
    if type(r) is np.ndarray:
        return r.reshape(*r.shape[:-2], 9)
    xp = _namespace(r)
    return xp.reshape(r, (*r.shape[:-2], 9))


def _rotation_error(s: Signals) -> Array:
    """2 sign(w) v of q_ee q_target^-1 = (w, v): the axis times 2 sin(angle/2) (the angle
    itself for small errors) of the rotation from the target to the tool, base frame. The
    target is normalized here: a command clamped to its trained range may not be unit."""
    a, b = s["ee_orientation"], s["target_orientation"]
    xp = _namespace(a, b)
    b = b / xp.sqrt(xp.sum(b * b, axis=-1, keepdims=True))
    aw, ax, ay, az = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    bw, bx, by, bz = b[..., 0], -b[..., 1], -b[..., 2], -b[..., 3]  # conjugate
    w = aw * bw - ax * bx - ay * by - az * bz
    v = xp.stack([aw * bx + ax * bw + ay * bz - az * by,
                  aw * by - ax * bz + ay * bw + az * bx,
                  aw * bz + ax * by - ay * bx + az * bw], axis=-1)
    sign = xp.where(w < 0, -2.0, 2.0)
    return v * sign[..., None]


def _object_rotation_matrix(s: Signals) -> Array:
    r = quat_to_matrix(s["object_orientation"])
    if type(r) is np.ndarray:
        return r.reshape(*r.shape[:-2], 9)
    xp = _namespace(r)
    return xp.reshape(r, (*r.shape[:-2], 9))


@dataclass(frozen=True)
class Term:
    """One named observation term: what it reads and how many numbers it gives. A term with
    `legs` is called as fn(signals, legs) with its contract entry's leg model."""

    fn: Callable[..., Array]
    dim: int | str  # an int, or the name of a robot size ("actions")
    reads: tuple[str, ...]
    legs: bool = False


def _leg_odometry(s: Signals, legs: Any) -> Array:
    return leg_odometry_velocity(legs, s["joint_pos"], s["joint_vel"], s["angular_velocity"],
                                 s["orientation"], s.get("joint_effort"))


TERMS: dict[str, Term] = {
    "position_error": Term(lambda s: s["position"] - s["target_position"], 3,
                           ("position", "target_position")),
    # the same error, for a term the contract integrates (ObsTerm.integral_time_constant_s)
    "position_error_integral": Term(lambda s: s["position"] - s["target_position"], 3,
                                    ("position", "target_position")),
    "rotation_matrix": Term(_rotation_matrix, 9, ("orientation",)),
    "projected_gravity": Term(_projected_gravity, 3, ("orientation",)),
    "linear_velocity": Term(lambda s: s["linear_velocity"], 3, ("linear_velocity",)),
    # a moving reference's velocity (world frame): nav_msgs/Odometry on /reference on a robot
    "target_velocity": Term(lambda s: s["target_velocity"], 3, ("target_velocity",)),
    "base_lin_vel": Term(lambda s: rotate_inverse(s["orientation"], s["linear_velocity"]), 3,
                         ("orientation", "linear_velocity")),
    "angular_velocity": Term(lambda s: s["angular_velocity"], 3, ("angular_velocity",)),
    "last_action": Term(lambda s: s["last_action"], "actions", ("last_action",)),
    # joint robots: joint signals are in policy (actuator) order; `default_joint_pos` is
    # robot.yaml's default pose, which the runtime supplies
    "joint_pos_rel": Term(lambda s: s["joint_pos"] - s["default_joint_pos"], "actions",
                          ("joint_pos", "default_joint_pos")),
    "joint_vel": Term(lambda s: s["joint_vel"], "actions", ("joint_vel",)),
    # legged robots: the trunk's velocity from the legs in stance (m/s, base frame;
    # robots/legs.py), what a blind actor can close its speed loop on
    "leg_odometry_velocity": Term(_leg_odometry, 3, ("joint_pos", "joint_vel", "joint_effort",
                                                    "angular_velocity", "orientation"),
                                  legs=True),
    # (forward m/s, lateral m/s, yaw rate rad/s) in the base frame: cmd_vel on a robot
    "velocity_command": Term(lambda s: s["velocity_command"], 3, ("velocity_command",)),
    # arms: the tool pose (forward kinematics of the measured joints, robots/kinematics.py)
    # against a commanded pose; an object's pose as a camera-based estimator gives it
    "ee_position_error": Term(lambda s: s["ee_position"] - s["target_position"], 3,
                              ("ee_position", "target_position")),
    "ee_rotation_error": Term(_rotation_error, 3, ("ee_orientation", "target_orientation")),
    "object_position_rel": Term(lambda s: s["object_position"] - s["ee_position"], 3,
                                ("object_position", "ee_position")),
    "object_rotation_matrix": Term(_object_rotation_matrix, 9, ("object_orientation",)),
    # the object's height above the commanded lift height (m)
    "lift_height_error": Term(lambda s: s["object_position"][..., 2:3] - s["lift_height"], 1,
                              ("object_position", "lift_height")),
}


def term_dim(name: str, num_actions: int) -> int:
    dim = TERMS[name].dim
    return num_actions if dim == "actions" else int(dim)


def term_reads(term: Any) -> tuple[str, ...]:
    """The signals a contract's observation term (an ObsTerm) reads: its Term's, less the joint
    torques when its leg model judges stance by foot height (a JointState without effort
    serves that policy)."""
    reads = TERMS[term.name].reads
    legs = getattr(term, "legs", None)
    if legs is not None and legs.stance_torque is None:
        return tuple(r for r in reads if r != "joint_effort")
    return reads


def reads_of(terms: Iterable[Any]) -> frozenset[str]:
    """Every signal a list of contract observation terms reads."""
    return frozenset(sig for t in terms for sig in term_reads(t))


def contract_reads(contract: Any) -> frozenset[str]:
    """Every robot signal a policy contract needs: its terms' and its command feedback's."""
    fb = contract.command_feedback
    return reads_of(contract.observations) | frozenset(fb.reads() if fb is not None else ())
