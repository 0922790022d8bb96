"""Go2's uncertain physics (robot.yaml `physics`) and the legged task's randomization of it:
the schema, the MJCF-against-nominal check, each randomized field's effect on the dynamics
(same initial state and actions, the field at two values), the per-env draws, the observation
age ring buffer, the IMU biases and the critic's named terms. The same per-field check on
the mjwarp backend is in tests/test_mjwarp.py (test_go2_randomized_fields_act_on_mjwarp)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from simreal.api import evaluation_config, make_env, train
from simreal.robots import RobotError, load_robot_dir
from simreal.robots.registry import get_robot
from simreal.sim.actuators import PhysicsMismatch

ROBOTS = Path(__file__).resolve().parent.parent / "robots"
QUIET = {"randomization": {"enabled": False}, "init": {"joint_noise": 0.0, "base_speed": 0.0}}

# field -> how to set it on env k (its range's far end from the nominal)
FIELDS = {
    "joint_damping": lambda e, k: e.joint_damping.__setitem__(k, 2.5),
    "joint_frictionloss": lambda e, k: e.joint_frictionloss.__setitem__(k, 0.3),
    "joint_armature": lambda e, k: e.joint_armature.__setitem__(k, 0.025),
    "link_mass_scale": lambda e, k: e.link_mass_scale.__setitem__(k, 1.2),
    "link_com_offset": lambda e, k: e.link_com_offset.__setitem__(k, 0.01),
    "trunk_added_mass": lambda e, k: e.added_mass.__setitem__(k, 2.0),
    "trunk_com_offset": lambda e, k: e.com_offset.__setitem__(k, 0.03),
    "contact_friction": lambda e, k: e.friction.__setitem__(k, 0.3),
    "contact_softness": lambda e, k: e.softness.__setitem__(k, 1.0),
    "contact_restitution": lambda e, k: e.restitution.__setitem__(k, 0.3),
    "motor_strength": lambda e, k: e.actuators.strength.__setitem__(k, 0.9),
    "kp_scale": lambda e, k: e.actuators.kp_scale.__setitem__(k, 1.1),
    "kd_scale": lambda e, k: e.actuators.kd_scale.__setitem__(k, 1.1),
    "command_latency": lambda e, k: e.actuators.latency.__setitem__(k, 0.04),
}
# rad: the least max |joint angle - the nominal env's| over the 0.6 s, per field. Measured
# (mujoco): damping 1.30, frictionloss 0.24, armature 0.40, link masses 0.32, link CoMs 0.31,
# trunk mass 0.21, trunk CoM 0.35, friction 0.59, softness 0.51, restitution 0.30, motor
# strength 0.34, kp 0.44, kd 0.19, latency 0.69 (the drop from the spawn height amplifies
# every difference; the control env differs by exactly 0).
MARGIN = 0.05


def field_effects(backend: str = "mujoco", steps: int = 30) -> dict[str, float]:
    """Env 0 nominal, env 1 nominal too (a control: must match env 0 exactly), env k+2 with
    field k changed; all from env 0's initial state (dropped from the spawn height), under
    the same joint targets (a 2 Hz trot-like sweep). The max |joint angle - env 0's| per
    field, and the control's."""
    names = list(FIELDS)
    n = len(names) + 2
    kwargs = {"backend": backend, "device": "cpu"} if backend != "mujoco" else {}
    env = make_env("go2-flat", num_envs=n, seed=0, config=QUIET, **kwargs)
    env.reset()
    ids = torch.arange(n)
    for k, name in enumerate(names):
        FIELDS[name](env, k + 2)
    env.write_model(ids)
    b = env.backend
    b.qpos[:] = b.qpos[0:1].clone()
    b.qvel[:] = b.qvel[0:1].clone()
    worst = torch.zeros(n, dtype=torch.float64)
    phase = torch.tensor([0.0, 0.0, 0.0, math.pi, math.pi, math.pi] * 2, dtype=torch.float64)
    for t in range(steps):
        target = 0.6 * torch.sin(2 * math.pi * 2.0 * t * env.dt + phase)
        b.ctrl[:] = target.to(b.ctrl.dtype)
        b.step(env.decimation)
        q = b.qpos[:, env._qpos_adr].double()
        worst = torch.maximum(worst, (q - q[0:1]).abs().max(-1).values)
    out = {name: float(worst[k + 2]) for k, name in enumerate(names)}
    out["control"] = float(worst[1])
    return out


@pytest.fixture(scope="module")
def effects() -> dict[str, float]:
    return field_effects()


