"""Evaluation through the deploy runtime: the simulator supplies sensor signals, and deploy's
policy runner (observation builder, onnxruntime, action mapper) does the rest, as on a robot."""

from __future__ import annotations

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
