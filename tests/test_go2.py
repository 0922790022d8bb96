"""Go2: the description, the PD actuator model, the go2-flat task and its observation parity."""

import math
import shutil
from pathlib import Path

import mujoco
import numpy as np
import pytest
import torch
import yaml

from simreal.api import make_env
from simreal.deploy.observation import ObservationBuilder
from simreal.robots import RobotError, load_robot_dir
from simreal.robots.registry import get_robot
from simreal.sim.actuators import ActuatorMismatch

ROBOTS = Path(__file__).resolve().parent.parent / "robots"
LEGS = ("FR", "FL", "RR", "RL")
QUIET = {"randomization": {"enabled": False}, "init": {"joint_noise": 0.0, "base_speed": 0.0}}


@pytest.fixture
def go2_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "go2"
    shutil.copytree(ROBOTS / "go2", dst)
    return dst


def _edit(directory: Path, fn) -> None:
    path = directory / "robot.yaml"
    data = yaml.safe_load(path.read_text())
    fn(data)
    path.write_text(yaml.safe_dump(data))


# --- the description --------------------------------------------------------------------------
def test_go2_loads_in_unitree_joint_order_with_published_figures():
    robot = get_robot("go2")
    spec = robot.spec
    assert [j.name for j in spec.joints] == [f"{leg}_{part}_joint" for leg in LEGS
                                             for part in ("hip", "thigh", "calf")]
    assert spec.control.decimation == 4 and spec.control.rate_hz == 50
    assert spec.action_scale == 0.25
    assert {j.kp for j in spec.joints} == {20.0} and {j.kd for j in spec.joints} == {0.5}
    assert [j.torque_limit for j in spec.joints[:3]] == [23.7, 23.7, 35.55]
    assert [j.default for j in spec.joints[:6]] == [-0.1, 0.8, -1.5, 0.1, 0.8, -1.5]
    assert [j.default for j in spec.joints[6:9]] == [-0.1, 1.0, -1.5]
    assert [f.name for f in spec.feet] == list(LEGS)

    model = mujoco.MjModel.from_xml_path(str(robot.mjcf_path))
    assert model.body_mass.sum() == pytest.approx(spec.mass, abs=1e-6)
    assert model.body_mass[model.body("trunk").id] == pytest.approx(6.921)
    # the published inertials (robots.md's link inertial table): principal moments and axes
    np.testing.assert_allclose(model.body_inertia[model.body("trunk").id],
                               [0.107027, 0.0980771, 0.0244531])
    np.testing.assert_allclose(model.body_inertia[model.body("FR_thigh").id],
                               [0.00594973, 0.00584149, 0.000878787])
    np.testing.assert_allclose(model.body_ipos[model.body("RL_calf").id],
                               [0.00629595, -0.000622121, -0.141417])
    np.testing.assert_allclose(model.body_ipos[model.body("RR_hip").id],
                               [0.0054, -0.00194, -0.000105])
    assert model.body_mass[model.body("FL_calf").id] == pytest.approx(0.241352)
    np.testing.assert_allclose(model.jnt_range[model.joint("FL_thigh_joint").id],
                               [-1.5708, 3.4907])
    np.testing.assert_allclose(model.jnt_range[model.joint("RL_thigh_joint").id],
                               [-0.5236, 4.5379])
    np.testing.assert_allclose(model.jnt_range[model.joint("RR_calf_joint").id],
                               [-2.7227, -0.83776])
    np.testing.assert_allclose(model.body_pos[model.body("RL_hip").id], [-0.1934, 0.0465, 0])
    np.testing.assert_allclose(model.body_pos[model.body("FR_thigh").id], [0, -0.0955, 0])
    assert model.opt.timestep == 0.005


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.pop("action_scale"), "action_scale"),
    (lambda d: d.update(feet=[]), "feet"),
    (lambda d: d["joints"][4].pop("kp"), "kp"),
    (lambda d: d["joints"][2].update(velocity_sensor="no_such"), "joints[2].velocity_sensor"),
    (lambda d: d["feet"][1].update(site="paw"), "feet[1].site"),
    (lambda d: d["feet"][3].update(contact_sensor="paw_touch"), "feet[3].contact_sensor"),
    (lambda d: d["contacts"]["terminate"].append("belly"), "contacts.terminate[1]"),
    (lambda d: d["feet"][0].update(toes=5), "feet[0].toes"),
])
def test_malformed_go2_yaml_names_file_and_field(go2_copy, edit, field):
    _edit(go2_copy, edit)
    with pytest.raises(RobotError) as err:
        load_robot_dir(go2_copy)
    assert str(go2_copy / "robot.yaml") in str(err.value)
    assert field in str(err.value)


