"""Panda: the description, its kinematics against the DH table, and its joint control."""

import math
import shutil
from pathlib import Path

import mujoco
import numpy as np
import pytest
import yaml

from simreal.robots import RobotError, load_robot_dir
from simreal.robots.kinematics import forward_kinematics
from simreal.robots.registry import get_robot

ROBOTS = Path(__file__).resolve().parent.parent / "robots"
READY = [0.0, -math.pi / 4, 0.0, -3 * math.pi / 4, 0.0, math.pi / 2, math.pi / 4]

# robots.md, Panda table: (a, d, alpha) per joint, then the flange
DH = [(0, 0.333, 0), (0, 0, -math.pi / 2), (0, 0.316, math.pi / 2),
      (0.0825, 0, math.pi / 2), (-0.0825, 0.384, -math.pi / 2), (0, 0, math.pi / 2),
      (0.088, 0, math.pi / 2)]
FLANGE = (0, 0.107, 0)
RANGES = [(-2.8973, 2.8973), (-1.7628, 1.7628), (-2.8973, 2.8973), (-3.0718, -0.0698),
          (-2.8973, 2.8973), (-0.0175, 3.7525), (-2.8973, 2.8973)]


def _craig(a: float, d: float, alpha: float, theta: float) -> np.ndarray:
    """The 4x4 modified-DH transform, written out as in Craig's textbook."""
    ct, st, ca, sa = math.cos(theta), math.sin(theta), math.cos(alpha), math.sin(alpha)
    return np.array([[ct, -st, 0, a],
                     [st * ca, ct * ca, -sa, -sa * d],
                     [st * sa, ct * sa, ca, ca * d],
                     [0, 0, 0, 1]])


def _flange_dh(q: np.ndarray) -> np.ndarray:
    t = np.eye(4)
    for (a, d, alpha), qi in zip(DH, q, strict=True):
        t = t @ _craig(a, d, alpha, qi)
    return t @ _craig(*FLANGE, 0.0)


def _model() -> tuple[mujoco.MjModel, mujoco.MjData]:
    model = mujoco.MjModel.from_xml_path(str(get_robot("panda").mjcf_path))
    return model, mujoco.MjData(model)


@pytest.fixture
def panda_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "panda"
    shutil.copytree(ROBOTS / "panda", dst)
    return dst


def test_panda_loads_with_robots_md_figures():
    robot = get_robot("panda")
    spec = robot.spec
    assert spec.kind == "arm" and spec.control.decimation == 4
    assert robot.actuator_names == [f"joint{i}" for i in range(1, 8)] + ["gripper"]
    assert [j.torque_limit for j in spec.joints[:7]] == [87.0] * 4 + [12.0] * 3
    np.testing.assert_allclose([j.default for j in spec.joints[:7]], READY)
    np.testing.assert_allclose([(r.a, r.d, r.alpha) for r in spec.kinematics.dh], DH)
    model, _ = _model()
    for i, rng in enumerate(RANGES):
        np.testing.assert_allclose(model.jnt_range[model.joint(f"panda_joint{i + 1}").id], rng)
    np.testing.assert_allclose(model.jnt_range[model.joint("panda_finger_joint1").id], [0, 0.04])
    for i in range(8):
        assert model.actuator_forcerange[i, 1] == spec.joints[i].torque_limit
    moving = [model.body(n).id for n in ("link1", "link2", "link3", "link4", "link5", "link6",
                                         "link7", "hand", "finger_left", "finger_right")]
    assert model.body_mass[moving].sum() == pytest.approx(spec.mass, abs=1e-6)


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.pop("kinematics"), "kinematics"),
    (lambda d: d["kinematics"].update(tool_site="flange"), "kinematics.tool_site"),
    (lambda d: d["kinematics"]["dh"].extend([{"a": 0, "d": 0, "alpha": 0}] * 2),
     "kinematics.dh"),
    (lambda d: d["joints"][7].update(actuator="hand"), "joints[7].actuator"),
    (lambda d: d["kinematics"]["flange"].update(beta=1.0), "kinematics.flange.beta"),
])
def test_malformed_panda_yaml_names_file_and_field(panda_copy, edit, field):
    path = panda_copy / "robot.yaml"
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(RobotError) as err:
        load_robot_dir(panda_copy)
    assert "robot.yaml" in str(err.value) and field.split(".")[0] in str(err.value)