# --- the description ----------------------------------------------------------------------------
def test_go2_physics_span_both_public_mjcfs():
    phys = get_robot("go2").spec.physics
    lo, hi = phys.joint_damping.range
    assert lo <= 0.0 and hi >= 2.5 and phys.joint_damping.nominal == 0.0
    lo, hi = phys.joint_frictionloss.range
    assert lo <= 0.0 and hi >= 0.3
    lo, hi = phys.joint_armature.range
    assert lo < 0.01 < hi
    lo, hi = phys.foot_friction.range
    assert lo <= 0.3 and hi >= 1.5  # 0.8 and 1 in the public MJCFs
    ends = phys.foot_solimp.range
    assert [0.9, 0.95, 0.001] in [list(e) for e in ends]  # MuJoCo's default
    assert [0.015, 1.0, 0.031] in [list(e) for e in ends]  # the soft public one


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


def _task(robot):
    from simreal.sim.registry import get_task

    cls = get_task("go2-flat")
    return cls(robot, cls.config_class(), 2, 0)


@pytest.mark.parametrize("edit, named", [
    (lambda d: d["physics"]["joint_damping"].update(nominal=2.0),
     r"FR_hip_joint damping is 0, robot.yaml physics.joint_damping.nominal gives 2"),
    (lambda d: d["physics"]["joint_frictionloss"].update(nominal=0.2),
     r"physics.joint_frictionloss.nominal gives 0.2"),
    (lambda d: d["physics"]["joint_armature"].update(nominal=0.02),
     r"physics.joint_armature.nominal gives 0.02"),
    (lambda d: d["joints"][4].update(damping=0.5),
     r"FL_thigh_joint damping is 0, robot.yaml joints\[4\].damping gives 0.5"),
    (lambda d: d["physics"]["foot_friction"].update(nominal=0.8),
     r"FR_foot friction is 1, robot.yaml physics.foot_friction.nominal gives 0.8"),
    (lambda d: d["physics"]["foot_solimp"].update(nominal=[0.5, 0.95, 0.001]),
     r"FR_foot solimp is 0.9 0.95 0.001, robot.yaml physics.foot_solimp.nominal gives 0.5"),
])
def test_task_refuses_an_mjcf_whose_physics_disagree_with_robot_yaml(go2_copy, edit, named):
    _edit(go2_copy, edit)
    robot = load_robot_dir(go2_copy)
    with pytest.raises(PhysicsMismatch, match=named):
        _task(robot)


def test_a_joints_own_nominal_overrides_the_robots(go2_copy):
    """A calibrated robot: one joint's damping fitted, in its MJCF joint and robot.yaml."""
    xml = go2_copy / "go2.xml"
    xml.write_text(xml.read_text().replace('<joint name="FL_thigh_joint"',
                                           '<joint name="FL_thigh_joint" damping="0.5"'))
    with pytest.raises(PhysicsMismatch, match=r"FL_thigh_joint damping is 0.5"):
        _task(load_robot_dir(go2_copy))
    _edit(go2_copy, lambda d: d["joints"][4].update(damping=0.5))
    env = _task(load_robot_dir(go2_copy))
    assert float(env.joint_damping[0, 4]) == pytest.approx(0.5)


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["physics"]["joint_damping"].update(nominal=3.0), "physics.joint_damping"),
    (lambda d: d["physics"]["joint_frictionloss"].update(range=[-0.1, 0.3]),
     "joint_frictionloss.range: must not be negative"),
    (lambda d: d["physics"]["foot_solimp"].update(nominal=[0.9, 0.95]), "physics.foot_solimp"),
    (lambda d: d["physics"].update(joint_stiffness={"nominal": 0, "range": [0, 1]}),
     "physics.joint_stiffness"),
    (lambda d: d["feet"][2].pop("geom"), "feet[2]"),
    (lambda d: d["feet"][1].update(geom="paw"), "feet[1].geom"),
])
def test_malformed_physics_names_file_and_field(go2_copy, edit, field):
    _edit(go2_copy, edit)
    with pytest.raises(RobotError) as err:
        load_robot_dir(go2_copy)
    assert str(go2_copy / "robot.yaml") in str(err.value) and field in str(err.value)


