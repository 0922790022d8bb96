"""Leg odometry (robots/legs.py, sim/legs.py): the trunk's velocity from the legs in stance,
the same function in the simulator (torch) and the deploy runtime (numpy), with the leg model
the policy contract carries."""

from __future__ import annotations

import math
from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch

from simreal import api
from simreal.deploy.contract import LegModel, ObsTerm, PolicyContract
from simreal.deploy.observation import ObservationBuilder
from simreal.deploy.policy import OnnxPolicy
from simreal.deploy.runner import PolicyRunner
from simreal.robots.legs import leg_odometry_velocity
from simreal.robots.registry import get_robot
from simreal.sim.legs import LegModelError, leg_model

ASSETS = Path(__file__).resolve().parent / "assets"


@pytest.fixture(scope="module")
def go2():
    robot = get_robot("go2")
    model = mujoco.MjModel.from_xml_path(str(robot.mjcf_path))
    return robot, model, leg_model(model, robot)


def test_the_leg_model_is_the_mjcfs(go2):
    robot, model, legs = go2
    assert [c.joints for c in legs.chains] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]
    assert legs.chains[0].origins[0] == pytest.approx((0.1934, -0.0465, 0.0))  # robots.md
    assert legs.chains[0].radius == pytest.approx(0.022)


def test_each_legs_estimate_is_the_trunks_velocity_less_its_contact_points(go2):
    """Per leg, -(omega x p + dp/dt) is the trunk's velocity less the velocity of the foot's
    point at the bottom of its sphere (MuJoCo's Jacobian at that point), in the base frame:
    zero when that point stands still. Random pose, joint rates and trunk motion."""
    robot, model, legs = go2
    rng = np.random.default_rng(0)
    data = mujoco.MjData(model)
    for _ in range(5):
        data.qpos[:3] = rng.normal(size=3)
        quat = rng.normal(size=4)
        data.qpos[3:7] = quat / np.linalg.norm(quat)
        cols = [model.jnt_qposadr[model.joint(j.name).id] for j in robot.spec.joints]
        dofs = [model.jnt_dofadr[model.joint(j.name).id] for j in robot.spec.joints]
        lo = np.array([model.joint(j.name).range[0] for j in robot.spec.joints])
        hi = np.array([model.joint(j.name).range[1] for j in robot.spec.joints])
        data.qpos[cols] = rng.uniform(lo, hi)
        data.qvel[:] = rng.normal(size=model.nv) * 2
        mujoco.mj_forward(model, data)
        rot = data.xmat[model.body(robot.spec.base_body).id].reshape(3, 3)
        v0 = rot.T @ data.qvel[:3]  # the free joint's linear velocity is in the world frame
        gyro = data.qvel[3:6].copy()  # ... and its angular velocity in the body frame
        q, dq = data.qpos[cols].copy(), data.qvel[dofs].copy()
        for foot, chain in zip(robot.spec.feet, legs.chains, strict=True):
            gid = model.geom(foot.geom).id
            point = data.geom_xpos[gid] + np.array([0.0, 0.0, -chain.radius])
            jacp = np.zeros((3, model.nv))
            mujoco.mj_jac(model, data, jacp, None, point, int(model.geom_bodyid[gid]))
            expected = v0 - rot.T @ (jacp @ data.qvel)
            one = LegModel(chains=[chain], stance_torque=2.0)
            got = leg_odometry_velocity(one, q, dq, gyro, data.qpos[3:7].copy(), np.ones(12))
            np.testing.assert_allclose(got, expected, atol=1e-9)


@pytest.mark.parametrize("rule", [{"stance_torque": 2.0}, {"stance_sigma": 0.002},
                                  {"stance_torque": 2.0, "stance_sigma": 0.005}])
