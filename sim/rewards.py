"""Reward terms: plain functions over a task's state, weighted by the task config.

A task names its terms in `reward_functions` ({name: fn}); each `fn(state, params)` returns
one value per env from the named tensors the task's `reward_state()` computed after the
control period and the task config's `reward_params`. The config's `rewards` ({name: weight})
gives the weights; the base env (sim/vec_env.py) sums weight x value over the terms, skips
terms weighted 0 and logs each term per episode. Signs live in the weights: a term is the
quantity measured (an error, a speed, a kernel in [0, 1]), a cost has a negative weight.

The functions here are the ones several tasks share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

State = Mapping[str, torch.Tensor]
RewardFn = Callable[[State, Any], torch.Tensor]


def tanh_kernel(x: torch.Tensor, scale: float) -> torch.Tensor:
    """1 at x = 0, falling to 0 over a few `scale`: a bounded pull towards zero error."""
    return 1 - torch.tanh(x / scale)


def alive(s: State, p: Any) -> torch.Tensor:
    """1 per step (a weight on it pays for staying in the episode)."""
    return torch.ones_like(s["action"][:, 0])


def action_rate(s: State, p: Any) -> torch.Tensor:
    """|a - a_prev|^2: the change of the action over one control period."""
    return (s["action"] - s["prev_action"]).square().sum(-1)


def joint_vel(s: State, p: Any) -> torch.Tensor:
    """|qdot|^2 over the joints in `s["joint_vel"]`."""
    return s["joint_vel"].square().sum(-1)


def terminated(s: State, p: Any) -> torch.Tensor:
    """1 on a step that ends the episode as a failure (crash, fall)."""
    return s["terminated"].float()