def test_a_robot_without_physics_keeps_its_mjcf_values(go2_copy):
    _edit(go2_copy, lambda d: d.pop("physics"))
    robot = load_robot_dir(go2_copy)
    assert robot.spec.physics.joint_damping is None
    from simreal.sim.registry import get_task

    cls = get_task("go2-flat")
    env = cls(robot, cls.config_class(), 8, 0)
    env.reset()
    # not randomized: the MJCF's damping and frictionloss, its solimp untouched
    assert torch.all(env.dof_damping[:, env._dofs] == 0.0)
    assert (env.dof_frictionloss[:, env._dofs] - 0.1).abs().max() < 1e-12
    assert env.geom_solimp is None
    assert env.friction.std() > 0  # contact friction still is, over (0.3, 1.5)
    assert env.friction.min() >= 0.3 and env.friction.max() <= 1.5


# --- each randomized field changes the dynamics -----------------------------------------------
def test_the_control_env_matches_the_nominal_one_exactly(effects):
    assert effects["control"] == 0.0


@pytest.mark.parametrize("field", list(FIELDS))
def test_randomized_field_changes_the_dynamics(effects, field):
    assert effects[field] > MARGIN, effects


# --- per env, as drawn ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def drawn():
    env = make_env("go2-flat", num_envs=32, seed=4)
    env.reset()
    return env


def _rows(env, field):
    """(model field values per env, the env's drawn values, the range they come from)."""
    d, dofs, links, cg = env, env._dofs, env._links, env._contact_geoms
    phys = env.robot.spec.physics
    return {
        "joint_damping": (d.dof_damping[:, dofs], d.joint_damping, (0.0, 2.5)),
        "joint_frictionloss": (d.dof_frictionloss[:, dofs], d.joint_frictionloss, (0.0, 0.3)),
        "joint_armature": (d.dof_armature[:, dofs], d.joint_armature,
                           phys.joint_armature.range),
        "link_mass": (d.body_mass[:, links], d.nominal_link_mass * d.link_mass_scale.double(),
                      (0.8 * 0.241352, 1.2 * 1.152)),
        "link_inertia": (d.body_inertia[:, links, 0],
                         d.nominal_link_inertia[:, 0] * d.link_mass_scale.double(),
                         (0.0, 0.01)),
        "link_com": (d.body_ipos[:, links], d.nominal_link_ipos + d.link_com_offset.double(),
                     (-0.16, 0.04)),
        "trunk_mass": (d.body_mass[:, env.trunk], 6.921 + d.added_mass.double(),
                       (6.921 - 1, 6.921 + 2)),
        "foot_friction": (d.geom_friction[:, cg, 0], d.friction[:, None].expand(-1, len(cg)),
                          (0.3, 1.5)),
        "foot_solimp_width": (d.geom_solimp[:, cg, 2],
                              (0.001 + 0.03 * d.softness.double())[:, None].expand(-1, len(cg)),
                              (0.001, 0.031)),
    }[field]


@pytest.mark.parametrize("field", ["joint_damping", "joint_frictionloss", "joint_armature",
                                   "link_mass", "link_inertia", "link_com", "trunk_mass",
                                   "foot_friction", "foot_solimp_width"])
def test_randomized_field_reaches_the_engine_per_env_as_drawn(drawn, field):
    model, want, (lo, hi) = _rows(drawn, field)
    torch.testing.assert_close(model.double(), want.double(), rtol=1e-6, atol=1e-9)
    assert model.min() >= lo - 1e-9 and model.max() <= hi + 1e-9
    assert model.reshape(len(model), -1)[:, 0].std() > 0  # differs per env


def test_issue_ranges_are_the_defaults(drawn):
    """Damping 0-2.5, frictionloss 0-0.3, foot friction 0.3-1.5, latency and observation age
    0-40 ms: drawn over most of their range across 32 envs x 12 joints."""
    assert drawn.joint_damping.max() > 2.0 and drawn.joint_damping.min() < 0.5
    assert drawn.joint_frictionloss.max() > 0.25 and drawn.joint_frictionloss.min() < 0.05
    assert drawn.friction.max() > 1.2 and drawn.friction.min() < 0.6
    lat = drawn.actuators.latency
    assert lat.max() <= 0.04 + 1e-12 and lat.max() > 0.03 and drawn.actuators.max_latency == 0.04
    assert drawn.obs_age.max() == 8 or drawn.obs_age.max() >= 7  # physics steps of 5 ms
    assert drawn.obs_age.min() <= 1