def test_tool_pose_matches_the_dh_table_at_several_configurations():
    """MuJoCo's tool site and the deploy-side forward kinematics both equal a DH chain
    computed here from robots.md's table (plus the hand's mount and tool offset)."""
    robot = get_robot("panda")
    kin = robot.spec.kinematics
    model, data = _model()
    tool = np.eye(4)
    tool[:3, 3] = kin.tool_position
    mat = np.zeros(9)
    mujoco.mju_quat2Mat(mat, np.array(kin.tool_quat))
    tool[:3, :3] = mat.reshape(3, 3)
    rng = np.random.default_rng(0)
    lo, hi = np.array(RANGES).T
    configs = [np.zeros(7), np.array(READY), *rng.uniform(lo, hi, size=(6, 7))]
    for q in configs:
        expect = _flange_dh(q) @ tool
        data.qpos[:7] = q
        mujoco.mj_kinematics(model, data)
        site = model.site("tcp").id
        np.testing.assert_allclose(data.site_xpos[site], expect[:3, 3], atol=1e-9)
        np.testing.assert_allclose(data.site_xmat[site].reshape(3, 3), expect[:3, :3], atol=1e-9)
        pos, quat = forward_kinematics(kin, q[None])
        np.testing.assert_allclose(pos[0], expect[:3, 3], atol=1e-9)
        mat = np.zeros(9)
        mujoco.mju_quat2Mat(mat, quat[0])
        np.testing.assert_allclose(mat.reshape(3, 3), expect[:3, :3], atol=1e-9)
    # at the ready pose the hand points straight down, 0.307 m out and 0.487 m up (DH)
    pos, quat = forward_kinematics(kin, np.array(READY)[None])
    np.testing.assert_allclose(pos[0], [0.30689, 0.0, 0.48688], atol=1e-4)
    assert abs(quat[0, 1]) == pytest.approx(1.0, abs=1e-9)


def test_arm_holds_its_default_pose_under_pd_and_tracks_a_step():
    """Gravity-compensated PD at the physics rate: zero command holds the default pose;
    a target 0.3 rad away is reached (within 5 mrad) in a second."""
    robot = get_robot("panda")
    model, data = _model()
    q0 = np.array([j.default for j in robot.spec.joints])
    data.qpos[:8] = q0
    data.qpos[8] = q0[7]
    steps = round(2.0 / model.opt.timestep)
    for _ in range(steps):
        mujoco.mj_step(model, data)
    np.testing.assert_allclose(data.qpos[:8], q0, atol=1e-4)
    assert np.abs(data.qvel[:8]).max() < 1e-3
    data.ctrl[:7] = 0.3 * np.array([1, -1, 1, 1, -1, 1, -1])
    for _ in range(round(1.0 / model.opt.timestep)):
        mujoco.mj_step(model, data)
    np.testing.assert_allclose(data.qpos[:7] - q0[:7], data.ctrl[:7], atol=5e-3)


def test_gripper_closes_on_the_cube_and_the_fingertips_feel_it():
    model, data = _model()
    robot = get_robot("panda")
    q0 = np.array([j.default for j in robot.spec.joints])
    data.qpos[:8] = q0
    data.qpos[8] = 0.04
    # put the cube (edge 5 cm) between the open fingers at the tool centre point
    mujoco.mj_kinematics(model, data)
    cube = model.jnt_qposadr[model.joint("cube").id]
    data.qpos[cube:cube + 3] = data.site_xpos[model.site("tcp").id]
    data.qpos[cube + 3:cube + 7] = [1, 0, 0, 0]
    data.ctrl[7] = -0.04  # close
    for _ in range(round(0.5 / model.opt.timestep)):
        mujoco.mj_step(model, data)
    fingers = data.qpos[7:9]
    np.testing.assert_allclose(fingers, 0.025, atol=2e-3)  # stopped by the 5 cm cube
    assert data.sensor("pad_left_touch").data[0] > 1.0
    assert data.sensor("pad_right_touch").data[0] > 1.0
    # the cube is held: it has not fallen to the table
    assert data.qpos[cube + 2] > 0.4
