"""arm-reach and arm-lift: contracts, sim/deploy parity of the actor's terms, success logic,
the delayed object estimate, randomization."""

import math

import numpy as np
import pytest
import torch

from simreal.api import make_env
from simreal.deploy.observation import ObservationBuilder
from simreal.robots.kinematics import forward_kinematics

QUIET = {"randomization": {"enabled": False}, "joint_noise": 0.0,
         "noise": {"joint_pos": 0.0, "joint_vel": 0.0}}


@pytest.mark.parametrize("task, commands", [
    ("arm-reach", {"target_position", "target_orientation"}),
    ("arm-lift", {"lift_height"}),
])
def test_contract_and_observation_sizes(task, commands):
    env = make_env(task, num_envs=4, seed=0)
    contract = env.contract()
    obs = env.reset()
    assert obs["policy"].shape == (4, contract.obs_dim)
    assert obs["critic"].shape[1] > contract.obs_dim  # privileged state on top
    assert contract.action.kind == "joint_position" and contract.action_dim == 8
    assert contract.action.offset == [j.default for j in env.robot.spec.joints]
    assert set(contract.commands) == commands
    assert contract.mismatches(env.robot) == []
    assert torch.isfinite(obs["critic"]).all()


@pytest.mark.parametrize("task", ["arm-reach", "arm-lift"])
def test_actor_terms_match_the_deploy_runtime_on_the_same_readings(task):
    """What the robot's node has (joint states, commands, an object estimate), fed to deploy's
    numpy builder with the tool pose from numpy forward kinematics, gives the simulator's
    actor observation; and the kinematics equals MuJoCo's tool sensors at the true joints."""
    env = make_env(task, num_envs=8, seed=1)
    env.reset()
    for _ in range(5):
        env.step(torch.rand(8, 8) * 2 - 1)
    sim = env.noisy_signals()
    sim_obs = env.obs_builder.build(sim)  # the builder has no history here: same as policy obs
    kin = env.robot.spec.kinematics
    readings = {k: v.numpy().astype(np.float64) for k, v in sim.items()
                if k not in ("ee_position", "ee_orientation")}
    readings["ee_position"], readings["ee_orientation"] = forward_kinematics(
        kin, readings["joint_pos"])
    deploy = ObservationBuilder(env.contract().observations, 8).build(readings)
    np.testing.assert_allclose(deploy, sim_obs.numpy(), atol=2e-5)

    true = env.signals()
    pos, quat = forward_kinematics(kin, true["joint_pos"].double())
    np.testing.assert_allclose(pos.numpy(), true["ee_position"].numpy(), atol=2e-6)
    dot = (quat.float() * true["ee_orientation"]).sum(-1).abs()
    np.testing.assert_allclose(dot.numpy(), 1.0, atol=1e-5)


def test_reach_succeeds_only_within_tolerance_of_the_target():
    env = make_env("arm-reach", num_envs=4, seed=0, config=QUIET)
    env.reset()
    s = env.signals()
    env.target_pos[:] = s["ee_position"]
    env.target_quat[:] = s["ee_orientation"]
    offset = torch.tensor([[0.0, 0, 0], [0.0, 0, 0], [0.02, 0, 0], [0.0, 0, 0]])
    env.target_pos += offset
    turn = math.radians(8)  # env 3: 8 degrees about the target's own z axis
    q = env.target_quat[3].clone()
    env.target_quat[3] = torch.tensor([q[0] * math.cos(turn / 2) - q[3] * math.sin(turn / 2),
                                       q[1] * math.cos(turn / 2) + q[2] * math.sin(turn / 2),
                                       q[2] * math.cos(turn / 2) - q[1] * math.sin(turn / 2),
                                       q[3] * math.cos(turn / 2) + q[0] * math.sin(turn / 2)])
    for _ in range(env.max_episode_length):
        _, _, done, extras = env.step(torch.zeros(4, 8))
    assert done.all() and extras["time_outs"].all()
    assert env.success.tolist() == [True, True, False, False]