def test_the_stance_average_weights_the_standing_feet(go2, rule):
    """Two feet down and loaded, two raised and unloaded: the estimate is the planted feet's
    (the swinging ones' motion does not count), by either stance rule, from numpy and from
    torch alike."""
    robot, model, legs = go2
    legs = LegModel(chains=legs.chains, **rule)
    q = np.array([j.default for j in robot.spec.joints])
    q[[1, 10]] += 0.6  # FR and RL thighs swing forward: those feet rise
    dq = np.zeros(12)
    dq[[1, 10]] = 8.0  # ... fast
    tau = np.full(12, 10.0)
    tau[0:3] = tau[9:12] = 0.0  # ... and carry no load
    quat = np.array([1.0, 0.0, 0.0, 0.0])
    gyro = np.zeros(3)
    v = leg_odometry_velocity(legs, q, dq, gyro, quat, tau)
    np.testing.assert_allclose(v, 0.0, atol=1e-6)  # the planted feet do not move
    t = leg_odometry_velocity(legs, *(torch.tensor(x) for x in (q, dq, gyro, quat, tau)))
    np.testing.assert_allclose(t.numpy(), v, atol=1e-12)
    if "stance_torque" in rule:
        with pytest.raises(ValueError, match="needs the joint torques"):
            leg_odometry_velocity(legs, q, dq, gyro, quat)


def test_a_leg_model_has_a_stance_rule(go2):
    with pytest.raises(ValueError, match="give stance_torque, stance_sigma or both"):
        LegModel(chains=go2[2].chains)


def test_height_tells_a_loaded_swing_leg_from_a_standing_one(go2):
    """On damped joints a swinging leg carries torque as a standing one does: by load alone it
    counts as standing and pulls the estimate; load and height together discount it."""
    robot, _, legs = go2
    q = np.array([j.default for j in robot.spec.joints])
    q[[1, 10]] += 0.6  # FR and RL swing forward, raised
    dq = np.zeros(12)
    dq[[1, 10]] = 8.0
    tau = np.full(12, 10.0)  # every leg loaded alike
    args = (q, dq, np.zeros(3), np.array([1.0, 0.0, 0.0, 0.0]), tau)
    by_load = leg_odometry_velocity(LegModel(chains=legs.chains, stance_torque=2.0), *args)
    both = leg_odometry_velocity(
        LegModel(chains=legs.chains, stance_torque=2.0, stance_sigma=0.005), *args)
    assert np.linalg.norm(by_load) > 1.0  # half the swing feet's speed
    np.testing.assert_allclose(both, 0.0, atol=1e-3)  # the planted feet's


def test_a_foot_that_is_not_a_sphere_is_refused(go2):
    robot, model, _ = go2
    spec = mujoco.MjSpec.from_file(str(robot.mjcf_path))
    foot = spec.geom("FR_foot")
    foot.type, foot.size = mujoco.mjtGeom.mjGEOM_BOX, [0.02, 0.02, 0.02]
    with pytest.raises(LegModelError, match="'FR_foot' is not a sphere"):
        leg_model(spec.compile(), robot)


def test_the_term_needs_its_leg_model():
    with pytest.raises(ValueError, match="leg_odometry_velocity.*leg model"):
        ObservationBuilder([ObsTerm(name="leg_odometry_velocity", dim=3)], 12)


def test_the_actor_sees_it_and_the_deploy_runtime_computes_the_same(go2, tmp_path):
    """go2-flat with `leg_odometry_tau`: the contract carries the legs, the training
    simulator's observation and deploy's (numpy, from the same signals) agree, and a trained
    run exports a policy that `simreal eval` runs through the deploy runtime."""
    cfg = {"leg_odometry_tau": 0.1, "randomization": {"enabled": False}}
    env = api.make_env("go2-flat", 4, 0, cfg)
    contract = env.contract()
    term = contract.observations[-1]
    assert term.name == "leg_odometry_velocity" and term.legs == go2[2]
    assert PolicyContract.from_json(contract.to_json()) == contract
    deploy = ObservationBuilder(contract.observations, contract.action_dim, dt=env.dt)
    sim = ObservationBuilder(contract.observations, contract.action_dim, dt=env.dt)
    env.reset()
    for _ in range(5):
        env.step(torch.zeros(4, 12))
        signals = env.signals()
        a = sim.build(signals)
        b = deploy.build({k: v.numpy() for k, v in signals.items()})
        np.testing.assert_allclose(a.numpy(), b, atol=1e-4)

    summary = api.train("go2-flat", envs=32, steps=32 * 24, seed=0, out=tmp_path / "run",
                        eval_episodes=2, progress=False, task_config={"leg_odometry_tau": 0.1})
    policy = OnnxPolicy(summary["policy"])
    assert policy.contract.observations[-1].legs == go2[2]
    PolicyRunner(policy, go2[0])  # the deploy side accepts it
    result = api.evaluate(summary["policy"], "go2-flat", episodes=2, seed=1,
                          task_config={"leg_odometry_tau": 0.1, "episode_s": 1.0})
    assert result["episodes"] == 2


