"""Leg odometry: the trunk's velocity from the legs in stance, on any array API.

A blind walking policy does not measure its speed: it sees joint states and the IMU, and its
speed is what its gait gives on the dynamics it was trained on (docs/SIM2SIM.md, "Which way
the rows miss": 0.1 m/s fast with 20 ms of command latency, a half slow on a damped model).
A foot in stance does not move over the ground, so the trunk moves opposite to it:

    v_base = -(omega x p + dp/dt)        (base frame)

with p the foot's contact point relative to the trunk (forward kinematics of the measured
joint angles), dp/dt its velocity from the joint rates, and omega the gyro. Which feet are
in stance is judged from the legs alone, so that every interface (a JointState and an Imu
message, or a Go2 LowState) can give it: the feet lowest along gravity, each weighted by
exp(-(its height above the lowest foot) / stance_sigma). The contact point is the bottom of
the foot's sphere along gravity, a point of the rolling foot that is still in stance.

The simulator (on the noisy, aged signals the actor sees) and the deploy runtime (on the
robot's) compute it with this function and the leg model that the policy contract carries
(`deploy.contract.LegModel`), so both sides see the same function of the same numbers.
"""

from __future__ import annotations

from typing import Any

from simreal.core.spatial import cross, namespace, quat_to_matrix

Array = Any


def _skew(xp: Any, a: tuple[float, float, float], like: Array) -> Array:
    x, y, z = a
    return xp.asarray([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]], dtype=like.dtype,
                      device=getattr(like, "device", None))


def _matvec(m: Array, v: Array) -> Array:
    return (m @ v[..., None])[..., 0]


def leg_odometry_velocity(legs: Any, joint_pos: Array, joint_vel: Array,
                          angular_velocity: Array, orientation: Array) -> Array:
    """The trunk's velocity (..., 3), m/s in the base frame, from joint angles and rates
    (..., n) in policy order, the gyro (..., 3, base frame) and the IMU quaternion (..., 4).
    `legs`: a LegModel (chains: joints, origins, axes, foot, radius; stance_sigma)."""
    xp = namespace(joint_pos, joint_vel, angular_velocity, orientation)
    like = joint_pos
    down = -quat_to_matrix(orientation)[..., 2, :]  # gravity's direction in the base frame
    shape = joint_pos.shape[:-1]
    eye = xp.asarray([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=like.dtype,
                     device=getattr(like, "device", None))
    velocities, depths = [], []
    for leg in legs.chains:
        rot = xp.broadcast_to(eye, (*shape, 3, 3))
        pos = xp.zeros((*shape, 3), dtype=like.dtype, device=getattr(like, "device", None))
        pivots, rates = [], []  # each joint's position and axis x rate (base frame)
        for col, origin, axis in zip(leg.joints, leg.origins, leg.axes, strict=True):
            pos = pos + _matvec(rot, xp.asarray(origin, dtype=like.dtype,
                                                device=getattr(like, "device", None)))
            k = _skew(xp, axis, like)
            world_axis = _matvec(rot, xp.asarray(axis, dtype=like.dtype,
                                                 device=getattr(like, "device", None)))
            pivots.append(pos)
            rates.append(world_axis * joint_vel[..., col:col + 1])
            q = joint_pos[..., col][..., None, None]
            rot = rot @ (eye + xp.sin(q) * k + (1.0 - xp.cos(q)) * (k @ k))  # Rodrigues
        centre = pos + _matvec(rot, xp.asarray(leg.foot, dtype=like.dtype,
                                               device=getattr(like, "device", None)))
        contact = centre + leg.radius * down
        # the velocity of the foot's material point at the contact (relative to the trunk)
        point_vel = sum((cross(xp, r, contact - p) for r, p in zip(rates, pivots, strict=True)),
                        xp.zeros_like(contact))
        velocities.append(-(cross(xp, angular_velocity, contact) + point_vel))
        depths.append(xp.sum(contact * down, axis=-1))  # how far down along gravity
    depth = xp.stack(depths, axis=-1)
    weight = xp.exp((depth - xp.max(depth, axis=-1, keepdims=True)) / legs.stance_sigma)
    vel = xp.stack(velocities, axis=-2)
    return xp.sum(vel * weight[..., None], axis=-2) / xp.sum(weight, axis=-1, keepdims=True)
