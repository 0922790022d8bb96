"""Calibration (calibration/): logs, the calibration file, applying it, and the fit validated
against a simulated robot with hidden, perturbed parameters and noisy, biased sensors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

pytest.importorskip("mujoco")
pytest.importorskip("rosbags")
pytest.importorskip("scipy")

from simreal.calibration.apply import (  # noqa: E402
    calibrated_robot_dir,
    randomization_ranges,
    split_latency,
    task_overrides,
)
from simreal.calibration.experiments import make_experiment  # noqa: E402
from simreal.calibration.logs import LogError, read_log  # noqa: E402
from simreal.calibration.record import record_in_process, write_log  # noqa: E402
from simreal.calibration.schema import (  # noqa: E402
    Calibration,
    CalibrationError,
    Estimate,
    load_calibration,
    save_calibration,
)
from simreal.robots.registry import get_robot  # noqa: E402


@pytest.fixture(scope="module")
def go2():
    return get_robot("go2")


@pytest.fixture(scope="module")
def crazyflie():
    return get_robot("crazyflie")


@pytest.fixture(scope="module")
def go2_log(tmp_path_factory, go2):
    """A short go2-air log against the (unperturbed) in-process HIL robot."""
    path = tmp_path_factory.mktemp("log") / "go2-air.mcap"
    exp = make_experiment("go2-air", go2, scale=0.1)
    write_log(path, record_in_process(exp, go2))
    return path, exp


def _calib(robot, params: dict[str, tuple[float, float | None, float]], sigmas: float = 3.0
           ) -> Calibration:
    est = {n: Estimate(value=v, std=s, nominal=nom) for n, (v, s, nom) in params.items()}
    return Calibration(robot=robot.name, base_hash=robot.description_hash,
                       experiments=["test"], sigmas=sigmas, parameters=est,
                       randomization=randomization_ranges(est, sigmas))


# --- logs --------------------------------------------------------------------------------------
def test_log_round_trip(go2_log, go2):
    path, exp = go2_log
    log = read_log(path, go2)
    assert log.experiment == "go2-air" and log.interface == "native"
    nj = len(go2.spec.joints)
    # one command per control period over the experiment, in scenario time from 0
    assert log.commands.values["q"].shape[1] == nj
    assert abs(log.commands.t[0]) < 1e-9
    assert len(log.commands.t) == round(exp.duration_s * exp.rate_hz)
    assert np.allclose(np.diff(log.commands.t), 1.0 / exp.rate_hz, atol=1e-6)
    # the gains sent are the ones read back (stop phase: gentle; steps: high gain)
    sent = exp.command(0.0, {})
    assert np.allclose(log.commands.values["kp"][0], sent["kp"])
    js = log.signal("joint_pos")
    assert js.values["joint_pos"].shape[1] == nj and np.all(np.diff(js.t) > 0)
    assert (js.t < 0).any()  # state before the first command (the rest pose)
    assert [p[0] for p in log.meta["phases"]][:2] == ["settle", "still"]
    assert log.phases("still")


def test_log_readable_by_rosbags_alone(go2_log):
    from rosbags.highlevel import AnyReader

    path, _ = go2_log
    with AnyReader([path]) as reader:
        topics = {c.topic for c in reader.connections}
    assert {"/lowstate", "/lowcmd"} <= topics


def test_log_read_from_a_rosbag2_folder(tmp_path, go2_log, go2):
    """The same log as a rosbag2 folder (sqlite3 storage, metadata.yaml: what `ros2 bag record`
    writes on Humble), rewritten message by message with rosbags, reads back the same."""
    from rosbags.highlevel import AnyReader
    from rosbags.rosbag2 import StoragePlugin, Writer

    path, _ = go2_log
    bag = tmp_path / "go2_air_bag"
    with AnyReader([path]) as reader, \
            Writer(bag, version=8, storage_plugin=StoragePlugin.SQLITE3) as writer:
        out = {c.id: writer.add_connection(c.topic, c.msgtype, typestore=reader.typestore)
               for c in reader.connections}
        for conn, t_ns, data in reader.messages():
            writer.write(out[conn.id], t_ns, data)
    assert (bag / "metadata.yaml").exists() and list(bag.glob("*.db3"))
    a, b = read_log(path, go2), read_log(bag, go2)
    assert (b.experiment, b.interface, b.meta) == (a.experiment, a.interface, a.meta)
    for name in ("joint_pos", "joint_vel"):
        assert np.array_equal(a.signal(name).t, b.signal(name).t)
        assert np.array_equal(a.signal(name).values[name], b.signal(name).values[name])
    assert np.array_equal(a.commands.values["q"], b.commands.values["q"])


def test_log_errors_name_the_file(tmp_path, go2_log, crazyflie):
    with pytest.raises(FileNotFoundError, match="nope.mcap"):
        read_log(tmp_path / "nope.mcap", crazyflie)
    bad = tmp_path / "bad.mcap"
    bad.write_bytes(b"not an mcap file at all")
    with pytest.raises(LogError, match="bad.mcap: not a readable"):
        read_log(bad, crazyflie)
    with pytest.raises(LogError, match="recorded on robot 'go2', not 'crazyflie'"):
        read_log(go2_log[0], crazyflie)


# --- the calibration file ----------------------------------------------------------------------
def test_schema_round_trip_and_errors(tmp_path, go2):
    calib = _calib(go2, {"FR_hip_joint.damping": (0.2, 0.01, 0.1), "latency": (0.01, 1e-4, 0.0)})
    path = save_calibration(calib, tmp_path / "calib.yaml")
    assert load_calibration(path) == calib
    assert not list(tmp_path.glob("*.tmp"))  # written atomically

    raw = yaml.safe_load(path.read_text())
    raw["parameters"]["latency"]["colour"] = "red"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(CalibrationError, match=r"calib.yaml: parameters.latency.colour: Extra"):
        load_calibration(path)

    raw = yaml.safe_load(save_calibration(calib, tmp_path / "c2.yaml").read_text())
    raw["randomization"]["latency"] = [0.02, 0.01]
    (tmp_path / "c2.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(CalibrationError, match=r"c2.yaml: .*randomization.latency: low 0.02"):
        load_calibration(tmp_path / "c2.yaml")

    raw["randomization"] = {"mass": [1.0, 2.0]}
    (tmp_path / "c2.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(CalibrationError, match="randomization.mass: not a fitted parameter"):
        load_calibration(tmp_path / "c2.yaml")

    (tmp_path / "c3.yaml").write_text("- a list\n")
    with pytest.raises(CalibrationError, match="c3.yaml: expected a mapping"):
        load_calibration(tmp_path / "c3.yaml")


def test_randomization_centred_on_fit():
    est = {"mass": Estimate(value=0.03, std=0.001, nominal=0.027),
           "FR_hip_joint.offset": Estimate(value=0.03, std=1e-5, nominal=0.0),
           "latency": Estimate(value=0.01, std=0.0, nominal=0.0)}
    rnd = randomization_ranges(est, sigmas=3.0)
    for name, e in est.items():
        lo, hi = rnd[name]
        assert (lo + hi) / 2 == pytest.approx(e.value)
    assert rnd["mass"][1] - rnd["mass"][0] == pytest.approx(2 * 3 * 0.001)  # from the std
    # widths below the floors are raised to them (what changes between runs)
    assert rnd["FR_hip_joint.offset"][1] - 0.03 == pytest.approx(0.005)
    assert rnd["latency"][1] - 0.01 == pytest.approx(0.002)


# --- applying a calibration --------------------------------------------------------------------
def test_calibrated_robot_dir_overrides_description(tmp_path, go2):
    import mujoco

    calib = _calib(go2, {"FR_hip_joint.damping": (0.25, 0.01, 0.1),
                         "FR_thigh_joint.frictionloss": (0.17, 0.01, 0.0),
                         "FR_calf_joint.armature": (0.0123, 1e-4, 0.01),
                         "FL_hip_joint.offset": (0.03, 1e-4, 0.0),
                         "RR_calf_joint.torque_limit": (30.5, 0.1, 45.43),
                         "latency": (0.01, 1e-4, 0.0)})
    robot = calibrated_robot_dir(go2, calib, tmp_path / "robot")
    assert robot.description_hash != go2.description_hash
    joints = {j.name: j for j in robot.spec.joints}
    assert joints["RR_calf_joint"].torque_limit == pytest.approx(30.5)
    m = mujoco.MjModel.from_xml_path(str(robot.mjcf_path))

    def dof(name: str) -> int:
        return int(m.jnt_dofadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, name)])

    def jid(name: str) -> int:
        return mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, name)

    assert m.dof_damping[dof("FR_hip_joint")] == pytest.approx(0.25)
    assert m.dof_frictionloss[dof("FR_thigh_joint")] == pytest.approx(0.17)
    assert m.dof_armature[dof("FR_calf_joint")] == pytest.approx(0.0123)
    base = mujoco.MjModel.from_xml_path(str(go2.mjcf_path))
    j = jid("FL_hip_joint")
    # the encoder offset is the joint's ref; the stops move with it (true angles unchanged)
    assert m.qpos0[m.jnt_qposadr[j]] - base.qpos0[base.jnt_qposadr[j]] == pytest.approx(0.03)
    assert m.jnt_range[j] - base.jnt_range[j] == pytest.approx([0.03, 0.03])
    act = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, joints["RR_calf_joint"].actuator)
    assert m.actuator_forcerange[act] == pytest.approx([-30.5, 30.5])
    assert m.actuator_delay[act] == pytest.approx(0.01)
    # robot.yaml carries the same per-joint values, so the task takes the calibrated robot
    assert joints["FR_hip_joint"].damping == pytest.approx(0.25)
    from simreal.api import make_env

    env = make_env("go2-flat", 2, 0, robot=str(robot.directory))
    assert env.num_envs == 2

    with pytest.raises(FileExistsError, match="already holds files"):
        calibrated_robot_dir(go2, calib, tmp_path / "robot")
    other = calib.model_copy(update={"robot": "crazyflie"})
    with pytest.raises(CalibrationError, match="for robot 'crazyflie', not 'go2'"):
        calibrated_robot_dir(go2, other, tmp_path / "robot2")


def test_split_latency(go2):
    calib = _calib(go2, {"FR_hip_joint.damping": (0.25, 0.01, 0.1), "latency": (0.01, 1e-4, 0)})
    rest, lat = split_latency(calib)
    assert lat == 0.01
    assert set(rest.parameters) == {"FR_hip_joint.damping"} and "latency" not in rest.randomization
    assert "latency" in calib.parameters  # the original is left as it was


def test_task_overrides_from_ranges(go2, crazyflie):
    from simreal.sim.registry import get_task

    hover = get_task("quadrotor-hover")
    calib = _calib(crazyflie, {"mass": (0.03, 0.0005, 0.027),
                               "motor_time_constant": (0.02, 0.0, 0.025)})
    rnd = task_overrides(calib, hover)["randomization"]
    # the model holds the fitted values: relative ranges centred on 1, widths from the fit
    assert rnd["mass"] == pytest.approx([1 - 3 * 0.0005 / 0.03, 1 + 3 * 0.0005 / 0.03], abs=1e-6)
    assert rnd["motor_time_constant"] == pytest.approx([0.95, 1.05])  # the floor (std 0)
    assert "thrust_coefficient" not in rnd  # not fitted: the task keeps its own range

    walk = get_task("go2-flat")
    calib = _calib(go2, {"FR_hip_joint.strength": (0.9, 0.01, 1.0),
                         "FL_hip_joint.strength": (1.1, 0.01, 1.0),
                         "latency": (0.01, 0.001, 0.0), "FR_hip_joint.offset": (0.02, 0.0, 0.0)})
    rnd = task_overrides(calib, walk)["randomization"]
    assert rnd["motor_strength"] == pytest.approx([0.87, 1.13])
    assert rnd["latency"] == pytest.approx([0.007, 0.013])
    assert rnd["joint_offset"] == pytest.approx(0.005)
    calib = _calib(go2, {"FR_hip_joint.damping": (0.5, 0.1, 0.0),
                         "FL_hip_joint.damping": (0.05, 0.1, 0.0)})
    rnd = task_overrides(calib, walk)["randomization"]
    # absolute ranges over the joints, never below zero
    assert rnd["joint_damping"] == pytest.approx([0.0, 0.5 + 3 * 0.1])


def test_command_delay_holds_whole_commands(tmp_path, go2_log, go2):
    """The simulated robot's latency delays targets and gains together (the replay's latency
    model): with a delay of one state period, the whole response, gain changes included, is
    the undelayed one a period later."""
    path0, exp = go2_log
    write_log(tmp_path / "delayed.mcap", record_in_process(exp, go2, command_delay_s=0.01))
    js0 = read_log(path0, go2).signal("joint_pos")
    js1 = read_log(tmp_path / "delayed.mcap", go2).signal("joint_pos")
    assert np.allclose(np.diff(js0.t), 0.01, atol=1e-6)  # the state period is the delay
    i = np.nonzero(js0.t >= 0)[0]
    i = i[:-1]
    q0, q1 = js0.values["joint_pos"], js1.values["joint_pos"]
    assert np.abs(q1[i + 1] - q0[i]).max() < 1e-9
    assert np.abs(q1[i] - q0[i]).max() > 0.01  # and the delay did change the log
    with pytest.raises(ValueError, match="command_delay_s must be >= 0"):
        record_in_process(exp, go2, command_delay_s=-0.01)


def test_calibrate_refuses_kinds_the_experiment_lacks(tmp_path, go2_log, go2):
    from simreal.calibration.run import calibrate

    with pytest.raises(CalibrationError, match=r"kinds \['mass'\] are not fitted from go2-air"):
        calibrate([go2_log[0]], go2, tmp_path / "c.yaml", kinds=("mass",), progress=False)
    assert not (tmp_path / "c.yaml").exists()


def test_cli_calibrate_bad_input(tmp_path, capsys):
    from simreal.cli import main

    rc = main(["calibrate", str(tmp_path / "missing.mcap"), "--robot", "go2",
               "--out", str(tmp_path / "c.yaml")])
    assert rc == 2
    assert "missing.mcap: no such log" in capsys.readouterr().err
    rc = main(["record", "go2-air", "--robot", "crazyflie", "--sim", "--in-process",
               "--out", str(tmp_path / "x.mcap")])
    assert rc == 2
    assert "for legged robots; crazyflie is quadrotor" in capsys.readouterr().err
    assert not (tmp_path / "c.yaml").exists() and not (tmp_path / "x.mcap").exists()


# --- validation: hidden parameters recovered ---------------------------------------------------
def _check_recovered(result: dict) -> None:
    """Every parameter within its tolerance (calibration/validate.py: 5% of a nonzero truth;
    encoder offsets, zero in the description, within 2.5 mrad; a zero latency within 5% of a
    control period)."""
    bad = {name: r for name, r in result["parameters"].items() if not r["ok"]}
    assert not bad, json.dumps(bad, indent=1)
    for name, r in result["parameters"].items():  # the tolerances are the stated ones
        kind = name.rsplit(".", 1)[-1]
        if kind == "offset":
            assert r["tolerance"] == pytest.approx(0.0025)
        elif r["truth"]:
            assert r["tolerance"] == pytest.approx(0.05 * abs(r["truth"]))


@pytest.mark.slow
def test_validation_quadrotor_hover(tmp_path, crazyflie):
    """quad-hover against a crazyflie with hidden mass, thrust and torque coefficients, motor
    time constant, gyro bias, and noise on every sensor: each parameter within 5%."""
    from simreal.calibration.validate import validate

    result = validate(crazyflie, "quad-hover", scale=0.3, seed=0, workdir=tmp_path)
    names = set(result["parameters"])
    assert {"mass", "thrust_coefficient", "torque_coefficient", "motor_time_constant",
            "latency", "imu.gyro_bias.x", "imu.gyro_bias.y", "imu.gyro_bias.z"} <= names
    _check_recovered(result)
    # and the description's values would not have passed: the hidden ones are off by more
    calib = load_calibration(result["calibration"])
    for name in ("mass", "thrust_coefficient", "torque_coefficient", "motor_time_constant"):
        nominal = calib.parameters[name].nominal
        assert abs(result["parameters"][name]["truth"] / nominal - 1) > 0.05, name
    # the fit explains the log down to the sensor noise it was given
    fit = result["fit"]
    assert fit["rms_after"]["angular_velocity"] < 0.1 * fit["rms_before"]["angular_velocity"]
    assert 0.7 < fit["reduced_chi2"] < 1.5
    report = tmp_path / "calib_report"
    assert (report / "report.json").is_file() and list(report.glob("*.png"))


GO2_KINDS = ("strength", "damping", "frictionloss", "armature", "offset", "torque_limit")


@pytest.mark.slow
def test_validation_go2_air(tmp_path, go2):
    """go2-air hung, every joint parameter hidden (driver strengths, i.e. effective PD gains;
    damping, friction, armature, encoder offsets, torque limits) and a 10 ms latency, noise on
    every sensor and IMU biases: each recovered within 5% (offsets within 2.5 mrad), the
    residuals at the noise. The fit starts from the description's values."""
    from simreal.calibration.validate import validate

    result = validate(go2, "go2-air", scale=0.3, seed=0, workdir=tmp_path)
    params = result["parameters"]
    joints = [j.name for j in go2.spec.joints]
    assert set(params) == ({f"{j}.{k}" for j in joints for k in GO2_KINDS}
                           | {"latency"} | {f"imu.{b}.{a}" for b in ("gyro_bias", "accel_bias")
                                            for a in "xyz"})
    _check_recovered(result)
    # the description's values would not pass: for every kind most joints' hidden values are
    # further from them than the tolerance
    calib = load_calibration(result["calibration"])
    for kind in GO2_KINDS:
        names = [f"{j}.{kind}" for j in joints]
        off = [abs(params[n]["truth"] - calib.parameters[n].nominal) > params[n]["tolerance"]
               for n in names]
        assert sum(off) >= 6, kind
    fit = result["fit"]
    assert [s["replay"] for s in fit["stages"]] == ["JointSegmentReplay", "JointReplay"]
    for signal, noise in (("joint_pos", 0.002), ("joint_vel", 0.05), ("joint_effort", 0.1)):
        assert fit["rms_after"][signal] < 1.1 * noise < 0.2 * fit["rms_before"][signal]


