"""TD3 for many parallel environments: the off-policy runner of SAC with a deterministic actor.

Target policy smoothing (clipped Gaussian noise on the target action), delayed actor updates
(and target updates of the actor), clipped double-Q over the critic ensemble (scalar or C51),
and exploration noise whose scale differs per environment: each env draws its own standard
deviation from [exploration_std_min, exploration_std_max] at every reset, so the batch mixes
cautious and bold behaviour (as FastTD3 does).
"""

from __future__ import annotations

import copy

import torch
from pydantic import Field, model_validator

from simreal.train.offpolicy import OffPolicyAgent, OffPolicyConfig, OffPolicyModel, OffPolicyRunner
from simreal.train.offpolicy_modules import DeterministicTanhActor, polyak


class TD3Config(OffPolicyConfig):
    policy_noise: float = Field(0.2, ge=0)  # target smoothing noise std
    noise_clip: float = Field(0.5, ge=0)
    policy_delay: int = Field(2, ge=1)  # critic updates per actor (and actor-target) update
    exploration_std_min: float = Field(0.05, ge=0)
    exploration_std_max: float = Field(0.4, ge=0)
    actor_q: str = Field("mean", pattern="^(min|mean|first)$")

    @model_validator(mode="after")
    def _check_noise(self) -> TD3Config:
        if self.exploration_std_min > self.exploration_std_max:
            raise ValueError(f"exploration_std_min ({self.exploration_std_min}) must not "
                             f"exceed exploration_std_max ({self.exploration_std_max})")
        return self


class TD3(OffPolicyAgent):
    def __init__(self, actor_dim: int, critic_dim: int, num_actions: int, num_envs: int,
                 cfg: TD3Config, device: torch.device):
        super().__init__(cfg, device)
        self.cfg: TD3Config = cfg
        actor = DeterministicTanhActor(actor_dim, num_actions, cfg.actor_hidden)
        self.model = OffPolicyModel(actor_dim, critic_dim, num_actions, actor, cfg,
                                    self.critic_math.outputs)
        self.model.actor_target = copy.deepcopy(actor).requires_grad_(False)
        self.model.to(device)
        m = self.model
        self.optimizer = self._make_optimizer([
            {"params": list(m.actor.parameters()), "lr": cfg.actor_lr},
            {"params": list(m.critic.parameters()), "lr": cfg.critic_lr},
        ])
        self.noise_std = torch.zeros(num_envs, 1, device=device)
        self.episodes_ended(torch.ones(num_envs, dtype=torch.bool, device=device))
        self._losses = self._maybe_compile(self._losses)

    def episodes_ended(self, done: torch.Tensor) -> None:
        """Each reset env draws a new exploration noise scale."""
        cfg = self.cfg
        fresh = torch.empty_like(self.noise_std).uniform_(cfg.exploration_std_min,
                                                          cfg.exploration_std_max)
        self.noise_std = torch.where(done[:, None], fresh, self.noise_std)

    @torch.no_grad()
    def act(self, actor_obs: torch.Tensor) -> torch.Tensor:
        m = self.model
        action = m.actor(m.actor_norm(actor_obs))
        return (action + self.noise_std * torch.randn_like(action)).clamp(-1.0, 1.0)

    @torch.no_grad()
    def target_action(self, next_a: torch.Tensor) -> torch.Tensor:
        """The target actor's action with clipped Gaussian noise (target policy smoothing)."""
        cfg = self.cfg
        action = self.model.actor_target(next_a)
        noise = (torch.randn_like(action) * cfg.policy_noise).clamp(-cfg.noise_clip,
                                                                    cfg.noise_clip)
        return (action + noise).clamp(-1.0, 1.0)

    @torch.no_grad()
    def td_target(self, next_a: torch.Tensor, next_c: torch.Tensor, reward: torch.Tensor,
                  discount: torch.Tensor) -> torch.Tensor:
        """r + discount * min_i Q'_i(s', smoothed target action); C51 alike."""
        out = self.model.critic_target(next_c, self.target_action(next_a))
        return self.critic_math.target(out, reward, discount)

    def _losses(self, obs_a: torch.Tensor, obs_c: torch.Tensor, next_a: torch.Tensor,
                next_c: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
                discount: torch.Tensor, update_actor: bool
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        m, crit, cfg = self.model, self.critic_math, self.cfg
        target = self.td_target(next_a, next_c, reward, discount)
        out = m.critic(obs_c, action)
        critic_loss = crit.loss(out, target)
        stats = {"loss/critic": critic_loss.detach(), "q": crit.q(out.detach()).mean()}
        if not update_actor:
            return critic_loss, stats
        q_pi = crit.q(m.critic(obs_c, m.actor(obs_a), detach=True))
        if cfg.actor_q == "min":
            q_pi = q_pi.min(0).values
        else:
            q_pi = q_pi[0] if cfg.actor_q == "first" else q_pi.mean(0)
        actor_loss = -q_pi.mean()
        stats["loss/actor"] = actor_loss.detach()
        return critic_loss + actor_loss, stats

    def _update_actor_now(self) -> bool:
        return self.num_updates % self.cfg.policy_delay == 0

    def _update_body(self, batch: dict[str, torch.Tensor], update_actor: bool
                     ) -> dict[str, torch.Tensor]:
        obs_a, obs_c, next_a, next_c = self.normalized(batch)
        loss, stats = self._losses(obs_a, obs_c, next_a, next_c, batch["action"],
                                   batch["reward"].squeeze(-1), batch["discount"].squeeze(-1),
                                   update_actor)
        self._step(loss)
        polyak(self.model.critic_target, self.model.critic, self.cfg.tau)
        if update_actor:
            polyak(self.model.actor_target, self.model.actor, self.cfg.tau)
        return stats


class TD3Runner(OffPolicyRunner):
    algo = "td3"
    agent_class = TD3
