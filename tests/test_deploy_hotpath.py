"""The deploy cycle's numpy shortcuts give the numbers of the code they stand in for.

A robot's cycle runs at batch 1 on numpy, where each array-API wrapper call and each
temporary array costs microseconds; deploy/ takes direct numpy paths there. These tests hold
each shortcut to the general path (or to the formula it replaced), bit for bit.
"""

import numpy as np
import pytest

from simreal.deploy import codecs
from simreal.deploy.limits import CommandLimits, torque_bounds
from simreal.deploy.terms import TERMS

from .test_terms import call_term


class _Wrapped(np.ndarray):
    """An ndarray the numpy shortcuts do not take: the term runs its array-API path, through
    array_api_compat's numpy namespace."""


def _quats(rng, shape):
    q = rng.normal(size=(*shape, 4))
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def _signals(rng, batch, dtype):
    n = 12
    sig = {"orientation": _quats(rng, (batch,)), "position": rng.normal(size=(batch, 3)),
           "target_position": rng.normal(size=(batch, 3)),
           "target_velocity": rng.normal(size=(batch, 3)),
           "linear_velocity": rng.normal(size=(batch, 3)),
           "angular_velocity": rng.normal(size=(batch, 3)),
           "last_action": rng.normal(size=(batch, n)), "joint_pos": rng.normal(size=(batch, n)),
           "default_joint_pos": rng.normal(size=(1, n)), "joint_vel": rng.normal(size=(batch, n)),
           "joint_effort": rng.normal(size=(batch, n)),
           "velocity_command": rng.normal(size=(batch, 3)),
           "ee_position": rng.normal(size=(batch, 3)), "ee_orientation": _quats(rng, (batch,)),
           "target_orientation": _quats(rng, (batch,)) * 1.1,
           "object_position": rng.normal(size=(batch, 3)),
           "object_orientation": _quats(rng, (batch,)), "lift_height": rng.normal(size=(batch, 1))}
    sig["orientation"][0] = [1.0, 0.0, 0.0, 0.0]  # level: exact zeros in the products
    return {k: v.astype(dtype) for k, v in sig.items()}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("name", sorted(TERMS))
def test_numpy_terms_equal_their_array_api_path(name, batch, dtype):
    sig = _signals(np.random.default_rng(batch), batch, dtype)
    fast = call_term(name, sig, 12)
    general = call_term(name, {k: v.view(_Wrapped) for k, v in sig.items()}, 12)
    assert type(fast) is np.ndarray and fast.dtype == general.dtype
    assert fast.shape == general.shape and np.array_equal(fast, np.asarray(general))


def _reference_torque_bounds(limits, q, qd):
    """torque_bounds as it was written before its constants were precomputed."""
    kp = np.where(limits.kp > 0, limits.kp, np.nan)
    damp = limits.kd * qd
    with np.errstate(invalid="ignore"):
        lo = q + (-limits.torque + damp) / kp
        hi = q + (limits.torque + damp) / kp
    free = ~np.isfinite(lo) | ~np.isfinite(hi)
    return np.where(free, -np.inf, lo), np.where(free, np.inf, hi)


def test_torque_bounds_equal_the_reference_formula():
    rng = np.random.default_rng(3)
    n = 6
    torque = np.array([23.7, np.inf, 45.4, 10.0, 5.0, 1.0])
    kp = np.array([20.0, 20.0, 0.0, 35.5, 0.1, 80.0])  # a joint without kp: unbounded
    limits = CommandLimits(np.full(n, -3.0), np.full(n, 3.0), None, torque, kp,
                           np.array([0.5, 0.5, 0.5, 0.0, 2.0, 1.0]))
    for _ in range(50):
        q, qd = rng.normal(size=n), rng.normal(size=n) * 10
        lo, hi = torque_bounds(limits, q, qd)
        ref_lo, ref_hi = _reference_torque_bounds(limits, q, qd)
        assert np.array_equal(lo, ref_lo) and np.array_equal(hi, ref_hi)
    assert np.isneginf(lo[[1, 2]]).all() and np.isposinf(hi[[1, 2]]).all()
    assert torque_bounds(CommandLimits(limits.low, limits.high, None, None, kp, None),
                         q, qd) is None


def test_rotate_equals_the_cross_product_formula():
    rng = np.random.default_rng(4)
    for _ in range(200):
        q = _quats(rng, ())
        v = rng.normal(size=3) * 10.0 ** rng.integers(-3, 4)
        u = q[1:]
        t = 2.0 * np.cross(u, v)
        assert np.array_equal(codecs.rotate(q, v), v + q[0] * t + np.cross(u, t))


def test_joint_state_and_imu_decoders_reorder_and_refuse_short_messages():
    from simreal.deploy import messages as m

    order = codecs.JointOrder(["b", "c", "a"])
    msg = m.JointState(name=["a", "b", "c"], position=[1.0, 2.0, 3.0],
                       velocity=[4.0, 5.0, 6.0], effort=[])
    sig = codecs.joint_state_signals(msg, order)
    assert sig["joint_pos"].tolist() == [2.0, 3.0, 1.0]
    assert sig["joint_vel"].tolist() == [5.0, 6.0, 4.0] and "joint_effort" not in sig
    msg.position = [1.0, 2.0]
    with pytest.raises(ValueError, match="3 names but 2 positions"):
        codecs.joint_state_signals(msg, order)
    msg.position, msg.velocity = [1.0, 2.0, 3.0], []
    with pytest.raises(ValueError, match="no velocity"):
        codecs.joint_state_signals(msg, order)
    imu = codecs.imu_signals(codecs.imu(np.array([0.5, 0.5, -0.5, 0.5]), np.array([1.0, 2, 3]),
                                        np.array([4.0, 5, 6])))
    assert imu["orientation"].tolist() == [0.5, 0.5, -0.5, 0.5]
    assert imu["angular_velocity"].tolist() == [1.0, 2.0, 3.0]
    assert imu["linear_acceleration"].tolist() == [4.0, 5.0, 6.0]