def test_task_refuses_an_mjcf_whose_gains_disagree_with_robot_yaml(go2_copy):
    from simreal.sim.registry import get_task

    _edit(go2_copy, lambda d: d["joints"][5].update(kp=25.0))
    robot = load_robot_dir(go2_copy)
    cls = get_task("go2-flat")
    with pytest.raises(ActuatorMismatch, match=r"FL_calf.gainprm\[0\] is 20, robot.yaml gives 25"):
        cls(robot, cls.config_class(), 2, 0)


# --- actuators --------------------------------------------------------------------------------
def test_pd_law_torque_limit_strength_and_joint_offset_in_the_engine():
    env = make_env("go2-flat", num_envs=3, seed=0, config=QUIET)
    env.reset()
    act, b = env.actuators, env.backend
    act.strength[1] = 0.5
    act.offset[2] = 0.05
    act.write(torch.arange(3))
    ctrl = torch.zeros(3, 12, dtype=torch.float64)
    ctrl[:, 2] = 0.3  # FR calf target 0.3 rad past its default
    ctrl[:, 4] = 5.0  # FL thigh: far, so the torque limit binds
    b.ctrl[:] = ctrl
    b.step(1)
    qj = b.qpos[:, env._qpos_adr]
    vj = b.qvel[:, env._qvel_adr]
    # the force of the step just taken used the state before it: recompute at that state
    for i in range(3):
        m = b.batch.get_model(i)
        d = b.batch.get_data(i)
        mujoco.mj_forward(m, d)
        q, v = qj[i].numpy(), vj[i].numpy()
        s = 0.5 if i == 1 else 1.0
        off = 0.05 if i == 2 else 0.0
        q0 = env.default_pos.double().numpy()
        want = s * (20 * (ctrl[i].numpy() + q0 - off - q) - 0.5 * v)
        want = np.clip(want, -act.torque_limit.numpy(), act.torque_limit.numpy())
        np.testing.assert_allclose(d.actuator_force, want, rtol=1e-6, atol=1e-6)
        assert abs(d.actuator_force[4]) == pytest.approx(23.7)  # strength, then clamp


def test_command_latency_delays_the_drivers_command_by_whole_physics_steps():
    env = make_env("go2-flat", num_envs=2, seed=0, config=QUIET)
    env.reset()
    act, b = env.actuators, env.backend
    act.latency[:] = torch.tensor([0.0, 0.01])  # 2 physics steps
    act.write(torch.arange(2))
    force = b.batch.bind("actuator_force")  # bound before the calls that fill it
    b.step(1)
    before = force[:, 2].copy()
    jumped = []
    b.ctrl[:, 2] = 1.0  # FR calf: a 20 N m step in the PD torque
    for _ in range(4):
        b.step(1)
        jumped.append(np.abs(force[:, 2] - before) > 8.0)
    first = [[bool(j[i]) for j in jumped].index(True) for i in range(2)]
    assert first == [0, 2]  # the step response starts 0 and 2 physics steps late