def test_critic_sees_every_randomized_parameter_by_name(drawn):
    terms = drawn.privileged_terms()
    nj, nl = 12, 12
    dims = {"contact_friction": 1, "contact_restitution": 1, "contact_softness": 1,
            "trunk_added_mass": 1, "trunk_com_offset": 3, "link_mass_scale": nl,
            "link_com_offset": 3 * nl, "joint_damping": nj, "joint_frictionloss": nj,
            "joint_armature": nj, "joint_offset": nj, "motor_strength": nj, "kp_scale": nj,
            "kd_scale": nj, "command_latency": 1, "observation_age": 1, "imu_bias": 8}
    for name, dim in dims.items():
        assert terms[name].shape == (32, dim), name
        assert terms[name].abs().max() <= 1.0 + 1e-5, name  # normalized by its range
    torch.testing.assert_close(terms["joint_damping"], (drawn.joint_damping / 1.25 - 1).float())
    torch.testing.assert_close(terms["observation_age"][:, 0],
                               drawn.obs_age.float() * 0.005 / 0.02 - 1)
    critic = drawn.get_observations()["critic"]
    assert critic.shape[1] == 45 + drawn.privileged().shape[1]


# --- what the actor sees ----------------------------------------------------------------------
def _aged_env(ages: list[int]):
    cfg = {"init": {"joint_noise": 0.0, "base_speed": 0.0},
           "noise": {"angular_velocity": 0.0, "orientation": 0.0, "joint_pos": 0.0,
                     "joint_vel": 0.0},
           "randomization": {"gyro_bias": 0.0, "accel_bias": 0.0, "tilt_bias": 0.0,
                             "joint_offset": 0.0, "push_velocity": 0.0}}
    env = make_env("go2-flat", num_envs=len(ages), seed=1, config=cfg)
    env.reset()
    env.obs_age[:] = torch.tensor(ages)
    return env


def test_observation_age_gives_the_actor_older_readings_than_the_critic():
    """Ages 0, 2, 4 and 8 physics steps: the actor's readings are the current ones, ones
    between control steps, the last control step's and the one before's."""
    env = _aged_env([0, 2, 4, 8])
    g = torch.Generator().manual_seed(0)
    current = []
    for _ in range(6):
        env.step(torch.rand(4, 12, generator=g) * 2 - 1)
        current.append({k: v.clone() for k, v in env.signals().items()})
    seen = env.noisy_signals()
    for key in ("joint_pos", "joint_vel", "angular_velocity", "orientation"):
        now, one, two = current[-1][key], current[-2][key], current[-3][key]
        torch.testing.assert_close(seen[key][0], now[0])
        torch.testing.assert_close(seen[key][2], one[2])  # 4 physics steps: 20 ms
        torch.testing.assert_close(seen[key][3], two[3])  # 8: 40 ms
        assert not torch.allclose(seen[key][1], now[1]) and not torch.allclose(seen[key][1],
                                                                               one[1])
    # the critic's own copy of the actor's terms is current
    obs = env.get_observations()
    dim = obs["policy"].shape[1]
    assert torch.allclose(obs["policy"][0], obs["critic"][0, :dim], atol=1e-6)
    assert not torch.allclose(obs["policy"][3], obs["critic"][3, :dim], atol=1e-3)


def test_imu_biases_shift_the_actors_gyro_and_tilt_its_gravity():
    env = _aged_env([0, 0])
    env.gyro_bias[1] = torch.tensor([0.02, -0.01, 0.0])
    env.tilt_bias[1] = torch.tensor([0.02, 0.0])
    env._tilt_quat[1] = torch.tensor([math.cos(0.01), math.sin(0.01), 0.0, 0.0])
    env.step(torch.zeros(2, 12))
    true, seen = env.signals(), env.noisy_signals()
    torch.testing.assert_close(seen["angular_velocity"][1] - true["angular_velocity"][1],
                               torch.tensor([0.02, -0.01, 0.0]))
    from simreal.core.spatial import quat_angle

    assert float(quat_angle(seen["orientation"][1], true["orientation"][1])) == pytest.approx(
        0.02, abs=1e-4)
    torch.testing.assert_close(seen["orientation"][0], true["orientation"][0])


def test_forty_ms_latency_delays_the_drivers_command_by_eight_physics_steps():
    env = make_env("go2-flat", num_envs=2, seed=0, config=QUIET)
    env.reset()
    act, b = env.actuators, env.backend
    act.latency[:] = torch.tensor([0.0, 0.04])
    act.write(torch.arange(2))
    force = b.batch.bind("actuator_force")
    b.step(1)
    before = force[:, 2].copy()
    b.ctrl[:, 2] = 1.0  # FR calf: a 20 N m step in the PD torque
    jumped = []
    for _ in range(10):
        b.step(1)
        jumped.append(abs(force[:, 2] - before) > 8.0)
    assert [[bool(j[i]) for j in jumped].index(True) for i in range(2)] == [0, 8]


