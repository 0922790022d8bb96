"""Observation terms, written once against the Python array API.

The simulator calls these on batched torch tensors and the deploy runtime on numpy arrays, so
the policy sees the same function of the same physical state on both sides. Each term reads
named signals from a mapping (the signal names are the robot.yaml sensor roles plus the
runtime's own: `last_action` and the task's commands) and returns an array of shape (..., dim).

Conventions: quaternions are MuJoCo's (w, x, y, z), body to world; vectors are in the world
frame unless a name says otherwise; gyro readings are in the body frame.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from array_api_compat import array_namespace

Array = Any
Signals = Mapping[str, Array]


def quat_to_matrix(q: Array) -> Array:
    """Rotation matrices (..., 3, 3) from unit quaternions (..., 4) in (w, x, y, z) order."""
    xp = array_namespace(q)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    rows = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]
    return xp.stack([xp.stack(r, axis=-1) for r in rows], axis=-2)


def rotate_inverse(q: Array, v: Array) -> Array:
    """World vectors (..., 3) expressed in the body frame of orientation q."""
    xp = array_namespace(q, v)
    r = quat_to_matrix(q)
    return xp.sum(r * v[..., :, None], axis=-2)


def _projected_gravity(s: Signals) -> Array:
    q = s["orientation"]
    xp = array_namespace(q)
    down = xp.zeros_like(q[..., 1:])
    down = xp.stack([down[..., 0], down[..., 1], down[..., 2] - 1], axis=-1)
    return rotate_inverse(q, down)


def _rotation_matrix(s: Signals) -> Array:
    r = quat_to_matrix(s["orientation"])
    xp = array_namespace(r)
    return xp.reshape(r, (*r.shape[:-2], 9))


@dataclass(frozen=True)
class Term:
    """One named observation term: what it reads and how many numbers it gives."""

    fn: Callable[[Signals], Array]
    dim: int | str  # an int, or the name of a robot size ("actions")
    reads: tuple[str, ...]


TERMS: dict[str, Term] = {
    "position_error": Term(lambda s: s["position"] - s["target_position"], 3,
                           ("position", "target_position")),
    "rotation_matrix": Term(_rotation_matrix, 9, ("orientation",)),
    "projected_gravity": Term(_projected_gravity, 3, ("orientation",)),
    "linear_velocity": Term(lambda s: s["linear_velocity"], 3, ("linear_velocity",)),
    "base_lin_vel": Term(lambda s: rotate_inverse(s["orientation"], s["linear_velocity"]), 3,
                         ("orientation", "linear_velocity")),
    "angular_velocity": Term(lambda s: s["angular_velocity"], 3, ("angular_velocity",)),
    "last_action": Term(lambda s: s["last_action"], "actions", ("last_action",)),
}


def term_dim(name: str, num_actions: int) -> int:
    dim = TERMS[name].dim
    return num_actions if dim == "actions" else int(dim)
