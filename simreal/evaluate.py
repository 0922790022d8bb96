"""Evaluation through the deploy runtime: the simulator supplies sensor signals, and deploy's
policy runner (observation builder, onnxruntime, action mapper) does the rest, as on a robot.

Two kinds: `run_episodes` (the task's own episodes and metrics, `simreal eval`) and the
per-command tracking table (`track_command`, `simreal eval --tracking`; sim2sim.py fills the
same rows from another MJCF)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simreal.deploy.policy import OnnxPolicy
from simreal.deploy.runner import PolicyRunner


def run_episodes(env: Any, policy: OnnxPolicy, episodes: int) -> dict[str, Any]:
    """Each env of a wave runs one episode from a fresh reset; waves until `episodes` are done."""
    n = env.num_envs
    runner = PolicyRunner(policy, env.robot, batch=n)
    horizon = env.max_episode_length
    successes, returns, summaries, weights = [], [], [], []
    remaining = episodes
    while remaining > 0:
        env.reset()
        runner.reset()
        active = torch.ones(n, dtype=torch.bool)
        ret = torch.zeros(n)
        length = torch.zeros(n, dtype=torch.long)
        success = torch.zeros(n, dtype=torch.bool)
        history: dict[str, list[torch.Tensor]] = {}
        for _ in range(horizon):
            signals = {k: v.numpy() for k, v in env.noisy_signals().items()
                       if k != "last_action"}
            action, _ = runner.act(signals)
            _, reward, done, _ = env.step(torch.from_numpy(action))
            for key, value in env.step_metrics().items():
                history.setdefault(key, []).append(value.clone())
            ret += reward * active
            length += active.long()
            finished = done & active
            success[finished] = env.success[finished]
            active &= ~done
            runner.reset(done.numpy())
            if not active.any():
                break
        take = min(remaining, n)
        successes.append(success[:take])
        returns.append(ret[:take])
        stacked = {k: torch.stack(v)[:, :take] for k, v in history.items()}
        summaries.append(env.summarize(stacked, length[:take]))
        weights.append(take)
        remaining -= take
    out: dict[str, Any] = {
        "episodes": episodes,
        "success_rate": torch.cat(successes).float().mean().item(),
        "mean_return": torch.cat(returns).mean().item(),
    }
    for key in summaries[0]:
        out[key] = float(np.average([s[key] for s in summaries], weights=weights))
    return out


# --- per-command tracking ----------------------------------------------------------------------
# The fixed table of `simreal eval --tracking` and `simreal sim2sim --tracking`: each command
# (vx, vy m/s in the base frame; yaw rate rad/s) held for a whole episode from a standing
# start, measured after a settle.
TRACKING_COMMANDS: tuple[tuple[float, float, float], ...] = (
    (0.3, 0.0, 0.0), (0.5, 0.0, 0.0), (1.0, 0.0, 0.0), (-0.5, 0.0, 0.0),
    (0.0, 0.3, 0.0), (0.0, -0.3, 0.0), (0.0, 0.0, 0.5), (0.0, 0.0, -0.5))
TRACKING_EPISODES = 10  # per command
TRACKING_EPISODE_S = 20.0
TRACKING_SETTLE_S = 2.0
LIN_VEL_TARGET = 0.1  # m/s, rows with a linear command (or none)
ANG_VEL_TARGET = 0.15  # rad/s, rows with a yaw-rate command

Command = tuple[float, float, float]


def check_commands(commands: Any, source: str = "commands") -> list[Command]:
    """A list of (vx, vy, wz) triples of finite numbers; a malformed table is refused naming
    the row."""
    if isinstance(commands, dict) and "commands" in commands:
        commands = commands["commands"]
    if not isinstance(commands, list | tuple) or not commands:
        raise ValueError(f"{source}: a command table is a non-empty list of [vx, vy, wz] "
                         "(m/s, m/s, rad/s)")
    out = []
    for i, row in enumerate(commands):
        ok = isinstance(row, list | tuple) and len(row) == 3 and all(
            isinstance(x, int | float) and not isinstance(x, bool) and np.isfinite(x)
            for x in row)
        if not ok:
            raise ValueError(f"{source}: command {i} is {row!r}, not [vx, vy, wz] "
                             "(three finite numbers)")
        out.append((float(row[0]), float(row[1]), float(row[2])))
    return out


def load_commands(path: str | Path) -> list[Command]:
    """A command table from YAML or JSON: a list of [vx, vy, wz], or {commands: [...]}."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such command table")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{p}: not YAML or JSON: {exc}") from None
    return check_commands(data, str(p))


