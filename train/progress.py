"""The end of a training iteration, as every runner does it: TensorBoard scalars, the
progress bar, a periodic checkpoint, and the caller's stop request (any rank stops all)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from simreal.train import distributed


def log_scalars(writer: Any, stats: dict[str, float], env_steps: int) -> None:
    """Write `stats` to TensorBoard at x = env steps (rank 0 has a writer; others None)."""
    if writer is None:
        return
    for key, value in stats.items():
        writer.add_scalar(key, value, env_steps)
    writer.flush()


class TrainingDiverged(RuntimeError):
    """A loss or the mean reward became NaN or infinite: the weights are no longer usable."""


def check_finite(runner: Any, stats: dict[str, float]) -> None:
    """Stop on a non-finite loss or reward, before that iteration's weights are saved: the
    last periodic checkpoint stays the newest (episode metrics may be NaN without harm)."""
    bad = sorted(k for k, v in stats.items()
                 if (k.startswith("loss/") or k == "mean_reward") and not math.isfinite(v))
    if bad:
        where = (f"; the last good checkpoint is {runner.run_dir / 'checkpoints' / 'latest.pt'}"
                 if runner.run_dir is not None else "")
        raise TrainingDiverged(f"iteration {runner.iteration}: non-finite {', '.join(bad)} "
                               f"({', '.join(f'{k}={stats[k]}' for k in bad)}): training "
                               f"stopped{where}")


def set_training_progress(env: Any, env_steps: int) -> dict[str, float]:
    """Tell the env how far training is (its curricula follow it); the progress (0 to 1) of
    each of its curricula by name, for the log as `curriculum/<name>`: empty for an env
    without one (another framework's VecEnv)."""
    if not getattr(env, "has_curriculum", False):
        return {}
    return env.set_training_progress(env_steps)


def end_iteration(runner: Any, bar: Any, stats: dict[str, float], steps: int,
                  callback: Callable[[Any, dict[str, float]], bool] | None) -> bool:
    """Log and show this iteration's `stats` (`steps` env steps, all ranks), checkpoint every
    `runner.checkpoint_every` iterations; True when a callback on any rank asks to stop.
    A non-finite loss or reward raises `TrainingDiverged` before anything is saved."""
    check_finite(runner, stats)
    log_scalars(runner.writer, stats, runner.env_steps)
    bar.update(steps)
    bar.set_postfix({"steps/s": f"{stats['steps_per_s']:.0f}",
                     "reward": f"{stats['mean_reward']:.3f}",
                     "success": f"{stats.get('episode/success_rate', 0.0):.2f}"})
    if runner.run_dir is not None and runner.iteration % runner.checkpoint_every == 0:
        runner.save()
    return callback is not None and distributed.any_rank(bool(callback(runner, stats)))
