"""`simreal calibrate LOG.mcap [LOG ...] --robot NAME --out calib.yaml`: logs to a calibration.

Each log's experiment says what it gives: `go2-air` the joint parameters and the latency
(JointSegmentReplay, then JointReplay from its estimate: fit.fit_staged), `quad-hover` mass,
thrust and torque coefficients, motor time constant and latency (RotorReplay), and every log
with `still` phases the IMU biases. Logs of the same kind are fitted together (their residuals
stacked). Writes the calibration YAML and, beside it, `<out stem>_report/`: report.json and PNG
plots (calibration/report.py).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from simreal.calibration.apply import randomization_ranges
from simreal.calibration.fit import estimates, fit_staged, imu_biases
from simreal.calibration.logs import ExperimentLog, read_log
from simreal.calibration.params import JOINT_KINDS, QUAD_KINDS
from simreal.calibration.replay import JointReplay, JointSegmentReplay, RotorReplay, _Replay
from simreal.calibration.schema import Calibration, CalibrationError, save_calibration
from simreal.robots import Robot

DYNAMIC = {"go2-air": (*JOINT_KINDS, "latency"), "quad-hover": (*QUAD_KINDS, "latency")}


def make_replays(logs: list[ExperimentLog], robot: Robot, gyro_bias: np.ndarray | None,
                 physics_dt: float | None = None, only: tuple[str, ...] | None = None,
                 segments: bool = False) -> list[_Replay]:
    """The replays of the logs' dynamic fits; `segments`: legged robots' multiple-shooting
    replays (the first stage of their fit)."""
    out: list[_Replay] = []
    for log in logs:
        kinds = DYNAMIC.get(log.experiment)
        if kinds is None:
            continue
        if only is not None:
            unknown = sorted(set(only) - set(kinds) - {"gyro_bias", "accel_bias"})
            if unknown:
                raise CalibrationError(f"parameter kinds {unknown} are not fitted from "
                                       f"{log.experiment} (it gives: {', '.join(kinds)})")
            kinds = tuple(k for k in kinds if k in only)
            if not kinds:
                continue
        if robot.spec.kind == "legged":
            cls = JointSegmentReplay if segments else JointReplay
            out.append(cls(log, robot, kinds, physics_dt))
        else:
            out.append(RotorReplay(log, robot, kinds, physics_dt, gyro_bias=gyro_bias))
    return out


def calibrate(logs: list[str | Path], robot: Robot, out: str | Path, sigmas: float = 3.0,
              max_nfev: int = 30, physics_dt: float | None = None, report: bool = True,
              progress: bool = True, kinds: tuple[str, ...] | None = None) -> Calibration:
    """Fit `logs`; write `out` (and its report). `kinds`: only those dynamic parameter kinds
    (the others keep the description's values); the IMU biases are always estimated."""
    out = Path(out)
    if not logs:
        raise CalibrationError("no logs given")
    t0 = time.monotonic()
    read = [read_log(p, robot) for p in logs]
    params, imu_info = imu_biases(read)
    gyro = None
    if "imu.gyro_bias.x" in params:
        gyro = np.array([params[f"imu.gyro_bias.{a}"].value for a in "xyz"])
    replays = make_replays(read, robot, gyro, physics_dt, kinds)
    if not replays and not params:
        raise CalibrationError(f"logs {[str(p) for p in logs]}: experiments "
                               f"{sorted({lg.experiment for lg in read})} give nothing to fit "
                               f"(dynamic fits: {', '.join(DYNAMIC)}; IMU: a 'still' phase)")
    fit: dict[str, Any] = {"logs": [str(p) for p in logs], "imu": imu_info}
    result = None
    if replays:
        stages = [replays]
        if robot.spec.kind == "legged":  # multiple shooting first, then the whole-log replay
            stages.insert(0, make_replays(read, robot, gyro, physics_dt, kinds, segments=True))
        result = fit_staged(stages, max_nfev=max_nfev, progress=progress)
        params.update(estimates(result))
        fit.update({"rms_before": result.rms_before, "rms_after": result.rms_after,
                    "noise_sigma": result.sigma, "function_evaluations": result.nfev,
                    "jacobian_evaluations": result.njev, "optimizer": result.message,
                    "fit_wall_s": result.wall_s, **result.extra,
                    "max_correlation": {n: float(c) for n, c in zip(result.names,
                                                                    result.max_corr,
                                                                    strict=True)}})
    fit["wall_s"] = round(time.monotonic() - t0, 1)
    calib = Calibration(robot=robot.name, base_hash=robot.description_hash,
                        experiments=sorted({lg.experiment for lg in read}), sigmas=sigmas,
                        parameters=params, randomization=randomization_ranges(params, sigmas),
                        fit=fit)
    save_calibration(calib, out)
    if report:
        try:
            from simreal.calibration.report import write_report
        except ImportError:
            write_report = None
        if write_report:
            write_report(calib, replays, result, out.with_name(out.stem + "_report"))
    return calib
