"""The calibration report: report.json and PNG plots of logged against replayed trajectories.

report.json: the robot, the logs, fit error before (the description's values) and after (the
fitted ones) per signal, and per parameter its nominal value, estimate, standard deviation,
relative change, largest correlation with another parameter and randomization range.

Plots (matplotlib, Agg): for a joint replay, `joints_<leg>.png` per leg, its joints' angle and
torque estimate, logged against the replay with the nominal and with the fitted parameters,
the experiment's phases shaded; for a rotor replay, `flight.png`, world velocity and body rates
logged against each replayed segment.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from simreal.calibration.fit import FitResult
from simreal.calibration.replay import JointReplay, RotorReplay, _Replay
from simreal.calibration.schema import Calibration, write_text_atomic


def report_dict(calib: Calibration, result: FitResult | None) -> dict[str, Any]:
    corr = dict(zip(result.names, result.max_corr.tolist(), strict=True)) if result else {}
    params = {}
    for name, e in calib.parameters.items():
        change = (e.value - e.nominal) / abs(e.nominal) if e.nominal else None
        params[name] = {"nominal": e.nominal, "estimate": e.value, "std": e.std,
                        "unit": e.unit, "relative_change": change,
                        "max_correlation": corr.get(name),
                        "randomization": calib.randomization.get(name)}
    return {"robot": calib.robot, "base_hash": calib.base_hash,
            "experiments": calib.experiments, "sigmas": calib.sigmas,
            "fit_error_before": calib.fit.get("rms_before"),
            "fit_error_after": calib.fit.get("rms_after"), "fit": calib.fit,
            "parameters": params}


def write_report(calib: Calibration, replays: list[_Replay], result: FitResult | None,
                 out: str | Path) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = report_dict(calib, result)
    files = []
    if result is not None:
        for i, rep in enumerate(replays):
            tag = f"_{i}" if len(replays) > 1 else ""
            if isinstance(rep, JointReplay):
                files += _plot_joints(rep, result, out, tag)
            elif isinstance(rep, RotorReplay):
                files += _plot_flight(rep, result, out, tag)
    report["plots"] = [p.name for p in files]
    write_text_atomic(json.dumps(report, indent=1, default=float) + "\n", out / "report.json")
    return out


def _figure(rows: int, cols: int, w: float = 11.0, h: float = 2.2) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(rows, cols, figsize=(w, h * rows), squeeze=False, sharex=True)


def _shade(ax: Any, phases: list, names: tuple[str, ...]) -> None:
    for name, a, b in phases:
        if name in names:
            ax.axvspan(a, b, color="0.92", zorder=0)


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(path)
    return path


def _plot_joints(rep: JointReplay, result: FitResult, out: Path, tag: str) -> list[Path]:
    sims = rep.simulate(np.stack([result.nominal, result.x]))
    n_t = len(rep.sample_t)
    meas = rep.measured.reshape(n_t, -1)
    nom, fit = sims[0].reshape(n_t, -1), sims[1].reshape(n_t, -1)
    joints = rep.robot.spec.joints
    nj = len(joints)
    sig = rep.rows.names
    show = [s for s in ("joint_pos", "joint_effort") if s in sig]
    legs: dict[str, list[int]] = {}
    for j, joint in enumerate(joints):
        legs.setdefault(joint.name.split("_")[0] if "_" in joint.name else "joints",
                        []).append(j)
    files = []
    phases = rep.log.meta.get("phases", [])
    for leg, idx in legs.items():
        fig, axes = _figure(len(idx), len(show))
        for r, j in enumerate(idx):
            for c, s in enumerate(show):
                ax = axes[r][c]
                col = sig.index(s) * nj + j
                _shade(ax, phases, ("stop", "steps"))
                ax.plot(rep.sample_t, meas[:, col], color="k", lw=0.8, label="logged")
                ax.plot(rep.sample_t, nom[:, col], color="tab:red", lw=0.7, alpha=0.8,
                        label="replay, nominal")
                ax.plot(rep.sample_t, fit[:, col], color="tab:blue", lw=0.7, ls="--",
                        label="replay, fitted")
                unit = "rad" if s == "joint_pos" else "N m"
                ax.set_ylabel(f"{joints[j].name}\n{s.split('_')[1]} ({unit})", fontsize=7)
        axes[0][0].legend(fontsize=7, loc="upper right")
        for c in range(len(show)):
            axes[-1][c].set_xlabel("time from first command (s); grey: stop, steps")
        files.append(_save(fig, out / f"joints_{leg}{tag}.png"))
    return files


def _plot_flight(rep: RotorReplay, result: FitResult, out: Path, tag: str) -> list[Path]:
    sims = rep.simulate(np.stack([result.nominal, result.x]))
    fig, axes = _figure(3, 2)
    labels = ["v_x", "v_y", "v_z", "w_x", "w_y", "w_z"]
    t = rep.t
    count = 0
    for seg in rep.samples:
        idx = np.array(seg)
        n = len(idx)
        for c in range(6):
            ax = axes[c % 3][c // 3]
            sl = slice(count * 6 + c, (count + n) * 6, 6)
            ax.plot(t[idx], sims[0][sl], color="tab:red", lw=0.7, alpha=0.8)
            ax.plot(t[idx], sims[1][sl], color="tab:blue", lw=0.7, ls="--")
        count += n
    for c in range(6):
        ax = axes[c % 3][c // 3]
        key = rep.SIGNALS[c // 3]
        ax.plot(t, rep.state[key][:, c % 3], color="k", lw=0.6, zorder=0)
        ax.set_ylabel(labels[c] + (" (m/s)" if c < 3 else " (rad/s)"), fontsize=8)
        first = t[rep.starts[0]]
        last = t[rep.samples[-1][-1]]
        ax.set_xlim(first - 0.2, last + 0.2)
    axes[0][0].plot([], [], color="k", label="logged")
    axes[0][0].plot([], [], color="tab:red", label="segments, nominal")
    axes[0][0].plot([], [], color="tab:blue", ls="--", label="segments, fitted")
    axes[0][0].legend(fontsize=7)
    for c in range(2):
        axes[-1][c].set_xlabel("time from first command (s)")
    return [_save(fig, out / f"flight{tag}.png")]
