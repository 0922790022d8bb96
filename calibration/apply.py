"""A calibration applied: the one place that maps fitted parameters onto the robot description,
the model and a task's randomization.

- `calibrated_robot_dir(robot, calib, out)`: a copy of the robot's folder whose robot.yaml and
  MJCF carry the fitted values (calibration/params.py says where each parameter lives: joint
  damping, frictionloss, armature, ref and range; actuator forcerange and delay; the base
  body's mass; robot.yaml's torque limits and rotor model). Its `description_hash` is what a
  policy trained on it records in its contract, so such a policy is deployed with
  `--robot <that folder>`, and a policy trained on the uncalibrated robot is refused there.
- `randomization_ranges(...)`: per parameter, [value - w, value + w] with w = sigmas * std, at
  least MIN_HALF_WIDTH (a fit's statistical uncertainty leaves out what changes between runs:
  temperature, wear, battery).
- `task_overrides(calib, task_cls)`: those ranges in the task config's own terms (fields of
  `randomization`), for the fields the task has: go2 tasks' motor_strength, joint_offset and
  latency; quadrotor-hover's mass, thrust_coefficient and motor_time_constant. The model holds
  the fitted values, so relative ranges are centred on 1 and offsets on 0; latency is absolute
  (the task writes the actuator delay itself). The drivers' strength is not a model field (the
  task randomizes it): its range spans every joint's fitted value and width.
"""

from __future__ import annotations

import math
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import yaml

from simreal.calibration.schema import UNITS, Calibration, CalibrationError, Estimate
from simreal.robots import Robot, load_robot_dir

# half-width floors of the randomization: relative for scale-like parameters, absolute else
MIN_HALF_WIDTH = {"strength": 0.02, "damping": 0.1, "frictionloss": 0.1, "armature": 0.05,
                  "torque_limit": 0.02, "mass": 0.02, "thrust_coefficient": 0.02,
                  "torque_coefficient": 0.05, "motor_time_constant": 0.05}
MIN_ABS_HALF_WIDTH = {"offset": 0.005, "latency": 0.002, "gyro_bias": 0.005,
                      "accel_bias": 0.05}
HIL_MIN_DT = 0.002  # the HIL robot's physics step for joint robots (hil/robot.py)


def param_kind(name: str) -> str:
    """`FR_hip_joint.damping` -> damping; `imu.gyro_bias.x` -> gyro_bias; `mass` -> mass."""
    if name.startswith("imu."):
        return name.split(".")[1]
    kind = name.rsplit(".", 1)[-1]
    if kind not in UNITS:
        raise CalibrationError(f"parameter {name!r}: unknown kind {kind!r} (known: "
                               f"{', '.join(sorted(UNITS))})")
    return kind


def randomization_ranges(parameters: dict[str, Estimate], sigmas: float
                         ) -> dict[str, tuple[float, float]]:
    out = {}
    for name, e in parameters.items():
        kind = param_kind(name)
        w = sigmas * (e.std or 0.0)
        if kind in MIN_HALF_WIDTH:
            w = max(w, MIN_HALF_WIDTH[kind] * abs(e.value))
        else:
            w = max(w, MIN_ABS_HALF_WIDTH.get(kind, 0.0))
        lo = e.value - w
        if kind not in ("offset", "gyro_bias", "accel_bias"):
            lo = max(lo, 0.0)
        out[name] = (lo, e.value + w)
    return out


# --- the calibrated robot folder ---------------------------------------------------------------
def _check(robot: Robot, calib: Calibration, where: str) -> None:
    if calib.robot != robot.name:
        raise CalibrationError(f"{where}: calibration is for robot {calib.robot!r}, not "
                               f"{robot.name!r}")
    joints = {j.name for j in robot.spec.joints}
    for name in calib.parameters:
        kind = param_kind(name)
        if kind in ("strength", "damping", "frictionloss", "armature", "offset",
                    "torque_limit") and name.rsplit(".", 1)[0] not in joints:
            raise CalibrationError(f"{where}: parameters.{name}: {robot.name} has no joint "
                                   f"{name.rsplit('.', 1)[0]!r}")


def _fmt(x: float) -> str:
    return f"{x:.9g}"