# --- standing ---------------------------------------------------------------------------------
def test_model_stands_five_seconds_under_pd_at_the_default_pose():
    """A stiff stand controller (kp 60, kd 2 N m s/rad) holding the default pose: the trunk
    settles and then stays put, level, on its four feet, with no other contact.
    (At the policy's own gains, kp 20, the trunk sags well below the default pose under
    zero action: the policy learns the offsets that hold it up.)"""
    env = make_env("go2-flat", num_envs=4, seed=0, config=QUIET)
    act = env.actuators
    act.kp_scale[:] = 3.0
    act.kd_scale[:] = 4.0
    act.write(torch.arange(4))
    env.reset()
    b = env.backend
    trunk = []
    for _ in range(250):  # 5 s at 50 Hz, the policy's command held at zero
        b.ctrl[:] = 0.0
        b.step(env.decimation)
        trunk.append(b.qpos[:, :7].clone())
    trunk = torch.stack(trunk)
    settled, end = trunk[50], trunk[-1]  # after 1 s, after 5 s
    assert torch.all((end[:, :3] - settled[:, :3]).abs() < 0.005)  # no drift, no sinking
    assert torch.all((end[:, 2] > 0.28) & (end[:, 2] < 0.33))
    up = 1 - 2 * (end[:, 4] ** 2 + end[:, 5] ** 2)  # cos of the tilt
    assert torch.all(up > math.cos(math.radians(3)))
    joints = b.qpos[:, env._qpos_adr] - env.default_pos.double()
    assert joints.abs().max() < 0.12
    env._sensors = None
    s = env._read()
    assert torch.all(s["foot_force"] > 5.0)  # every foot carries weight
    assert s["foot_force"].sum(-1).mean() == pytest.approx(15.206 * 9.81, rel=0.05)
    assert torch.all(s["terminate_contact"] == 0) and torch.all(s["penalize_contact"] == 0)


def test_trunk_on_the_ground_or_upside_down_ends_the_episode():
    env = make_env("go2-flat", num_envs=2, seed=0, config=QUIET)
    env.actuators.strength[:] = 0.0  # limp motors
    env.actuators.write(torch.arange(2))
    env.reset()
    b = env.backend
    qpos = b.qpos.clone()
    qpos[:, 3:7] = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    qpos[0, 2] = 0.08  # level, legs folded up over the back: it drops onto its belly
    qpos[0, env._qpos_adr] = torch.tensor([0.0, 3.0, -1.0] * 4, dtype=torch.float64)
    qpos[1, 2] = 0.6
    qpos[1, 3:7] = torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=torch.float64)  # upside down
    b.qpos[:] = qpos
    b.qvel[:] = 0.0
    ended, contact = [], []
    for _ in range(10):
        _, _, done, extras = env.step(torch.zeros(2, 12))
        assert not extras["time_outs"].any()
        ended.append(done.clone())
        contact.append(env._read()["terminate_contact"][:, 0] > 0)
        if ended[-1][0]:
            break
    assert ended[0][1]  # upside down: at once
    assert ended[-1][0] and ended[-1].sum() >= 1  # belly contact: within 0.2 s


# --- task ---------------------------------------------------------------------------------------
def test_actor_sees_no_linear_velocity_and_the_contract_says_pd_targets():
    env = make_env("go2-flat", num_envs=2, seed=0)
    c = env.contract()
    assert [t.name for t in c.observations] == ["angular_velocity", "projected_gravity",
                                                "velocity_command", "joint_pos_rel",
                                                "joint_vel", "last_action"]
    assert c.obs_dim == 45 and env.get_observations()["policy"].shape == (2, 45)
    assert c.action.kind == "joint_position"
    assert c.action.offset == [j.default for j in env.robot.spec.joints]
    assert c.action.scale == [0.25] * 12 and c.action.kp == [20.0] * 12
    assert c.actuators == env.robot.actuator_names
    assert env.get_observations()["critic"].shape[1] > 45 + 3 + 4 + 20  # + lin vel, forces, scan