def test_reach_targets_lie_in_the_configured_ranges():
    env = make_env("arm-reach", num_envs=256, seed=0)
    pos, quat = env.sample_targets(256)
    t = env.cfg.target
    for i, (lo, hi) in enumerate((t.x, t.y, t.z)):
        assert lo <= pos[:, i].min() and pos[:, i].max() <= hi
    # pointing down within the tilt: the tool's z axis against the world's -z
    z_axis = torch.stack([2 * (quat[:, 1] * quat[:, 3] + quat[:, 0] * quat[:, 2]),
                          2 * (quat[:, 2] * quat[:, 3] - quat[:, 0] * quat[:, 1]),
                          1 - 2 * (quat[:, 1] ** 2 + quat[:, 2] ** 2)], -1)
    tilt = torch.acos((-z_axis[:, 2]).clamp(-1, 1))
    assert tilt.max() <= t.tilt + 1e-4 and tilt.max() > 0.8 * t.tilt


def test_lift_estimate_is_the_true_pose_delayed_by_its_steps():
    cfg = {**QUIET, "estimator": {"position_bias": 0.0, "position_noise": 0.0,
                                  "orientation_noise": 0.0, "delay_steps": [1, 3]}}
    env = make_env("arm-lift", num_envs=16, seed=2, config=cfg)
    env.reset()
    # lift every cube 0.5 m and let it fall: its pose changes every step
    qpos = env.backend.qpos
    qpos[:, env._cube_qpos + 2] += 0.5
    env.backend.forward(torch.arange(16))
    env._sensors = None
    env.pose_history[:] = torch.cat([env.signals()["object_position"],
                                     env.signals()["object_orientation"]], -1)[:, None]
    true = []
    for _ in range(6):
        env.step(torch.zeros(16, 8))
        true.append(env.signals()["object_position"].clone())
    seen = env.noisy_signals()["object_position"]
    expect = torch.stack(true)[5 - env.delay, torch.arange(16)]
    assert set(env.delay.tolist()) == {1, 2, 3}
    torch.testing.assert_close(seen, expect)


def test_lift_randomizes_the_cube_per_environment():
    env = make_env("arm-lift", num_envs=32, seed=3)
    env.reset()
    g, b = env.cube_geom, env.cube_body
    size = env.geom_size[:, g, 0]
    assert size.min() >= 0.02 and size.max() <= 0.03 and size.std() > 0.002
    torch.testing.assert_close(size.float(), env.half_size)
    torch.testing.assert_close(env.body_mass[:, b].float(), env.cube_mass)
    assert env.geom_friction[:, g, 0].std() > 0.1
    # every cube starts resting on the table, its bottom face at z = 0
    z = env.signals()["object_position"][:, 2]
    torch.testing.assert_close(z, env.half_size, atol=2e-3, rtol=0)
    damping = env.dof_damping[:, :7]
    assert damping.std() > 0.1 and env.actuators.latency.max() > 0.01


def test_same_seed_same_episodes():
    a = make_env("arm-lift", num_envs=4, seed=7)
    b = make_env("arm-lift", num_envs=4, seed=7)
    oa, ob = a.reset(), b.reset()
    torch.testing.assert_close(oa["policy"], ob["policy"])
    act = torch.rand(4, 8, generator=torch.Generator().manual_seed(0)) * 2 - 1
    for _ in range(3):
        oa, ra, _, _ = a.step(act)
        ob, rb, _, _ = b.step(act)
    torch.testing.assert_close(oa["critic"], ob["critic"])
    torch.testing.assert_close(ra, rb)


def test_step_metrics_summarize_over_the_hold_window():
    env = make_env("arm-reach", num_envs=4, seed=0, config=QUIET)
    env.reset()
    history: dict[str, list[torch.Tensor]] = {}
    for _ in range(env.max_episode_length):
        env.step(torch.zeros(4, 8))
        for k, v in env.step_metrics().items():
            history.setdefault(k, []).append(v.clone())
    stacked = {k: torch.stack(v) for k, v in history.items()}
    lengths = torch.full((4,), env.max_episode_length)
    out = env.summarize(stacked, lengths)
    last = stacked["position_error"][-env.window:]
    assert out["position_error_mean"] == pytest.approx(last.mean().item(), rel=1e-5)
    assert out["orientation_error_deg_p95"] >= out["orientation_error_deg_mean"]