def test_action_history_widens_the_actor_input_by_whole_actions():
    one = make_env("go2-flat", num_envs=2, seed=0)
    three = make_env("go2-flat", num_envs=2, seed=0, config={"action_history": 3})
    assert three.contract().obs_dim == one.contract().obs_dim + 2 * one.num_actions
    assert three.get_observations()["policy"].shape[-1] == three.contract().obs_dim


def test_state_history_shows_the_actor_the_previous_periods_sensed_state():
    one = make_env("go2-flat", num_envs=2, seed=0)
    two = make_env("go2-flat", num_envs=2, seed=0, config={"state_history": 2})
    sensed = 3 + 3 + 2 * one.num_actions  # gyro, gravity, joint positions and velocities
    assert two.contract().obs_dim == one.contract().obs_dim + sensed
    before = two.get_observations()["policy"].clone()
    after = two.step(torch.zeros(2, two.num_actions))[0]["policy"]
    # the gyro term's history comes first, oldest first: the older half now holds what the
    # newer half held a period ago, and the newer half a fresh (moved, noisy) reading
    assert torch.equal(after[:, 0:3], before[:, 3:6])
    assert not torch.allclose(after[:, 3:6], before[:, 3:6])
    assert after.shape[-1] == two.contract().obs_dim


# --- randomization curriculum ---------------------------------------------------------------
def test_randomization_curriculum_widens_the_drawn_ranges_with_training():
    """Start ranges at first (after `hold`), the config's at the end of `steps`, linear
    between; the critic's terms stay scaled by the final ranges."""
    cfg = {"randomization": {"joint_damping": [2.0, 2.5], "latency": [0.0, 0.04]},
           "randomization_curriculum": {"start": {"joint_damping": [0.0, 0.0],
                                                  "latency": [0.0, 0.0]},
                                        "steps": 1000, "hold": 200}}
    env = make_env("go2-flat", num_envs=16, seed=2, config=cfg)
    assert env.has_curriculum and not env.has_reward_curriculum
    ids = torch.arange(16)

    def drawn_at(env_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        progress = env.set_training_progress(env_steps)
        env.reset_envs(ids)
        return progress["randomization"], env.joint_damping.clone()

    frac, damping = drawn_at(0)
    assert frac == 0.0 and damping.abs().max() == 0.0
    assert env.actuators.latency.abs().max() == 0.0
    frac, damping = drawn_at(700)  # halfway: [1.0, 1.25]
    assert frac == pytest.approx(0.5)
    assert damping.min() >= 1.0 - 1e-9 and damping.max() <= 1.25 + 1e-9
    frac, damping = drawn_at(10_000)
    assert frac == 1.0 and damping.min() >= 2.0 - 1e-9 and damping.max() <= 2.5 + 1e-9
    assert env.actuators.latency.max() > 0.02
    terms = env.privileged_terms()["joint_damping"]
    torch.testing.assert_close(terms, (env.joint_damping / 0.25 - 9).float())  # (x-2.25)/0.25


@pytest.mark.parametrize("start, message", [
    ({"push_velocity": [0.0, 0.1]}, "'push_velocity' is not a randomization range"),
    ({"latency": [0.02, 0.0]}, "randomization_curriculum.start.latency: low 0.02 > high 0.0"),
])
def test_randomization_curriculum_refuses_what_it_cannot_widen(start, message):
    with pytest.raises(ValueError, match=message):
        make_env("go2-flat", num_envs=1, seed=0,
                 config={"randomization_curriculum": {"start": start, "steps": 10}})


def test_evaluation_drops_the_randomization_curriculum():
    cfg = {"randomization_curriculum": {"start": {"latency": [0.0, 0.0]}, "steps": 10},
           "randomization": {"latency": [0.0, 0.04]}}
    assert evaluation_config("go2-flat", cfg) == {"randomization": {"latency": [0.0, 0.04]}}


def test_training_logs_the_randomization_curriculum(tmp_path):
    cfg = {"episode_s": 2.0, "randomization_curriculum": {
        "start": {"joint_damping": [0.0, 0.5]}, "steps": 100}}
    train("go2-flat", algo="ppo", envs=4, steps=80, seed=0, out=tmp_path / "run",
          eval_episodes=1, progress=False, algo_config={"steps_per_env": 5}, task_config=cfg)
    events = EventAccumulator(str(tmp_path / "run")).Reload()
    progress = [e.value for e in events.Scalars("curriculum/randomization")]
    assert progress == pytest.approx([0.0, 0.2, 0.4, 0.6])  # at each 20-step iteration's start
