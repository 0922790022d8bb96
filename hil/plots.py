"""The report's figures (PNG, matplotlib without a display), all against scenario time.

- tracking.png: the commanded velocity against the base's true velocity (body frame), or the
  position setpoint against the true position;
- joints.png: per actuator, the driver's target against the measured joint angle (or rotor
  speed command against rotor speed);
- latency.png: histograms of state link, command link and state-to-command latency;
- safety.png: the node's mode per node process, the robot driver's failsafe, fault windows,
  process kills and restarts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from simreal.hil.config import command_at, reference_at  # noqa: E402

MODE_LEVEL = {"estop": -1, "damp": 0, "soft_start": 1, "run": 2}


def _save(fig: Any, path: Path) -> str:
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, path)
    return path.name


def _events(ax: Any, data: Any) -> None:
    for e in data.events:
        if e.get("event") == "process_kill":
            ax.axvline(e["t"], color="red", lw=0.8, ls="--")
        elif e.get("event") == "process_start" and e["t"] > 0:
            ax.axvline(e["t"], color="green", lw=0.8, ls=":")


def _faults(ax: Any, setup: Any) -> None:
    for f in setup.faults.faults:
        start = getattr(f, "from_s", None)
        if start is None:
            continue
        end = f.to_s if f.to_s is not None else setup.scenario.duration_s
        ax.axvspan(start, end, color="orange", alpha=0.12)


def tracking(setup: Any, data: Any, truth: dict[str, np.ndarray], path: Path) -> str:
    t = truth["t"]
    if setup.robot.spec.kind == "quadrotor":
        labels, meas = ["x (m)", "y (m)", "z (m)"], truth["position"]
        ref, _ = reference_at(setup.scenario, t)  # a moving reference where one is in force
        cmd = np.where(np.isfinite(ref), ref, command_at(setup.scenario, "position", t))
        title = "position against setpoint"
    elif setup.robot.spec.kind == "arm":
        labels, meas = ["tool x (m)", "tool y (m)", "tool z (m)"], truth["position"]
        cmd = command_at(setup.scenario, "pose", t)[:, :3]
        title = "tool position against the commanded pose"
    else:
        labels = ["forward (m/s)", "lateral (m/s)", "yaw rate (rad/s)"]
        meas = np.column_stack([truth["body_velocity"][:, :2], truth["angular_velocity"][:, 2]])
        cmd = command_at(setup.scenario, "velocity", t)
        title = "commanded against measured base velocity (body frame)"
    fig, axes = plt.subplots(3, 1, figsize=(9, 7), sharex=True)
    for i, ax in enumerate(axes):
        ax.plot(t, cmd[:, i], color="black", lw=1.2, label="command")
        ax.plot(t, meas[:, i], color="tab:blue", lw=1.0, label="measured (true)")
        ax.set_ylabel(labels[i])
        _faults(ax, setup)
        _events(ax, data)
    axes[0].legend(loc="upper right", fontsize=8)
    axes[0].set_title(f"{setup.robot.name}: {title}")
    axes[-1].set_xlabel("scenario time (s)")
    fig.tight_layout()
    return _save(fig, path)


def joints(setup: Any, truth: dict[str, np.ndarray], path: Path) -> str:
    robot = setup.robot
    quad = bool(robot.spec.rotors)
    names = robot.actuator_names if quad else [j.name for j in robot.spec.joints]
    n = len(names)
    cols = 2 if quad else 3
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(10, 1.8 * rows + 1), sharex=True,
                             squeeze=False)
    t = truth["t"]
    for i, ax in enumerate(axes.flat):
        if i >= n:
            ax.axis("off")
            continue
        ax.plot(t, truth["drive_target"][:, i], color="black", lw=1.0, label="target")
        ax.plot(t, truth["drive_measured"][:, i], color="tab:blue", lw=0.9, label="measured")
        ax.set_title(names[i], fontsize=8)
        ax.tick_params(labelsize=7)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("rotor speed command against rotor speed (fraction of max)" if quad else
                 "joint target against joint angle (rad)")
    fig.tight_layout()
    return _save(fig, path)


def latency(lat: dict[str, np.ndarray], path: Path) -> str:
    fig, ax = plt.subplots(figsize=(8, 4))
    drawn = False
    for (name, x), color in zip(lat.items(), ("tab:blue", "tab:orange", "tab:green"),
                                strict=False):
        x = x[np.isfinite(x) & (x > 0)]
        if x.size == 0:
            continue
        bins = np.logspace(np.log10(max(x.min(), 1e-3)), np.log10(x.max() * 1.01 + 1e-3), 50)
        ax.hist(x, bins=bins, alpha=0.5, color=color,
                label=f"{name} (p50 {np.percentile(x, 50):.2f}, p99 "
                      f"{np.percentile(x, 99):.2f} ms)")
        drawn = True
    ax.set_xscale("log")
    ax.set_xlabel("latency (ms)")
    ax.set_ylabel("messages")
    if drawn:
        ax.legend(fontsize=8)
    ax.set_title("link and state-to-command latency")
    fig.tight_layout()
    return _save(fig, path)


def safety(setup: Any, data: Any, runs: dict[str, Any], path: Path) -> str:
    fig, ax = plt.subplots(figsize=(10, 4))
    for src, run in runs.items():
        cyc = run["cycles"]
        if not cyc:
            continue
        t = [c["t"] for c in cyc]
        level = [MODE_LEVEL.get(c["mode"], np.nan) if c["ready"] else np.nan for c in cyc]
        ax.step(t, level, where="post", lw=1.2, label=f"{src} mode")
        stale = [c["t"] for c in cyc if c["stale"] > 0]
        ax.plot(stale, [2.3] * len(stale), "|", color="grey", ms=6,
                label="stale period" if src.endswith("-0") else None)
    fs = [e["t"] for e in data.events if e.get("event") == "failsafe"]
    ok = [e["t"] for e in data.events if e.get("event") == "failsafe_cleared"]
    ax.plot(fs, [-2] * len(fs), "v", color="red", label="robot driver failsafe")
    ax.plot(ok, [-2] * len(ok), "^", color="green", label="failsafe cleared")
    _faults(ax, setup)
    _events(ax, data)
    ax.set_yticks([-2, *MODE_LEVEL.values()], ["robot driver", *MODE_LEVEL])
    ax.set_ylim(-2.5, 2.6)
    ax.set_xlabel("scenario time (s)")
    ax.set_title("safety timeline (orange: fault windows; red dashed: process killed; green "
                 "dotted: process started)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return _save(fig, path)


def write_all(setup: Any, data: Any, truth: dict[str, np.ndarray], runs: dict[str, Any],
              lat: dict[str, np.ndarray]) -> dict[str, str]:
    out = {}
    if truth:
        out["tracking"] = tracking(setup, data, truth, setup.out / "tracking.png")
        out["joints"] = joints(setup, truth, setup.out / "joints.png")
    out["latency"] = latency(lat, setup.out / "latency.png")
    out["safety"] = safety(setup, data, runs, setup.out / "safety.png")
    return out
