"""Preallocated rollout storage for on-policy learning, and GAE."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import torch


def gae(rewards: torch.Tensor, values: torch.Tensor, dones: torch.Tensor,
        last_values: torch.Tensor, gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over (T, N) tensors; returns (advantages, returns).

    `dones[t]` marks that the episode ended after step t (its next value is not bootstrapped;
    time-outs are bootstrapped by the caller through the reward).
    """
    T = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(last_values)
    for t in reversed(range(T)):
        next_values = last_values if t == T - 1 else values[t + 1]
        not_done = 1.0 - dones[t].float()
        delta = rewards[t] + gamma * next_values * not_done - values[t]
        running = delta + gamma * lam * not_done * running
        advantages[t] = running
    return advantages, advantages + values


class RolloutStorage:
    def __init__(self, steps: int, num_envs: int, actor_dim: int, critic_dim: int,
                 num_actions: int, device: torch.device | str = "cpu"):
        self.steps, self.num_envs = steps, num_envs
        z = functools.partial(torch.zeros, device=device)
        self.actor_obs = z(steps, num_envs, actor_dim)
        self.critic_obs = z(steps, num_envs, critic_dim)
        self.actions = z(steps, num_envs, num_actions)
        self.log_probs = z(steps, num_envs)
        self.mu = z(steps, num_envs, num_actions)
        self.sigma = z(steps, num_envs, num_actions)
        self.values = z(steps, num_envs)
        self.rewards = z(steps, num_envs)
        self.dones = z(steps, num_envs, dtype=torch.bool)
        self.advantages = z(steps, num_envs)
        self.returns = z(steps, num_envs)
        self.step = 0

    def add(self, actor_obs, critic_obs, actions, log_probs, mu, sigma, values, rewards, dones
            ) -> None:
        t = self.step
        self.actor_obs[t] = actor_obs
        self.critic_obs[t] = critic_obs
        self.actions[t] = actions
        self.log_probs[t] = log_probs
        self.mu[t] = mu
        self.sigma[t] = sigma
        self.values[t] = values
        self.rewards[t] = rewards
        self.dones[t] = dones
        self.step += 1

    def finish(self, last_values: torch.Tensor, gamma: float, lam: float) -> None:
        self.advantages, self.returns = gae(self.rewards, self.values, self.dones, last_values,
                                            gamma, lam)
        self.step = 0

    def minibatches(self, num_minibatches: int, epochs: int, generator: torch.Generator
                    ) -> Iterator[dict[str, torch.Tensor]]:
        n = self.steps * self.num_envs
        size = n // num_minibatches
        flat = {k: getattr(self, k).reshape(n, *getattr(self, k).shape[2:]) for k in (
            "actor_obs", "critic_obs", "actions", "log_probs", "mu", "sigma", "values",
            "advantages", "returns")}
        for _ in range(epochs):
            perm = torch.randperm(n, generator=generator, device=generator.device)
            for i in range(num_minibatches):
                idx = perm[i * size:(i + 1) * size]
                yield {k: v[idx] for k, v in flat.items()}