@pytest.mark.skipif(not (ASSETS / "go2_walk.onnx").exists(), reason="needs the walking asset")
def test_it_follows_the_walking_robots_speed():
    """The walking policy of tests/assets on go2-flat's nominal model, noise-free signals: the
    estimate's mean forward speed follows the truth's at two commanded speeds (measured with
    the sensor noise: bias about -0.02 m/s at 0.5 m/s, sim/legs.py)."""
    policy = OnnxPolicy(ASSETS / "go2_walk.onnx")
    means = {}
    for vx in (0.3, 1.0):
        cfg = api.evaluation_config("go2-flat", None)
        cfg = api._merged(cfg, {"episode_s": 6.0, "randomization": {"enabled": False},
                                "init": {"joint_noise": 0.0, "base_speed": 0.0},
                                "commands": {"fixed": [vx, 0.0, 0.0]}})
        env = api.make_env("go2-flat", 4, 0, cfg)
        legs = leg_model(env.backend.model, env.robot)
        runner = PolicyRunner(policy, env.robot, batch=4)
        env.reset()
        est, true = [], []
        for step in range(250):
            signals = env.noisy_signals()
            action, _ = runner.act({k: v.numpy() for k, v in signals.items()
                                    if k != "last_action"})
            env.step(torch.from_numpy(action))
            if step < 100:  # after 2 s
                continue
            s = env.signals()
            est.append(leg_odometry_velocity(legs, s["joint_pos"] - env.joint_offset,
                                              s["joint_vel"], s["angular_velocity"],
                                              s["orientation"], s["joint_effort"])[:, 0])
            true.append(env._read()["lin_vel_body"][:, 0])
        means[vx] = (torch.stack(est).mean().item(), torch.stack(true).mean().item())
    for est, true in means.values():
        assert math.isfinite(est) and abs(est - true) < 0.15, means
    # faster walking reads faster
    assert means[1.0][0] - means[0.3][0] > 0.5 * (means[1.0][1] - means[0.3][1]), means


def test_the_stance_rule_is_a_task_setting():
    from simreal.sim.legs import STANCE_SIGMA, STANCE_TORQUE

    for stance, expect in (("torque", (STANCE_TORQUE, None)), ("height", (None, STANCE_SIGMA))):
        env = api.make_env("go2-flat", 2, 0, {"leg_odometry_tau": 0.1,
                                              "leg_odometry_stance": stance,
                                              "randomization": {"enabled": False}})
        legs = env.contract().observations[-1].legs
        assert (legs.stance_torque, legs.stance_sigma) == expect


def test_a_joint_state_without_effort_serves_only_the_height_rule(go2):
    """Many drivers leave JointState.effort empty: the torque rule's policy names what is
    missing (an unusable state message, so the node never runs it blind); the height rule's
    runs without it."""
    from simreal.deploy import codecs
    from simreal.deploy import messages as m
    from simreal.deploy.interfaces import InterfaceSettings, JointGeneric
    from simreal.deploy.terms import term_reads

    robot, _, legs = go2
    names = [j.name for j in robot.spec.joints]
    msg = m.JointState(name=names, position=[0.1] * 12, velocity=[0.0] * 12, effort=[])
    imu = codecs.imu_signals(codecs.imu(np.array([1.0, 0, 0, 0]), np.zeros(3), np.zeros(3)))
    for rule, needs in (({"stance_torque": 2.0}, True), ({"stance_sigma": 0.002}, False)):
        term = ObsTerm(name="leg_odometry_velocity", dim=3,
                       legs=LegModel(chains=legs.chains, **rule))
        assert ("joint_effort" in term_reads(term)) == needs
        iface = JointGeneric.from_settings(robot, InterfaceSettings(
            reads=frozenset(term_reads(term))))
        if needs:
            with pytest.raises(ValueError, match="0 efforts for 12 joints.*joint_effort"):
                iface.decode("joint_states", msg)
            continue
        signals = {**iface.decode("joint_states", msg), **imu}
        assert "joint_effort" not in signals
        obs = ObservationBuilder([term], 12).build({k: v[None] for k, v in signals.items()})
        assert obs.shape == (1, 3) and np.isfinite(obs).all()