def command_targets(command: Sequence[float]) -> dict[str, float]:
    """The targets a row is held to: lin_vel_error for a linear command (or standing still),
    ang_vel_error for a yaw-rate command."""
    vx, vy, wz = command
    out = {}
    if vx or vy or not wz:
        out["lin_vel_error"] = LIN_VEL_TARGET
    if wz:
        out["ang_vel_error"] = ANG_VEL_TARGET
    return out


def tracking_row(command: Sequence[float], lin_err: np.ndarray, ang_err: np.ndarray,
                 valid: np.ndarray, fell: np.ndarray, settle_steps: int,
                 velocity: np.ndarray) -> dict[str, Any]:
    """One row of the table from (T, N) per-step errors (m/s, rad/s) of N episodes, `valid`
    where an episode was still standing after that step, `fell` (N,) which ended early, and
    the (T, N, 3) measured velocities (forward, lateral m/s in the base frame; yaw rate rad/s).
    Errors and `velocity` are means over every episode's steps after `settle_steps` (the
    velocity says which way an error goes: too slow, too fast, drifting). An episode succeeds
    when it stands to the end and its own errors meet the row's targets."""
    settled = valid.copy()
    settled[:settle_steps] = False
    count = settled.sum(0)
    targets = command_targets(command)

    def mean(x: np.ndarray) -> float:
        return float(x[settled].mean()) if settled.any() else math.nan

    per_episode = {"lin_vel_error": (lin_err * settled).sum(0) / np.maximum(count, 1),
                   "ang_vel_error": (ang_err * settled).sum(0) / np.maximum(count, 1)}
    success = ~fell & (count > 0)
    for key, target in targets.items():
        success &= per_episode[key] < target
    row = {"command": [float(c) for c in command], "lin_vel_error": mean(lin_err),
           "ang_vel_error": mean(ang_err),
           "velocity": [mean(velocity[..., k]) for k in range(3)],
           "falls": int(fell.sum()), "episodes": len(fell),
           "success_rate": float(success.mean())}
    row["ok"] = row["falls"] == 0 and all(
        math.isfinite(row[k]) and row[k] < t for k, t in targets.items())
    return row


def tracking_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """`tracking` (the rows), `tracking_ok` (every row within its targets) and the overall
    `success_rate` (episodes that stood and met their row's targets)."""
    episodes = sum(r["episodes"] for r in rows)
    return {"tracking": rows, "tracking_ok": all(r["ok"] for r in rows),
            "success_rate": sum(r["success_rate"] * r["episodes"] for r in rows) / episodes,
            "targets": {"lin_vel_error": LIN_VEL_TARGET, "ang_vel_error": ANG_VEL_TARGET,
                        "falls": 0}}


def track_command(env: Any, policy: OnnxPolicy, command: Sequence[float],
                  settle_s: float = TRACKING_SETTLE_S) -> dict[str, Any]:
    """One row: every env of `env` (built to hold `command`, one env per episode) runs one
    episode from a fresh reset through the deploy runtime; metrics are the task's per-step
    `lin_vel_error` and `ang_vel_error` (noise-free) and its terminations (falls)."""
    n = env.num_envs
    runner = PolicyRunner(policy, env.robot, batch=n)
    horizon = env.max_episode_length
    env.reset()
    runner.reset()
    active = torch.ones(n, dtype=torch.bool)
    fell = torch.zeros(n, dtype=torch.bool)
    lin, ang, vel, valid = [], [], [], []
    for _ in range(horizon):
        signals = {k: v.numpy() for k, v in env.noisy_signals().items() if k != "last_action"}
        action, _ = runner.act(signals)
        _, _, done, _ = env.step(torch.from_numpy(action))
        m = env.step_metrics()
        fall_now = m["fell"].bool() & active
        fell |= fall_now
        lin.append(m["lin_vel_error"].clone())
        ang.append(m["ang_vel_error"].clone())
        vel.append(m["velocity"].clone())
        valid.append(active & ~fall_now)
        active &= ~done
        if not active.any():
            break
    settle_steps = round(settle_s * env.robot.spec.control.rate_hz)
    return tracking_row(command, torch.stack(lin).numpy(), torch.stack(ang).numpy(),
                        torch.stack(valid).numpy(), fell.numpy(), settle_steps,
                        torch.stack(vel).numpy())

