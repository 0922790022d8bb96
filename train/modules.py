"""Networks: a running observation normalizer and the asymmetric actor-critic."""

from __future__ import annotations

import torch
from torch import nn


class EmpiricalNormalization(nn.Module):
    """Running mean and variance of its inputs (Chan's parallel update); normalizes and clips.

    It updates only when `update()` is called, so the exported graph holds fixed statistics.
    """

    def __init__(self, dim: int, eps: float = 1e-2, clip: float = 5.0):
        super().__init__()
        self.eps, self.clip = eps, clip
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        # (n, mean, var) -> the moments of every process's batch (train/distributed.py)
        self.reduce = None

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        x = x.reshape(-1, x.shape[-1])
        n = x.shape[0]
        batch_mean, batch_var = x.mean(0), x.var(0, unbiased=False)
        if self.reduce is not None:
            n, batch_mean, batch_var = self.reduce(n, batch_mean, batch_var)
        total = self.count + n
        delta = batch_mean - self.mean
        w = n / total  # a tensor: no host sync on an accelerator
        self.mean += delta * w
        # in place: a CUDA-graphed update holds this buffer's storage
        self.var.copy_(self.var * (1 - w) + batch_var * w + delta.square() * w * (1 - w))
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = (x - self.mean) / torch.sqrt(self.var + self.eps)
        return z.clamp(-self.clip, self.clip)


def mlp(sizes: list[int], activation: type[nn.Module] = nn.ELU) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """Gaussian actor on the "policy" group, value critic on the "critic" group."""

    def __init__(self, actor_dim: int, critic_dim: int, num_actions: int,
                 actor_hidden: list[int], critic_hidden: list[int], init_std: float):
        super().__init__()
        self.actor_norm = EmpiricalNormalization(actor_dim)
        self.critic_norm = EmpiricalNormalization(critic_dim)
        self.actor = mlp([actor_dim, *actor_hidden, num_actions])
        self.critic = mlp([critic_dim, *critic_hidden, 1])
        self.log_std = nn.Parameter(torch.full((num_actions,), float(init_std)).log())
        nn.init.uniform_(self.actor[-1].weight, -1e-3, 1e-3)  # start near a = 0 (hover)
        nn.init.zeros_(self.actor[-1].bias)

    def distribution(self, actor_obs: torch.Tensor) -> torch.distributions.Normal:
        mean = self.actor(self.actor_norm(actor_obs))
        # no argument validation: it costs a check and a sync per call on the hot path
        return torch.distributions.Normal(mean, self.log_std.exp().expand_as(mean),
                                          validate_args=False)

    def parameter_groups(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        """(actor's parameters, critic's parameters)."""
        return [*self.actor.parameters(), self.log_std], list(self.critic.parameters())

    def value(self, critic_obs: torch.Tensor) -> torch.Tensor:
        return self.critic(self.critic_norm(critic_obs)).squeeze(-1)

    def act_deterministic(self, actor_obs: torch.Tensor) -> torch.Tensor:
        return self.actor(self.actor_norm(actor_obs))


class DeterministicActor(nn.Module):
    """What is exported: the normalizer and the actor's mean, nothing else."""

    def __init__(self, policy: ActorCritic):
        super().__init__()
        self.norm = policy.actor_norm
        self.actor = policy.actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.actor(self.norm(obs))
