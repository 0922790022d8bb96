"""The end of a training iteration, as every runner does it: TensorBoard scalars, the
progress bar, a periodic checkpoint, and the caller's stop request (any rank stops all)."""

from __future__ import annotations

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


def end_iteration(runner: Any, bar: Any, stats: dict[str, float], steps: int,
                  callback: Callable[[Any, dict[str, float]], bool] | None) -> bool:
    """Log and show this iteration's `stats` (`steps` env steps, all ranks), checkpoint every
    `runner.checkpoint_every` iterations; True when a callback on any rank asks to stop."""
    log_scalars(runner.writer, stats, runner.env_steps)
    bar.update(steps)
    bar.set_postfix({"steps/s": f"{stats['steps_per_s']:.0f}",
                     "reward": f"{stats['mean_reward']:.3f}",
                     "success": f"{stats.get('episode/success_rate', 0.0):.2f}"})
    if runner.run_dir is not None and runner.iteration % runner.checkpoint_every == 0:
        runner.save()
    return callback is not None and distributed.any_rank(bool(callback(runner, stats)))