def test_train_uses_calibration(tmp_path, crazyflie):
    """`simreal train --calibration`: the run trains on the calibrated robot (its MJCF holds the
    fitted mass; the policy's contract records its hash) with ranges from the fit."""
    import mujoco

    from simreal import api

    est = {"mass": Estimate(value=0.0312, std=0.0004, nominal=0.027)}
    calib = Calibration(robot="crazyflie", base_hash=crazyflie.description_hash,
                        parameters=est, randomization=randomization_ranges(est, 3.0))
    path = save_calibration(calib, tmp_path / "calib.yaml")
    run = tmp_path / "run"
    api.train("quadrotor-hover", algo="ppo", envs=4, steps=96, seed=0, out=run,
              eval_episodes=2, progress=False, calibration=path)
    config = yaml.safe_load((run / "config.yaml").read_text())
    w = 3 * 0.0004 / 0.0312  # above the 2% floor
    assert config["task_config"]["randomization"]["mass"] == pytest.approx([1 - w, 1 + w],
                                                                           abs=1e-6)
    robot_dir = Path(config["robot"])
    assert robot_dir == (run / "robot").resolve()
    m = mujoco.MjModel.from_xml_path(str(robot_dir / crazyflie.spec.mjcf))
    base = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, crazyflie.spec.base_body)
    assert m.body_mass[base] == pytest.approx(0.0312)
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(run / "policy.onnx")).metadata_props}
    from simreal.robots import load_robot_dir

    assert load_robot_dir(robot_dir).description_hash in json.dumps(meta)
    assert crazyflie.description_hash not in json.dumps(meta)
    shutil.rmtree(run)
