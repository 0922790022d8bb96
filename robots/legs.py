"""Leg odometry: the trunk's velocity from the legs in stance, on any array API.

A blind walking policy does not measure its speed: it sees joint states and the IMU, and its
speed is what its gait gives on the dynamics it was trained on (docs/SIM2SIM.md, "Which way
the rows miss": 0.1 m/s fast with 20 ms of command latency, a half slow on a damped model).
A foot in stance does not move over the ground, so the trunk moves opposite to it:

    v_base = -(omega x p + dp/dt)        (base frame)

with p the foot's contact point relative to the trunk (forward kinematics of the measured
joint angles), dp/dt its velocity from the joint rates, and omega the gyro. Which feet are
in stance is judged from the legs alone, so that every interface (a JointState and an Imu
message, or a Go2 LowState) can give it: the loaded legs, each weighted by softmax(sum of
its joints' |torque| / stance_torque), or (`stance_sigma`) the feet lowest along gravity,
weighted by exp(-(height above the lowest foot) / stance_sigma), which the encoders' noise
upsets (a few mm of height: measured in sim/legs.py), or both (the exponents add: on damped
joints swing legs carry torque too, and height tells them apart; sim/legs.py). The contact
point is the bottom of the foot's sphere along gravity, a point of the rolling foot that is
still in stance.

The simulator (on the noisy, aged signals the actor sees) and the deploy runtime (on the
robot's) compute it with this function and the leg model that the policy contract carries
(`deploy.contract.LegModel`), so both sides see the same function of the same numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simreal.core.spatial import cross, namespace, quat_to_matrix

Array = Any


class _Tables:
    """A leg model as arrays over (legs, joints), shorter legs padded with still joints
    (column 0, masked out), so that each joint level is one batched step for all legs."""

    def __init__(self, legs: Any):
        n_legs, depth = len(legs.chains), max(len(c.joints) for c in legs.chains)
        self.columns = np.zeros((n_legs, depth), dtype=np.int64)
        self.mask = np.zeros((n_legs, depth))
        self.origins = np.zeros((n_legs, depth, 3))
        axes = np.tile([1.0, 0.0, 0.0], (n_legs, depth, 1))
        for i, c in enumerate(legs.chains):
            k = len(c.joints)
            self.columns[i, :k], self.mask[i, :k] = c.joints, 1.0
            self.origins[i, :k], axes[i, :k] = c.origins, c.axes
        self.axes = axes
        x, y, z = axes[..., 0], axes[..., 1], axes[..., 2]
        zero = np.zeros_like(x)
        self.skew = np.stack([np.stack([zero, -z, y], -1), np.stack([z, zero, -x], -1),
                              np.stack([-y, x, zero], -1)], -2)  # (legs, depth, 3, 3)
        self.skew2 = self.skew @ self.skew
        self.foot = np.array([c.foot for c in legs.chains])
        self.radius = np.array([c.radius for c in legs.chains])[:, None]
        self.torque = legs.stance_torque
        self.sigma = legs.stance_sigma
        self._cast: dict[tuple, tuple] = {}

    def cast(self, xp: Any, like: Array) -> tuple:
        """The constant arrays in like's namespace, dtype and device (made once each)."""
        device = getattr(like, "device", None)
        key = (xp.__name__, str(like.dtype), str(device))
        if key not in self._cast:
            self._cast[key] = tuple(
                xp.asarray(a, dtype=like.dtype, device=device) if a.dtype != np.int64
                else xp.asarray(a, device=device)
                for a in (self.columns, self.mask, self.origins, self.axes, self.skew,
                          self.skew2, self.foot, self.radius))
        return self._cast[key]


_TABLES: dict[int, tuple[Any, _Tables]] = {}


def _tables(legs: Any) -> _Tables:
    hit = _TABLES.get(id(legs))
    if hit is None or hit[0] is not legs:  # keyed by identity, the model kept alive with it
        if len(_TABLES) > 64:
            _TABLES.clear()
        hit = _TABLES[id(legs)] = (legs, _Tables(legs))
    return hit[1]


def leg_odometry_velocity(legs: Any, joint_pos: Array, joint_vel: Array,
                          angular_velocity: Array, orientation: Array,
                          joint_effort: Array | None = None) -> Array:
    """The trunk's velocity (..., 3), m/s in the base frame, from joint angles, rates and
    torques (..., n) in policy order, the gyro (..., 3, base frame) and the IMU quaternion
    (..., 4). `legs`: a LegModel (chains: joints, origins, axes, foot, radius; the stance
    rule: stance_torque, which needs joint_effort, stance_sigma, or both)."""
    xp = namespace(joint_pos, joint_vel, angular_velocity, orientation)
    t = _tables(legs)
    columns, mask, origins, axes, skew, skew2, foot, radius = t.cast(xp, joint_pos)
    down = -quat_to_matrix(orientation)[..., 2, :]  # gravity's direction in the base frame
    flat = xp.reshape(columns, (-1,))
    q, dq = xp.take(joint_pos, flat, axis=-1), xp.take(joint_vel, flat, axis=-1)
    shape = (*joint_pos.shape[:-1], *columns.shape)
    q, dq = xp.reshape(q, shape) * mask, xp.reshape(dq, shape) * mask  # (..., legs, depth)
    sin, cos = xp.sin(q)[..., None, None], xp.cos(q)[..., None, None]
    turn = skew * sin + skew2 * (1.0 - cos)  # Rodrigues, less the identity
    rot = None  # each leg's frame after the joints so far (identity before the first)
    pos = xp.zeros_like(origins[..., 0, :]) + xp.zeros_like(down[..., None, :])
    pivots, rates = [], []  # each joint's position and axis x rate, base frame
    for k in range(columns.shape[1]):
        if rot is None:
            pos = pos + origins[:, k]
            axis = xp.zeros_like(pos) + axes[:, k]
            rot = turn[..., k, :, :] + xp.eye(3, dtype=q.dtype, device=getattr(q, "device",
                                                                              None))
        else:
            pos = pos + (rot @ origins[:, k, :, None])[..., 0]
            axis = (rot @ axes[:, k, :, None])[..., 0]
            rot = rot + rot @ turn[..., k, :, :]
        pivots.append(pos)
        rates.append(axis * dq[..., k, None])
    centre = pos + (rot @ foot[..., None])[..., 0]
    contact = centre + radius * down[..., None, :]  # (..., legs, 3)
    # the velocity of the foot's material point at the contact, relative to the trunk
    point_vel = cross(xp, rates[0], contact - pivots[0])
    for r, p in zip(rates[1:], pivots[1:], strict=True):
        point_vel = point_vel + cross(xp, r, contact - p)
    vel = -(cross(xp, angular_velocity[..., None, :], contact) + point_vel)
    load = 0.0
    if t.torque is not None:  # the loaded legs
        if joint_effort is None:
            raise ValueError("leg odometry with stance_torque needs the joint torques")
        tau = xp.take(joint_effort, flat, axis=-1)
        load = xp.sum(xp.abs(xp.reshape(tau, shape)) * mask, axis=-1) / t.torque
    if t.sigma is not None:  # the lowest feet: how far down along gravity
        load = load + xp.sum(contact * down[..., None, :], axis=-1) / t.sigma
    weight = xp.exp(load - xp.max(load, axis=-1, keepdims=True))
    return xp.sum(vel * weight[..., None], axis=-2) / xp.sum(weight, axis=-1, keepdims=True)
