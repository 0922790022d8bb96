"""Spatial math on any array API (numpy on the robot, torch in the simulator), written once.

Conventions: quaternions are MuJoCo's (w, x, y, z), body to world; vectors are (..., 3).
The deploy runtime's observation terms, the arm's forward kinematics, the tasks' rewards and
randomization all compute rotations with these functions, so the two sides cannot drift.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from array_api_compat import array_namespace

Array = Any
GRAVITY = 9.81  # m/s^2, MuJoCo's default |opt.gravity|


def namespace(*arrays: Array) -> Any:
    """numpy itself for numpy arrays, array_api_compat's namespace otherwise (torch).

    NumPy 2 implements the array API for what these terms use, and the compat wrapper's
    dispatch costs a few microseconds a call: a robot's batch-1 cycle paid it per term. The
    wrapper's numpy functions are numpy's, so the numbers are the same.
    """
    if all(type(a) is np.ndarray for a in arrays):
        return np
    return array_namespace(*arrays)


def _quat_to_matrix_coefficients() -> np.ndarray:
    """M (16, 9) with vec(R) = vec(q q^T) @ M for a unit quaternion q = (w, x, y, z).

    Each entry of a rotation matrix is a quadratic form in q, so one outer product and one
    matrix product give all nine: a handful of array operations instead of dozens, which is
    what a batch of small arrays pays for (measured in the simulator's step).
    """
    m = np.zeros((4, 4, 9))
    w, x, y, z = range(4)

    def add(i: int, j: int, k: int, sign: float) -> None:  # the term sign * 2 q_i q_j
        m[i, j, k] += sign
        m[j, i, k] += sign

    for k, signs in ((0, (1, 1, -1, -1)), (4, (1, -1, 1, -1)), (8, (1, -1, -1, 1))):
        for i, sign in enumerate(signs):  # diagonal: w^2 +- x^2 +- y^2 +- z^2
            m[i, i, k] = sign
    add(x, y, 1, 1), add(w, z, 1, -1)  # R01 = 2(xy - wz)
    add(x, z, 2, 1), add(w, y, 2, 1)  # R02 = 2(xz + wy)
    add(x, y, 3, 1), add(w, z, 3, 1)  # R10 = 2(xy + wz)
    add(y, z, 5, 1), add(w, x, 5, -1)  # R12 = 2(yz - wx)
    add(x, z, 6, 1), add(w, y, 6, -1)  # R20 = 2(xz - wy)
    add(y, z, 7, 1), add(w, x, 7, 1)  # R21 = 2(yz + wx)
    return m.reshape(16, 9)


_QUAT_TO_MATRIX = _quat_to_matrix_coefficients()
_QUAT_TO_MATRIX_AS: dict[tuple[str, str, str], Any] = {}


def quat_to_matrix(q: Array) -> Array:
    """Rotation matrices (..., 3, 3) from unit quaternions (..., 4) in (w, x, y, z) order."""
    if type(q) is np.ndarray:  # the same operations through ndarray methods (cheaper calls)
        outer = (q[..., :, None] * q[..., None, :]).reshape(*q.shape[:-1], 16)
        m = _QUAT_TO_MATRIX.astype(q.dtype, copy=False)
        return (outer @ m).reshape(*q.shape[:-1], 3, 3)
    xp = namespace(q)
    outer = xp.reshape(q[..., :, None] * q[..., None, :], (*q.shape[:-1], 16))
    key = (xp.__name__, str(q.dtype), str(q.device))
    m = _QUAT_TO_MATRIX_AS.get(key)
    if m is None:  # converted once per array library, dtype and device
        m = _QUAT_TO_MATRIX_AS[key] = xp.asarray(_QUAT_TO_MATRIX, dtype=q.dtype, device=q.device)
    return xp.reshape(xp.matmul(outer, m), (*q.shape[:-1], 3, 3))


def rotate_inverse(q: Array, v: Array) -> Array:
    """World vectors (..., 3) expressed in the body frame of orientation q."""
    xp = namespace(q, v)
    r = quat_to_matrix(q)
    return xp.sum(r * v[..., :, None], axis=-2)


def quat_mul(a: Array, b: Array) -> Array:
    """Hamilton product of (..., 4) quaternions."""
    xp = namespace(a, b)
    aw, ax, ay, az = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    bw, bx, by, bz = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return xp.stack([aw * bw - ax * bx - ay * by - az * bz,
                     aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx,
                     aw * bz + ax * by - ay * bx + az * bw], axis=-1)


def quat_rotate(q: Array, v: Array) -> Array:
    """(..., 3) vectors v rotated by unit quaternions q."""
    xp = namespace(q, v)
    w, u = q[..., :1], q[..., 1:]
    t = 2.0 * cross(xp, u, v)
    return v + w * t + cross(xp, u, t)


def cross(xp: Any, a: Array, b: Array) -> Array:
    """Cross products of (..., 3) vectors in namespace xp."""
    return xp.stack([a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
                     a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
                     a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]], axis=-1)


def quat_conjugate(q: Array) -> Array:
    """The inverse of unit quaternions (..., 4)."""
    xp = namespace(q)
    return xp.concat([q[..., :1], -q[..., 1:]], axis=-1)


def quat_rotate_inverse(q: Array, v: Array) -> Array:
    """(..., 3) vectors v rotated by the inverse of unit quaternions q (world to body)."""
    return quat_rotate(quat_conjugate(q), v)


def quat_angle(a: Array, b: Array) -> Array:
    """Angle (rad) of the rotation between unit quaternions a and b (..., 4); q and -q are
    the same rotation."""
    xp = namespace(a, b)
    dot = xp.clip(xp.abs(xp.sum(a * b, axis=-1)), max=1.0)
    return 2 * xp.acos(dot)


def yaw_of(q: Array) -> Array:
    """Heading (rad, about world z) of unit quaternions (..., 4)."""
    xp = namespace(q)
    w, x, y, z = q[..., 0], q[..., 1], q[..., 2], q[..., 3]
    return xp.atan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))


def wrap_angle(a: Array) -> Array:
    """Angles wrapped to [-pi, pi)."""
    xp = namespace(a)
    return xp.remainder(a + math.pi, 2 * math.pi) - math.pi