def test_sim_observation_equals_deploy_observation_for_go2_terms():
    env = make_env("go2-flat", num_envs=16, seed=5)
    env.reset()
    gen = torch.Generator().manual_seed(0)
    for _ in range(10):
        env.step(torch.rand(16, 12, generator=gen) * 2 - 1)
    signals = env.noisy_signals()
    sim_obs = ObservationBuilder(env.policy_terms(), 12).build(signals)
    deploy = ObservationBuilder(env.contract().observations, 12)
    deploy_obs = deploy.build({k: v.numpy() for k, v in signals.items()})
    np.testing.assert_allclose(sim_obs.numpy(), deploy_obs, rtol=0, atol=1e-6)
    obs = env.get_observations()
    np.testing.assert_allclose(obs["critic"][:, :45], ObservationBuilder(
        env.policy_terms(), 12).build(env.signals()), atol=1e-6)  # the critic's is noise-free
    gravity = obs["critic"][:, 3:6]
    assert torch.allclose(gravity.norm(dim=-1), torch.ones(16), atol=1e-5)
    # the terms mean what they say, on the simulator's own state
    env.backend.forward(torch.arange(16))  # sensors at the current state, to compare
    env._sensors = None
    s = env.signals()
    qj = env.backend.qpos[:, env._qpos_adr].float() + env.joint_offset
    np.testing.assert_allclose(s["joint_pos"] - s["default_joint_pos"], qj - env.default_pos,
                               atol=1e-6)
    np.testing.assert_allclose(s["joint_vel"], env.backend.qvel[:, env._qvel_adr].float(),
                               atol=1e-6)


def test_heading_command_turns_into_a_bounded_yaw_rate():
    env = make_env("go2-flat", num_envs=3, seed=0, config=QUIET)
    env.reset()
    q = torch.tensor([[1.0, 0, 0, 0]] * 3)  # yaw 0
    env.heading[:] = torch.tensor([0.5, -3.0, 3.0])
    env.heading_mode[:] = torch.tensor([True, True, False])
    env.commands[2, 2] = -0.4  # a held yaw-rate command stays
    env._update_heading_commands(q)
    assert env.commands[:, 2].tolist() == pytest.approx([0.25, -1.0, -0.4])


def test_held_yaw_rate_commands_stay_for_the_command():
    """heading_share 0: every command holds its drawn yaw rate while the trunk turns; 1: every
    yaw rate comes from a heading (zero at reset, then the heading error's)."""
    held = make_env("go2-flat", num_envs=16, seed=0,
                    config={**QUIET, "commands": {"heading_share": 0.0}})
    held.reset()
    rates = held.commands[:, 2].clone()
    assert rates.abs().max() <= 1.0 and rates.std() > 0.2
    for _ in range(5):
        held.step(torch.zeros(16, held.num_actions))
    assert torch.equal(held.commands[:, 2], rates)
    turned = make_env("go2-flat", num_envs=16, seed=0,
                      config={**QUIET, "commands": {"heading_share": 1.0}})
    turned.reset()
    assert not turned.commands[:, 2].any()
    turned.step(torch.zeros(16, turned.num_actions))
    rot = turned._read()["rot"]
    diff = turned.heading - torch.atan2(rot[:, 1, 0], rot[:, 0, 0])
    err = torch.atan2(torch.sin(diff), torch.cos(diff))  # wrapped to [-pi, pi]
    torch.testing.assert_close(turned.commands[:, 2], (0.5 * err).clamp(-1, 1), atol=1e-3,
                               rtol=0)


