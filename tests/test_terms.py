"""The observation terms and builder: one definition, same numbers on numpy and torch."""

import numpy as np
import pytest
import torch

from simreal.api import make_env
from simreal.deploy.contract import ObsTerm
from simreal.deploy.observation import ObservationBuilder
from simreal.deploy.terms import TERMS, quat_to_matrix


def _random_quats(n, seed=0):
    q = np.random.default_rng(seed).normal(size=(n, 4))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def test_quat_to_matrix_is_a_rotation_and_matches_mujoco():
    import mujoco

    q = _random_quats(16)
    r = quat_to_matrix(q)
    assert np.allclose(r @ np.swapaxes(r, -1, -2), np.eye(3), atol=1e-12)
    for qi, ri in zip(q, r, strict=True):
        ref = np.zeros(9)
        mujoco.mju_quat2Mat(ref, qi)
        assert np.allclose(ri.reshape(9), ref, atol=1e-12)


def test_projected_gravity_of_level_and_upside_down():
    level = np.array([1.0, 0, 0, 0])
    flipped = np.array([0.0, 1, 0, 0])  # 180 deg about x
    assert np.allclose(TERMS["projected_gravity"].fn({"orientation": level}), [0, 0, -1])
    assert np.allclose(TERMS["projected_gravity"].fn({"orientation": flipped}), [0, 0, 1])


def _legs(n: int):
    """A leg model over n joints (legs of up to three hinge joints) for the legged terms."""
    from simreal.deploy.contract import LegChain, LegModel

    origins = [(0.19, -0.05, 0.0), (0.0, -0.1, 0.0), (0.0, 0.0, -0.21)]
    axes = [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 1.0, 0.0)]
    chains = []
    for i in range(0, n, 3):
        k = min(3, n - i)
        chains.append(LegChain(joints=list(range(i, i + k)), origins=origins[:k],
                               axes=axes[:k], foot=(0.0, 0.0, -0.21), radius=0.02))
    return LegModel(chains=chains, stance_torque=2.0)


def call_term(name, sig, n):
    """TERMS[name] on the signals (with a leg model over n joints where it takes one)."""
    term = TERMS[name]
    return term.fn(sig, legs=_legs(n)) if term.legs else term.fn(sig)


@pytest.mark.parametrize("name", sorted(TERMS))
def test_every_term_gives_the_same_numbers_on_numpy_and_torch(name):
    rng = np.random.default_rng(1)
    sig = {
        "orientation": _random_quats(8), "position": rng.normal(size=(8, 3)),
        "target_position": rng.normal(size=(8, 3)), "linear_velocity": rng.normal(size=(8, 3)),
        "target_velocity": rng.normal(size=(8, 3)),
        "angular_velocity": rng.normal(size=(8, 3)), "last_action": rng.normal(size=(8, 4)),
        "joint_pos": rng.normal(size=(8, 4)), "default_joint_pos": rng.normal(size=(1, 4)),
        "joint_vel": rng.normal(size=(8, 4)), "joint_effort": rng.normal(size=(8, 4)),
        "velocity_command": rng.normal(size=(8, 3)),
        "ee_position": rng.normal(size=(8, 3)), "ee_orientation": _random_quats(8),
        "target_orientation": _random_quats(8), "object_position": rng.normal(size=(8, 3)),
        "object_orientation": _random_quats(8), "lift_height": rng.normal(size=(8, 1)),
    }
    a = call_term(name, sig, 4)
    b = call_term(name, {k: torch.from_numpy(v) for k, v in sig.items()}, 4).numpy()
    # Same formula, two libraries: numpy and torch may pick different kernels (FMA or not,
    # another summation order), so float64 results agree to rounding, not bit for bit. Inputs
    # are O(1) and every term is a few products and sums: 1e-12 relative (~5000 ulp) is far
    # above rounding and far below any formula mistake.
    assert a.shape == b.shape and a.shape[0] == 8
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_builder_scales_clips_and_keeps_history():
    terms = [ObsTerm(name="linear_velocity", dim=3, scale=2.0, clip=1.0, history=3)]
    b = ObservationBuilder(terms, num_actions=4)
    v = lambda x: {"linear_velocity": np.full((2, 3), x)}  # noqa: E731
    assert np.allclose(b.build(v(0.1)), 0.2)  # the first value fills the history
    out = b.build(v(0.3))
    assert np.allclose(out[:, :6], 0.2) and np.allclose(out[:, 6:], 0.6)
    out = b.build(v(5.0))
    assert np.allclose(out[:, 6:], 1.0)  # clipped
    b.reset(np.array([True, False]))
    out = b.build(v(0.05))
    assert np.allclose(out[0], 0.1)  # env 0 restarted its history
    assert np.allclose(out[1], [0.6] * 3 + [1.0] * 3 + [0.1] * 3)


