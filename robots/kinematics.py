"""Forward kinematics of a serial arm from robot.yaml's modified DH table, on any array API.

The deploy runtime computes the tool pose the policy observes from measured joint angles with
it (numpy); the simulator runs the same function on the noisy joint angles it gives the actor
(torch), so both sides see the same function of the same numbers. Quaternions are (w, x, y, z),
tool to base frame; composing quaternions needs no branches, unlike reading one back from a
rotation matrix.
"""

from __future__ import annotations

import math
from typing import Any

from array_api_compat import array_namespace

from simreal.robots.description import DHRow, Kinematics

Array = Any


def quat_mul(a: Array, b: Array) -> Array:
    """Hamilton product of (..., 4) quaternions."""
    xp = array_namespace(a, b)
    aw, ax, ay, az = a[..., 0], a[..., 1], a[..., 2], a[..., 3]
    bw, bx, by, bz = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    return xp.stack([aw * bw - ax * bx - ay * by - az * bz,
                     aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx,
                     aw * bz + ax * by - ay * bx + az * bw], axis=-1)


def quat_rotate(q: Array, v: Array) -> Array:
    """(..., 3) vectors v rotated by unit quaternions q."""
    xp = array_namespace(q, v)
    w, u = q[..., :1], q[..., 1:]
    t = 2.0 * _cross(xp, u, v)
    return v + w * t + _cross(xp, u, t)


def _cross(xp: Any, a: Array, b: Array) -> Array:
    return xp.stack([a[..., 1] * b[..., 2] - a[..., 2] * b[..., 1],
                     a[..., 2] * b[..., 0] - a[..., 0] * b[..., 2],
                     a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]], axis=-1)


def _fixed(xp: Any, like: Array, row: DHRow) -> tuple[Array, Array]:
    """The joint-independent part of a row: RotX(alpha) TransX(a) TransZ(d) as (pos, quat)."""
    ca, sa = math.cos(row.alpha), math.sin(row.alpha)
    pos = xp.asarray([row.a, -row.d * sa, row.d * ca], dtype=like.dtype, device=like.device)
    half = row.alpha / 2
    quat = xp.asarray([math.cos(half), math.sin(half), 0.0, 0.0], dtype=like.dtype,
                      device=like.device)
    return pos, quat


def forward_kinematics(kin: Kinematics, q: Array) -> tuple[Array, Array]:
    """Tool position (..., 3) and orientation (..., 4) in the base frame for joint angles
    (..., n), n >= len(kin.dh) (extra columns, e.g. a gripper, are ignored).

    Each row is RotX(alpha) TransX(a) RotZ(theta + q) TransZ(d); since TransZ commutes with
    RotZ, the row's translation is RotX(alpha) (a, 0, d) and its rotation RotX(alpha) RotZ.
    """
    xp = array_namespace(q)
    shape = q.shape[:-1]
    pos = xp.zeros((*shape, 3), dtype=q.dtype, device=q.device)
    quat = xp.zeros((*shape, 4), dtype=q.dtype, device=q.device) + xp.asarray(
        [1.0, 0.0, 0.0, 0.0], dtype=q.dtype, device=q.device)
    for i, row in enumerate(kin.dh):
        offset, rot = _fixed(xp, q, row)
        pos = pos + quat_rotate(quat, xp.broadcast_to(offset, pos.shape))
        half = (q[..., i] + row.theta) / 2
        zero = xp.zeros_like(half)
        qz = xp.stack([xp.cos(half), zero, zero, xp.sin(half)], axis=-1)
        quat = quat_mul(quat, quat_mul(xp.broadcast_to(rot, quat.shape), qz))
    offset, rot = _fixed(xp, q, kin.flange)
    flange = kin.flange
    zrot = xp.asarray([math.cos(flange.theta / 2), 0.0, 0.0, math.sin(flange.theta / 2)],
                      dtype=q.dtype, device=q.device)
    pos = pos + quat_rotate(quat, xp.broadcast_to(offset, pos.shape))
    quat = quat_mul(quat, xp.broadcast_to(quat_mul(rot, zrot), quat.shape))
    tool = xp.asarray(kin.tool_position, dtype=q.dtype, device=q.device)
    pos = pos + quat_rotate(quat, xp.broadcast_to(tool, pos.shape))
    tool_q = xp.asarray(kin.tool_quat, dtype=q.dtype, device=q.device)
    quat = quat_mul(quat, xp.broadcast_to(tool_q, quat.shape))
    return pos, quat
