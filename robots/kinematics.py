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

from simreal.core.spatial import quat_mul, quat_rotate
from simreal.robots.description import DHRow, Kinematics

Array = Any


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