def calibrated_robot_dir(robot: Robot, calib: Calibration, out: str | Path,
                         where: str = "calibration") -> Robot:
    """Write `out/` (a copy of the robot's folder with the calibration applied); returns it
    loaded. `out` must not exist or be empty."""
    _check(robot, calib, where)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out}: already holds files")
    shutil.copytree(robot.directory, out, dirs_exist_ok=True)
    spec = robot.spec
    v = {name: e.value for name, e in calib.parameters.items()}
    tree = ET.parse(robot.mjcf_path, parser=ET.XMLParser(
        target=ET.TreeBuilder(insert_comments=True)))
    root = tree.getroot()
    by_name = {(el.tag, el.get("name")): el for el in root.iter() if el.get("name")}
    actuators = {a.get("name"): a for sec in root.iter("actuator") for a in sec}
    raw = yaml.safe_load(robot.yaml_path.read_text())
    dt = float(spec.control.physics_dt)
    if spec.kind == "legged":
        for j, joint in enumerate(spec.joints):
            el = by_name.get(("joint", joint.name))
            act = actuators.get(joint.actuator)
            if el is None or act is None:
                raise CalibrationError(f"{robot.mjcf_path}: joint {joint.name!r} or actuator "
                                       f"{joint.actuator!r} not found")
            for kind in ("damping", "frictionloss", "armature"):
                if f"{joint.name}.{kind}" in v:
                    # the MJCF and robot.yaml's per-joint nominal agree (the task checks it)
                    el.set(kind, _fmt(v[f"{joint.name}.{kind}"]))
                    raw["joints"][j][kind] = float(_fmt(v[f"{joint.name}.{kind}"]))
            if f"{joint.name}.offset" in v:
                e = calib.parameters[f"{joint.name}.offset"]
                shift = e.value - float(el.get("ref", "0"))
                el.set("ref", _fmt(e.value))
                if el.get("range"):
                    lo, hi = (float(x) for x in el.get("range").split())
                    el.set("range", f"{_fmt(lo + shift)} {_fmt(hi + shift)}")
            if f"{joint.name}.torque_limit" in v:
                lim = v[f"{joint.name}.torque_limit"]
                act.set("forcerange", f"{_fmt(-lim)} {_fmt(lim)}")
                raw["joints"][j]["torque_limit"] = float(_fmt(lim))
        names = [j.actuator for j in spec.joints]
    else:
        rm = dict(raw["rotor_model"])
        kf0 = spec.rotor_model.thrust_coefficient
        kf = v.get("thrust_coefficient", kf0)
        km = v.get("torque_coefficient", spec.rotor_model.torque_coefficient)
        rm["thrust_coefficient"] = float(_fmt(kf))
        rm["torque_coefficient"] = float(_fmt(km))
        rm["max_thrust"] = float(_fmt(spec.rotor_model.max_thrust * kf / kf0))  # top rpm kept
        if "motor_time_constant" in v:
            rm["time_constant"] = float(_fmt(v["motor_time_constant"]))
        raw["rotor_model"] = rm
        for r in spec.rotors:
            act = actuators[r.actuator]
            gear = [float(x) for x in act.get("gear", "1 0 0 0 0 0").split()] + [0.0] * 6
            gear[5] = math.copysign(km / kf, gear[5] or 1.0)
            act.set("gear", " ".join(_fmt(g) for g in gear[:6]))
        if "mass" in v:
            base = by_name.get(("body", spec.base_body))
            inertial = base.find("inertial") if base is not None else None
            if inertial is None:
                raise CalibrationError(f"{robot.mjcf_path}: base body needs <inertial>")
            inertial.set("mass", _fmt(v["mass"]))
            raw["mass"] = float(_fmt(v["mass"]))
        names = [r.actuator for r in spec.rotors]
    if "latency" in v:
        lat = v["latency"]
        for name in names:
            act = actuators[name]
            act.set("delay", _fmt(lat))
            need = math.ceil(lat / min(dt, HIL_MIN_DT) - 1e-9) + 2
            if lat > 0 and int(act.get("nsample", _class_nsample(root, act))) < need:
                act.set("nsample", str(need))
                act.set("interp", act.get("interp", "zoh"))
    text = robot.mjcf_path.read_text()
    prolog = text[:text.find("<" + root.tag)]  # the header comment ET does not keep
    (out / spec.mjcf).write_text(prolog + ET.tostring(root, encoding="unicode") + "\n")
    header = (f"# {robot.name} as calibrated ({', '.join(calib.experiments) or 'logs'}): "
              f"written by calibration/apply.py from\n# {robot.yaml_path} (see its comments "
              "for sources) with the fitted values of the calibration file.\n")
    (out / "robot.yaml").write_text(header + yaml.safe_dump(raw, sort_keys=False, width=100))
    return load_robot_dir(out)