def test_joint_targets_are_clamped_as_the_deploy_safety_layer_clamps_them():
    """The simulator's targets equal deploy's safety layer output (joint range, then the
    velocity limit per period from the last target) for the same actions."""
    from simreal.deploy.limits import command_limits
    from simreal.deploy.safety import SafetyConfig, SafetyLayer

    env = make_env("arm-reach", num_envs=1, seed=4, config=QUIET)
    env.reset()
    limits = command_limits(env.robot, env.contract())
    start = env.read()["joint_pos"][0].double().numpy()
    layer = SafetyLayer(limits.low, limits.high, damping=start, rate_hz=50,
                        cfg=SafetyConfig(soft_start_s=0.0), rate_limit=limits.rate)
    gen = torch.Generator().manual_seed(0)
    action = env.contract().action
    clamped_rate = 0
    for i in range(40):
        a = torch.rand(1, 8, generator=gen) * 2 - 1 if i % 10 else torch.ones(1, 8) * -1
        env.step(a)
        want = np.asarray(action.offset) + np.asarray(action.scale) * a[0].double().numpy()
        sent = layer.step(want, fresh=True, tilt_rad=0.0, measured=start)
        np.testing.assert_allclose(env.target[0].double().numpy(), sent, atol=1e-6)
        clamped_rate = layer.clamp_events["rate"]
    assert clamped_rate > 0 and layer.clamp_events["limits"] > 0  # both rules were exercised
    # the gripper's wide scale: any a >= 0 is fully open, a <= -0.4 fully closed
    assert env.action_scale[7] * 0.4 == pytest.approx(env.upper[7] - env.lower[7])


def test_start_pose_is_held_through_the_command_latency():
    """A reset writes the start pose into the actuators' command history, so that with the
    largest latency the arm does not jerk toward the default pose before the policy acts."""
    cfg = {**QUIET, "joint_noise": 0.3}
    env = make_env("arm-reach", num_envs=4, seed=5, config=cfg)
    env.actuators.latency[:] = 0.02
    env.actuators.write(torch.arange(4))
    env.reset()
    q0 = env.read()["joint_pos"].clone()
    assert (q0 - env.default_pos)[:, :7].abs().max() > 0.1  # away from the default pose
    env.step((q0 - env.default_pos) / env.action_scale)  # hold it
    assert (env.read()["joint_pos"] - q0)[:, :7].abs().max() < 1e-4


def test_lift_start_curriculum_puts_the_open_hand_over_or_the_closed_fingers_on_the_cube():
    cfg = {**QUIET, "above_start": 0.5, "grasped_start": 0.5}
    env = make_env("arm-lift", num_envs=32, seed=6, config=cfg)
    env.reset()
    r = env.read()
    offset = r["object_position"] - r["ee_position"]
    fingers = r["joint_pos"][:, 7]
    closed = fingers < 0.035
    assert 5 < int(closed.sum()) < 27  # both kinds drawn
    # the tool over the cube's centre (IK: 1 mm), at it when grasped, up to 10 cm above else
    assert offset[:, :2].norm(dim=-1).max() < 1e-3
    assert offset[closed, 2].abs().max() < 1e-3
    assert (-offset[~closed, 2]).max() <= 0.1 + 1e-3
    for _ in range(10):  # holding the start targets keeps the cube grasped
        env.step((env.target - env.default_pos) / env.action_scale)
    assert env.step_metrics()["grasped"][closed].mean() > 0.9
    # evaluation (the defaults) never starts there
    plain = make_env("arm-lift", num_envs=16, seed=6, config=QUIET)
    plain.reset()
    d = (plain.read()["object_position"] - plain.read()["ee_position"]).norm(dim=-1)
    assert d.min() > 0.2


def test_lift_stagger_start_spreads_the_first_episodes_ends():
    env = make_env("arm-lift", num_envs=64, seed=8, config={**QUIET, "stagger_start": True})
    env.reset()
    elapsed = env.episode_length_buf
    assert elapsed.min() >= 0 and elapsed.max() < env.max_episode_length
    assert len(elapsed.unique()) > 30  # spread, not a few values
    left = int((env.max_episode_length - elapsed).min())
    for _ in range(left):
        _, _, done, _ = env.step(torch.zeros(64, 8))
    assert 0 < int(done.sum()) < 8  # only the envs that started latest in their episode end
    plain = make_env("arm-lift", num_envs=8, seed=8, config=QUIET)
    plain.reset()
    assert (plain.episode_length_buf == 0).all()  # the default (evaluation): all start fresh