def test_in_place_share_turns_and_stands_without_walking():
    """in_place_share: that share of commands has no horizontal velocity (turn in place or
    stand); 0 leaves only the zero_below band (3% of a uniform draw in [-1, 1]^2)."""
    def still(share: float) -> float:
        env = make_env("go2-flat", num_envs=512, seed=0,
                       config={**QUIET, "commands": {"in_place_share": share}})
        env.reset()
        return (env.commands[:, :2].abs().sum(-1) == 0).float().mean().item()

    assert still(0.0) < 0.08
    assert 0.4 < still(0.5) < 0.65


def test_same_seed_same_trajectory():
    def run(seed):
        env = make_env("go2-flat", num_envs=8, seed=seed)
        gen = torch.Generator().manual_seed(1)
        out = []
        for _ in range(20):
            obs, rew, _, _ = env.step(torch.rand(8, 12, generator=gen) - 0.5)
            out.append(torch.cat([obs["policy"], obs["critic"], rew[:, None]], -1))
        return torch.stack(out)

    a, b, c = run(3), run(3), run(4)
    assert torch.equal(a, b) and not torch.allclose(a, c)


def test_randomization_reaches_the_engine_per_env():
    env = make_env("go2-flat", num_envs=64, seed=2)
    env.reset()
    trunk = env.trunk
    mass = env.body_mass[:, trunk]
    assert mass.std() > 0 and (mass - 6.921).abs().max() <= 2.0 + 1e-9
    assert env.geom_friction[:, env._contact_geoms[0], 0].std() > 0
    gain = env.actuators._gain[:, env.actuators.ids, 0]
    assert gain.min() >= 20 * 0.9 * 0.9 - 1e-9 and gain.max() <= 20 * 1.1 * 1.1 + 1e-9
    delay = env.actuators._delay[:, env.actuators.ids[0]]
    assert delay.min() >= 0 and delay.max() <= 0.04 + 1e-9 and delay.std() > 0


def test_eval_summary_metrics_from_step_history():
    env = make_env("go2-flat", num_envs=2, seed=0)
    T = 200
    history = {
        "lin_vel_error": torch.full((T, 2), 0.1), "ang_vel_error": torch.full((T, 2), 0.2),
        "settled": torch.ones(T, 2), "fell": torch.zeros(T, 2),
        "distance": torch.full((T, 2), 0.01), "torque": torch.full((T, 2), 3.0),
    }
    history["settled"][:50] = 0.0
    history["lin_vel_error"][:50] = 5.0  # settling: not counted
    history["fell"][99, 1] = 1.0
    lengths = torch.tensor([T, 100])
    out = env.summarize(history, lengths)
    assert out["lin_vel_error"] == pytest.approx(0.1)
    assert out["ang_vel_error"] == pytest.approx(0.2)
    assert out["fall_rate"] == pytest.approx(0.5)
    assert out["distance"] == pytest.approx((2.0 + 1.0) / 2)
    assert out["torque"] == pytest.approx(3.0)


def test_eval_json_has_the_go2_metrics_through_the_deploy_runtime(tmp_path):
    """`simreal eval`'s numbers for go2-flat, from a policy that always outputs zero (the
    default pose, no training): it neither walks nor falls, its commands are not tracked."""
    from simreal.api import evaluate
    from simreal.train.export import export_onnx

    contract = make_env("go2-flat", num_envs=1, seed=0).contract()

    class Zero(torch.nn.Module):
        def forward(self, obs: torch.Tensor) -> torch.Tensor:
            return obs[:, :contract.action_dim] * 0.0

    path = export_onnx(Zero(), contract, tmp_path / "zero.onnx")
    out = evaluate(path, "go2-flat", episodes=2, seed=0)
    assert {"lin_vel_error", "ang_vel_error", "fall_rate", "distance", "torque",
            "success_rate", "mean_return", "episodes"} <= set(out)
    assert out["fall_rate"] == 0.0 and out["episodes"] == 2
    assert 0.2 < out["lin_vel_error"] < 1.5  # commands in [-1, 1] m/s, not followed
    assert out["distance"] < 3.0 and 1.0 < out["torque"] < 10.0  # holds its sagging stance