def split_latency(calib: Calibration) -> tuple[Calibration, float]:
    """A hidden calibration for a simulated robot, less its latency, and that latency (s).

    A simulated robot must delay whole commands (targets and gains, as a link or a driver
    does), which an MJCF actuator delay cannot: it delays the target only. The recorder (or a
    HIL link delay) applies the latency instead."""
    if "latency" not in calib.parameters:
        return calib, 0.0
    params = {n: e for n, e in calib.parameters.items() if n != "latency"}
    rnd = {n: r for n, r in calib.randomization.items() if n != "latency"}
    rest = calib.model_copy(update={"parameters": params, "randomization": rnd})
    return rest, float(calib.parameters["latency"].value)


def hidden_sim_config(robot: Robot, calib: Calibration) -> dict[str, Any]:
    """Settings of a simulated robot (hil/robot.RobotSimConfig) for what a calibration
    holds that its description cannot: the drivers' strength per joint."""
    names = [f"{j.name}.strength" for j in robot.spec.joints]
    if not any(n in calib.parameters for n in names):
        return {}
    return {"joint_strength": [calib.parameters[n].value if n in calib.parameters else 1.0
                               for n in names]}


def _class_nsample(root: ET.Element, act: ET.Element) -> str:
    """An actuator's nsample from its default class (0 when none gives one)."""
    cls = act.get("class")
    for d in root.iter("default"):
        if d.get("class") == cls:
            for child in d:
                if child.tag == act.tag and child.get("nsample"):
                    return child.get("nsample")
    return "0"


# --- the task's randomization --------------------------------------------------------------------
def _relative(calib: Calibration, kind: str) -> float | None:
    """The largest relative half-width of a kind's ranges, or None if none was fitted."""
    widths = [(hi - lo) / 2 / abs(calib.parameters[n].value)
              for n, (lo, hi) in calib.randomization.items()
              if param_kind(n) == kind and calib.parameters[n].value]
    return max(widths) if widths else None


def _absolute(calib: Calibration, kind: str) -> float | None:
    widths = [(hi - lo) / 2 for n, (lo, hi) in calib.randomization.items()
              if param_kind(n) == kind]
    return max(widths) if widths else None


def task_overrides(calib: Calibration, task_cls: type) -> dict[str, Any]:
    """The task config fields (a mapping to merge into its config) the calibration sets."""
    fields = getattr(task_cls.config_class, "model_fields", {})
    rnd_cls = fields["randomization"].annotation if "randomization" in fields else None
    known = set(getattr(rnd_cls, "model_fields", {}))
    rnd: dict[str, Any] = {}

    def rel(field: str, kind: str) -> None:
        w = _relative(calib, kind)
        if field in known and w is not None:
            rnd[field] = [round(1 - w, 6), round(1 + w, 6)]

    strength = [calib.randomization[n] for n in calib.randomization
                if param_kind(n) == "strength"]
    if "motor_strength" in known and strength:
        rnd["motor_strength"] = [round(min(lo for lo, _ in strength), 6),
                                 round(max(hi for _, hi in strength), 6)]
    rel("mass", "mass")
    rel("thrust_coefficient", "thrust_coefficient")
    rel("motor_time_constant", "motor_time_constant")
    for kind in ("damping", "frictionloss", "armature"):  # absolute ranges over the joints
        spans = [calib.randomization[n] for n in calib.randomization if param_kind(n) == kind]
        if f"joint_{kind}" in known and spans:
            rnd[f"joint_{kind}"] = [round(max(0.0, min(lo for lo, _ in spans)), 6),
                                    round(max(hi for _, hi in spans), 6)]
    w = _absolute(calib, "offset")
    if "joint_offset" in known and w is not None:
        rnd["joint_offset"] = round(w, 6)
    if "latency" in known and "latency" in calib.randomization:
        lo, hi = calib.randomization["latency"]
        rnd["latency"] = [round(lo, 6), round(hi, 6)]
    return {"randomization": rnd} if rnd else {}
