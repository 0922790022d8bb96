"""Validation: a simulated robot with hidden, perturbed parameters and noisy, biased sensors;
its log calibrated; the fit compared with what was hidden.

`hidden_calibration(robot, seed)` draws the hidden parameters (a Calibration: the HIL robot runs
on the robot folder it gives, calibration/apply.py); `sensor_faults(robot, seed)` the HIL fault
plan of sensor noise and IMU biases; `validate(...)` records an experiment against that robot
(in simulated time, or over DDS with the HIL robot process), calibrates the log and returns,
per parameter, the hidden value, the estimate, its standard deviation and the relative error.
Used by tests/test_calibration*.py and `python -m calibration.validate` (which prints one JSON
object per experiment).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from simreal.calibration.params import AXES
from simreal.calibration.schema import Calibration, Estimate
from simreal.hil.config import FaultPlan
from simreal.robots import Robot

# ranges the hidden values are drawn from (uniform)
LEGGED_HIDDEN = {"strength": (0.85, 1.15), "damping": (0.05, 0.3), "frictionloss": (0.05, 0.3),
                 "armature": (0.007, 0.015), "offset": (0.02, 0.05),  # magnitude, random sign
                 "torque_limit": (0.8, 0.95)}  # of the description's limit
QUAD_HIDDEN = {"mass": (1.05, 1.15), "thrust_coefficient": (0.88, 0.95),
               "torque_coefficient": (1.1, 1.3), "motor_time_constant": (0.6, 0.8)}  # relative
LATENCY = {"legged": 0.010, "quadrotor": 0.010}  # s; 5 and 2 HIL physics steps
NOISE = {"legged": {"joint_pos": 0.002, "joint_vel": 0.05, "joint_effort": 0.1,
                    "angular_velocity": 0.003, "linear_acceleration": 0.02},
         "quadrotor": {"position": 0.002, "linear_velocity": 0.01, "angular_velocity": 0.003,
                       "orientation": 0.002}}
BIAS = {"legged": {"angular_velocity": [0.012, -0.02, 0.006],
                   "linear_acceleration": [0.12, -0.08, 0.1]},
        "quadrotor": {"angular_velocity": [0.015, -0.01, 0.02]}}


def hidden_calibration(robot: Robot, seed: int = 0, kinds: tuple[str, ...] | None = None
                       ) -> Calibration:
    """Perturbed parameters for the simulated robot (the truth a fit should find); `kinds`
    limits them to those parameter kinds (the others keep the description's values)."""
    from simreal.calibration.params import ParamSet
    from simreal.sim.backend import compile_model

    rng = np.random.default_rng(seed)
    kind = robot.spec.kind
    pset = ParamSet(robot, compile_model(robot.mjcf_path), kinds)
    params: dict[str, Estimate] = {}
    for p in pset.params:
        if p.kind == "latency":
            value = LATENCY[kind]
        elif kind == "legged":
            lo, hi = LEGGED_HIDDEN[p.kind]
            value = float(rng.uniform(lo, hi))
            if p.kind == "offset":
                value *= float(rng.choice([-1.0, 1.0]))
            elif p.kind == "torque_limit":
                value *= p.nominal
        else:
            lo, hi = QUAD_HIDDEN[p.kind]
            value = float(rng.uniform(lo, hi)) * p.nominal
        params[p.name] = Estimate(value=value, nominal=p.nominal, unit=p.unit)
    return Calibration(robot=robot.name, base_hash=robot.description_hash,
                       experiments=["hidden"], parameters=params)


def sensor_faults(robot: Robot, seed: int = 0) -> FaultPlan:
    kind = robot.spec.kind
    faults: list[dict[str, Any]] = [
        {"kind": "sensor_noise", "signal": s, "std": std} for s, std in NOISE[kind].items()]
    faults += [{"kind": "sensor_bias", "signal": s, "value": v} for s, v in BIAS[kind].items()]
    return FaultPlan.model_validate({"seed": seed, "faults": faults})


def hidden_biases(robot: Robot) -> dict[str, float]:
    names = {"angular_velocity": "gyro_bias", "linear_acceleration": "accel_bias"}
    return {f"imu.{names[s]}.{a}": v[i] for s, v in BIAS[robot.spec.kind].items()
            for i, a in enumerate(AXES)}


RELATIVE_TOLERANCE = 0.05
# Encoder offsets are zero in the description and drawn at 0.02-0.05 rad (either sign): a
# relative error of a value that may sit near zero says little, so an offset is held to 5% of
# the largest hidden offset, 2.5 mrad. Every other parameter (nonzero truth) to 5% of its
# value; a zero truth (no latency) to 5% of a control period.
ABSOLUTE_TOLERANCE = {"offset": RELATIVE_TOLERANCE * LEGGED_HIDDEN["offset"][1]}  # rad


def tolerance(name: str, truth: float, period_s: float) -> float:
    """The largest error of `name`'s estimate the validation accepts (its unit)."""
    kind = name.rsplit(".", 1)[-1]
    if kind in ABSOLUTE_TOLERANCE:
        return ABSOLUTE_TOLERANCE[kind]
    return RELATIVE_TOLERANCE * abs(truth) if truth else RELATIVE_TOLERANCE * period_s


def compare(hidden: dict[str, float], calib: Calibration, period_s: float
            ) -> dict[str, dict[str, Any]]:
    """Per hidden parameter: truth, estimate, std, error, relative error (None where the truth
    is zero), the tolerance and whether the error is within it."""
    out = {}
    for name, truth in hidden.items():
        e = calib.parameters.get(name)
        if e is None:
            continue
        err = e.value - truth
        tol = tolerance(name, truth, period_s)
        out[name] = {"truth": truth, "estimate": e.value, "std": e.std or 0.0,
                     "error": err, "relative_error": abs(err) / abs(truth) if truth else None,
                     "tolerance": tol, "ok": bool(abs(err) <= tol)}
    return out


def validate(robot: Robot, experiment: str, scale: float = 1.0, seed: int = 0,
             workdir: str | Path | None = None, dds: bool = False, domain_id: int = 0,
             max_nfev: int = 30, progress: bool = False,
             kinds: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Record `experiment` against the perturbed, noisy simulated robot, calibrate, compare.
    `kinds`: perturb and fit only those parameter kinds (default: all of the experiment's)."""
    from simreal.calibration.apply import calibrated_robot_dir, hidden_sim_config, split_latency
    from simreal.calibration.experiments import make_experiment
    from simreal.calibration.record import record, record_in_process, write_log
    from simreal.calibration.run import calibrate
    from simreal.calibration.schema import save_calibration

    work = Path(workdir or tempfile.mkdtemp(prefix="simreal-validate-"))
    work.mkdir(parents=True, exist_ok=True)
    hidden = hidden_calibration(robot, seed, kinds)
    faults = sensor_faults(robot, seed)
    log_path = work / f"{experiment}.mcap"
    if dds:
        save_calibration(hidden, work / "hidden.yaml")
        (work / "faults.yaml").write_text(json.dumps(faults.model_dump()))
        record(experiment, robot, log_path, domain_id=domain_id, sim=True,
               hidden=work / "hidden.yaml", faults=work / "faults.yaml", scale=scale,
               progress=progress)
    else:
        model_part, delay = split_latency(hidden)
        sim_robot = calibrated_robot_dir(robot, model_part, work / "hidden_robot")
        exp = make_experiment(experiment, sim_robot, scale)
        write_log(log_path, record_in_process(exp, sim_robot, faults=faults,
                                              sim=hidden_sim_config(robot, hidden),
                                              command_delay_s=delay))
    calib = calibrate([log_path], robot, work / "calib.yaml", max_nfev=max_nfev,
                      progress=progress, kinds=kinds)
    truth = {n: e.value for n, e in hidden.parameters.items()} | hidden_biases(robot)
    result = compare(truth, calib, 1.0 / robot.spec.control.rate_hz)
    rel = [v["relative_error"] for n, v in result.items() if v["relative_error"] is not None
           and n.rsplit(".", 1)[-1] not in ABSOLUTE_TOLERANCE]
    worst: dict[str, dict[str, Any]] = {}  # per kind: the parameter furthest off, in tolerances
    for n, v in result.items():
        kind = n.rsplit(".", 1)[-1] if not n.startswith("imu.") else n.rsplit(".", 1)[0]
        ratio = abs(v["error"]) / v["tolerance"]
        if kind not in worst or ratio > worst[kind]["of_tolerance"]:
            worst[kind] = {"name": n, "error": v["error"], "relative_error": v["relative_error"],
                           "of_tolerance": ratio}
    return {"robot": robot.name, "experiment": experiment, "scale": scale, "seed": seed,
            "parameters": result, "max_relative_error": max(rel) if rel else None,
            "all_within_tolerance": all(v["ok"] for v in result.values()), "worst": worst,
            "fit": calib.fit, "log": str(log_path), "calibration": str(work / "calib.yaml"),
            "units": {n: calib.parameters[n].unit for n in result}}


def main(argv: list[str] | None = None) -> int:
    from simreal.robots.registry import get_robot

    p = argparse.ArgumentParser(prog="python -m calibration.validate", description=__doc__)
    p.add_argument("--robot", default="go2")
    p.add_argument("--experiment", default=None)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="work directory (default: a temporary one)")
    p.add_argument("--dds", action="store_true", help="record over DDS (HIL robot process)")
    p.add_argument("--kinds", help="comma-separated parameter kinds to perturb and fit "
                                   "(default: all; calibration/params.py)")
    p.add_argument("--max-nfev", type=int, default=30)
    args = p.parse_args(argv)
    robot = get_robot(args.robot)
    exp = args.experiment or ("go2-air" if robot.spec.kind == "legged" else "quad-hover")
    kinds = tuple(args.kinds.split(",")) if args.kinds else None
    result = validate(robot, exp, args.scale, args.seed, args.out, args.dds,
                      max_nfev=args.max_nfev, progress=True, kinds=kinds)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