def test_sim_observation_equals_deploy_observation_on_the_same_state():
    """Parity: the simulator's actor observation vs deploy's numpy builder, same signals, step
    by step (the terms' histories and the integral accumulate alike)."""
    env = make_env("quadrotor-hover", num_envs=32, seed=5)
    env.reset()
    sim_builder = ObservationBuilder(env.policy_terms(), 4, env.dt)
    deploy_builder = ObservationBuilder(env.contract().observations, 4, env.dt)
    for step in range(8):
        if step:
            env.step(torch.rand(32, 4, generator=env.generator) * 2 - 1)
        signals = env.signals()
        sim_obs = sim_builder.build(signals)
        deploy_obs = deploy_builder.build({k: v.numpy() for k, v in signals.items()})
    assert not env.get_observations()["critic"].isnan().any()
    assert deploy_obs.dtype == np.float32
    np.testing.assert_allclose(sim_obs.numpy(), deploy_obs, rtol=0, atol=1e-6)
    # and the critic's noise-free copy of the actor terms is that same vector (no episode
    # ended in these 8 steps, so no history was reset)
    assert int(env.episode_length_buf.min()) == 7
    critic = env.get_observations()["critic"][:, : env.contract().obs_dim]
    np.testing.assert_allclose(critic.numpy(), deploy_obs, atol=1e-6)


def test_integral_term_accumulates_decays_clips_and_resets():
    term = ObsTerm(name="position_error_integral", dim=3, clip=0.5, integral_time_constant_s=1.0)
    b = ObservationBuilder([term], num_actions=4, dt=0.1)
    sig = {"position": np.full((2, 3), 1.0), "target_position": np.zeros((2, 3))}
    decay = np.exp(-0.1)
    assert np.allclose(b.build(sig), 0.1)  # dt * error after one period
    assert np.allclose(b.build(sig), 0.1 * decay + 0.1)
    for _ in range(20):
        out = b.build(sig)
    assert np.allclose(out, 0.5)  # held at the clip: no wind-up beyond it
    b.reset(np.array([True, False]))
    out = b.build(sig)
    assert np.allclose(out[0], 0.1) and np.allclose(out[1], 0.5)
    with pytest.raises(ValueError, match="need the control period"):
        ObservationBuilder([term], num_actions=4)


def test_integral_term_is_the_same_on_numpy_and_torch():
    term = ObsTerm(name="position_error_integral", dim=3, scale=2.0, clip=3.0,
                   integral_time_constant_s=0.5)
    rng = np.random.default_rng(3)
    a, b = (ObservationBuilder([term], 4, dt=0.01) for _ in range(2))
    for _ in range(5):
        sig = {"position": rng.normal(size=(4, 3)), "target_position": rng.normal(size=(4, 3))}
        x = a.build(sig)
        y = b.build({k: torch.from_numpy(v) for k, v in sig.items()}).numpy()
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-12)


def test_shared_quaternion_helpers_agree_on_numpy_and_torch():
    import math

    from simreal.core.spatial import (
        quat_angle,
        quat_conjugate,
        quat_mul,
        quat_rotate,
        quat_rotate_inverse,
        wrap_angle,
        yaw_of,
    )

    a, b = _random_quats(16, seed=1), _random_quats(16, seed=2)
    v = np.random.default_rng(3).normal(size=(16, 3))
    ta, tb, tv = (torch.from_numpy(x) for x in (a, b, v))
    for fn, args in ((quat_angle, (a, b)), (yaw_of, (a,)), (quat_mul, (a, b)),
                     (quat_rotate, (a, v)), (quat_rotate_inverse, (a, v))):
        np.testing.assert_allclose(
            fn(*(torch.from_numpy(x) for x in args)).numpy(), fn(*args), atol=1e-12)
    # the angle of the relative rotation; q and -q are one rotation
    rel = quat_mul(tb, quat_conjugate(ta))
    np.testing.assert_allclose(quat_angle(ta, tb).numpy(),
                               2 * np.arccos(np.clip(np.abs(rel[:, 0].numpy()), 0, 1)),
                               atol=1e-6)
    np.testing.assert_allclose(quat_angle(a, -a), 0.0, atol=1e-6)
    # a yaw of psi about z reads back as psi; rotate_inverse undoes rotate
    psi = np.linspace(-3.0, 3.0, 7)
    q_yaw = np.stack([np.cos(psi / 2), 0 * psi, 0 * psi, np.sin(psi / 2)], -1)
    np.testing.assert_allclose(yaw_of(q_yaw), psi, atol=1e-12)
    np.testing.assert_allclose(quat_rotate_inverse(ta, quat_rotate(ta, tv)).numpy(), v,
                               atol=1e-12)
    np.testing.assert_allclose(wrap_angle(np.array([math.pi + 0.1, -math.pi - 0.1, 0.5])),
                               [-math.pi + 0.1, math.pi - 0.1, 0.5], atol=1e-12)