# --- go2-rough ----------------------------------------------------------------------------------
SMALL_TERRAIN = {"terrain": {"rows": 3, "cols": 2, "tile_size": [4.0, 4.0], "border": 2.0,
                             "platform": 1.5, "curriculum": {"max_init_level": 1}},
                 "spawn_spread": 0.2}


def test_rough_spawns_on_its_tile_and_scans_the_terrain_under_the_feet():
    # the stiff end of the contact softness: a soft contact (solimp width 3 cm) lets the feet
    # sink up to ~1.3 cm, which the 1 cm check below would read as a wrong terrain height
    config = {**SMALL_TERRAIN, "randomization": {"softness": [0.0, 0.0]}}
    env = make_env("go2-rough", num_envs=8, seed=0, config=config)
    env.reset()
    m = env.backend.model
    assert m.nhfield == 1 and mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "floor") < 0
    origins = env.curriculum.origins
    assert torch.all((env.origin[:, :2] - origins[:, :2]).abs() <= 0.2 + 1e-6)
    for _ in range(25):  # half a second of standing still
        env.step(torch.zeros(8, 12))
    s = env._read()
    feet = s["foot_pos"]
    ground = env.terrain_height(feet[..., :2])
    # every foot rests on the terrain (its centre one foot radius above it, within a cm)
    assert torch.all((feet[..., 2] - ground - 0.022).abs() < 0.01)
    scan = env.privileged_terms()["foot_height_scan"].reshape(8, 4, 5)
    assert torch.allclose(scan[:, :, 0], feet[..., 2] - ground, atol=1e-5)


def test_rough_curriculum_promotes_far_walkers_and_demotes_laggards():
    env = make_env("go2-rough", num_envs=4, seed=0, config=SMALL_TERRAIN)
    env.reset()
    env.curriculum.levels[:] = torch.tensor([0, 1, 1, 0])
    b = env.backend
    qpos = b.qpos.clone()
    qpos[0, 0] = env.origin[0, 0] + 3.0  # walked 3 m, past half of a 4 m tile
    qpos[1, 0] = env.origin[1, 0] + 0.1  # stood still while 10 m were asked of it
    qpos[2, 0] = env.origin[2, 0] + 1.0  # did half of 2 m: stays
    b.qpos[:] = qpos
    env.commanded_distance[:] = torch.tensor([0.0, 10.0, 2.0, 0.0])
    env.commands[:] = 0.0
    env.episode_length_buf[:] = env.max_episode_length  # full episodes
    stats = env.reset_envs(torch.tensor([0, 1, 2]))
    assert env.curriculum.levels.tolist() == [1, 0, 1, 0]
    assert float(stats["/curriculum/mean_level"]) == pytest.approx(0.5)


def test_rough_curriculum_demotes_an_early_fall_by_the_whole_episode_s_distance():
    """Rudin et al. compare the distance walked with the command over the whole episode: a
    robot that fell after 2 s, having walked all 1 m asked of it by then, still moves down,
    since its 0.5 m/s command asked 10 m of the 20 s episode; one that fell after walking 3 m
    (past half of its 4 m tile) moves up."""
    env = make_env("go2-rough", num_envs=3, seed=0, config=SMALL_TERRAIN)
    env.reset()
    env.curriculum.levels[:] = 1
    qpos = env.backend.qpos.clone()
    qpos[0, 0] = env.origin[0, 0] + 1.0
    qpos[1, 0] = env.origin[1, 0] + 3.0  # past half of the 4 m tile
    env.backend.qpos[:] = qpos
    env.commands[:, :2] = torch.tensor([0.5, 0.0])
    env.commanded_distance[:] = 1.0
    env.episode_length_buf[:] = 100  # 2 s of 20
    env.reset_envs(torch.tensor([0, 1]))
    assert env.curriculum.levels.tolist() == [0, 2, 1]