def test_arm_observation_age_shows_the_actor_older_joint_states():
    """With the joint states one control period old (20 ms: 4 physics steps) the actor sees at
    step k what an age-free twin saw at step k - 1; physics and the critic are unchanged."""
    import torch

    from simreal.api import make_env

    def env(age: float):
        return make_env("arm-reach", 4, 3, {
            "noise": {"joint_pos": 0.0, "joint_vel": 0.0},
            "randomization": {"observation_age": [age, age]}})

    aged, fresh = env(0.02), env(0.0)
    assert aged.history is not None and fresh.history is None
    obs_a, obs_f = aged.reset(), fresh.reset()
    assert aged.history.age.tolist() == [4] * 4
    g = torch.Generator().manual_seed(0)
    joints = 2 * aged.num_actions  # joint_pos_rel and joint_vel come first
    for _ in range(5):
        action = torch.rand(4, aged.num_actions, generator=g) * 2 - 1
        before = obs_f["policy"][:, :joints].clone()
        obs_a, *_ = aged.step(action)
        obs_f, *_ = fresh.step(action)
        torch.testing.assert_close(obs_a["policy"][:, :joints], before)
    torch.testing.assert_close(aged.backend.qpos, fresh.backend.qpos)
    critic_a, critic_f = obs_a["critic"], obs_f["critic"]
    torch.testing.assert_close(critic_a[:, :joints], critic_f[:, :joints])


def test_arm_mass_scale_sags_against_the_nominal_gravity_compensation():
    """`randomization.mass` scales the links while the compensation stays the nominal model's:
    held at the default pose, each joint settles where its PD gain carries the weight the
    compensation misses, (scale - 1) x the nominal gravity torque / kp, and the critic sees it."""
    import mujoco

    def held(scale: float):
        env = make_env("arm-reach", 2, 0, {
            "joint_noise": 0.0, "noise": {"joint_pos": 0.0, "joint_vel": 0.0},
            "randomization": {"damping": [1.0, 1.0], "kp_scale": [1.0, 1.0],
                              "kd_scale": [1.0, 1.0], "latency": [0.0, 0.0],
                              "mass": [scale, scale]}})
        obs = env.reset()
        for _ in range(75):  # 1.5 s
            obs, *_ = env.step(torch.zeros(2, env.num_actions))
        return env, obs, (env.read()["joint_pos"] - env.default_pos)[:, :7].double()

    nominal, _, sag_nominal = held(1.0)
    assert nominal._mass_fields is None  # nothing expanded at the nominal mass
    assert sag_nominal.abs().max() < 1e-4
    m = nominal.backend.model
    d = mujoco.MjData(m)
    d.qpos[nominal._qpos_adr.numpy()] = nominal.default_pos.numpy()
    mujoco.mj_forward(m, d)
    gravity = torch.from_numpy(d.qfrc_bias[nominal._dof_adr[:7].numpy()].copy())
    kp = torch.tensor([j.kp for j in nominal.robot.spec.joints[:7]], dtype=torch.float64)
    assert gravity.abs().max() > 5.0  # the default pose loads the shoulder
    for scale in (0.8, 1.2):
        env, obs, sag = held(scale)
        expected = -(scale - 1) * gravity / kp  # heavier: the joint gives way to gravity
        loaded = gravity.abs() > 1.0
        torch.testing.assert_close(sag[:, loaded], expected[loaded].expand(2, -1),
                                   rtol=0.1, atol=2e-4)
        assert env.mass_scale.tolist() == pytest.approx([scale, scale])
        body = int(env._arm_bodies[0])
        assert env.backend.model_field("body_mass")[0, body] == pytest.approx(
            scale * m.body_mass[body])
    assert obs["critic"].shape[1] == nominal.reset()["critic"].shape[1] + 1  # mass_scale
