"""SAC for many parallel environments: large batches, n-step returns, an asymmetric critic.

Twin (or more) critics with the clipped double-Q target, scalar or C51-distributional; a
tanh-squashed Gaussian actor with bounded log std; the entropy temperature adapted toward a
target entropy; Polyak-averaged target critics. One update is one backward pass and one fused
Adam step for critic, actor and temperature together: the actor's loss sees the critic's
weights detached and the critic's loss sees only replayed actions, so the gradients are those
of three separate updates (the actor is scored by the critic before this step's change).
"""

from __future__ import annotations

import math

import torch
from pydantic import Field

from simreal.train.offpolicy import OffPolicyAgent, OffPolicyConfig, OffPolicyModel, OffPolicyRunner
from simreal.train.offpolicy_modules import SquashedGaussianActor, polyak


class SACConfig(OffPolicyConfig):
    alpha_init: float = Field(0.1, gt=0)  # initial entropy temperature
    alpha_lr: float = Field(3e-4, gt=0)
    # target entropy per action dimension (the target is this times the action count)
    target_entropy_per_action: float = -1.0
    log_std_min: float = -5.0
    log_std_max: float = 2.0
    actor_update_every: int = Field(1, ge=1)  # critic updates per actor/temperature update
    actor_q: str = Field("min", pattern="^(min|mean)$")  # how the actor's loss pools critics


class SAC(OffPolicyAgent):
    def __init__(self, actor_dim: int, critic_dim: int, num_actions: int, num_envs: int,
                 cfg: SACConfig, device: torch.device):
        super().__init__(cfg, device)
        self.cfg: SACConfig = cfg
        actor = SquashedGaussianActor(actor_dim, num_actions, cfg.actor_hidden,
                                      cfg.log_std_min, cfg.log_std_max)
        self.model = OffPolicyModel(actor_dim, critic_dim, num_actions, actor, cfg,
                                    self.critic_math.outputs)
        self.model.log_alpha = torch.nn.Parameter(torch.tensor(math.log(cfg.alpha_init)))
        self.model.to(device)
        m = self.model
        self.target_entropy = cfg.target_entropy_per_action * num_actions
        self.optimizer = self._make_optimizer([
            {"params": list(m.actor.parameters()), "lr": cfg.actor_lr},
            {"params": list(m.critic.parameters()), "lr": cfg.critic_lr},
            {"params": [m.log_alpha], "lr": cfg.alpha_lr},
        ])
        self._losses = self._maybe_compile(self._losses)

    @torch.no_grad()
    def act(self, actor_obs: torch.Tensor) -> torch.Tensor:
        m = self.model
        return m.actor.sample(m.actor_norm(actor_obs))[0]

    @torch.no_grad()
    def td_target(self, next_a: torch.Tensor, next_c: torch.Tensor, reward: torch.Tensor,
                  discount: torch.Tensor) -> torch.Tensor:
        """r + discount * (min_i Q'_i(s', a') - alpha log pi(a'|s')), a' ~ pi(s'); C51 alike."""
        m = self.model
        next_action, next_log_prob = m.actor.sample(next_a)
        shift = -m.log_alpha.exp() * next_log_prob.float()
        return self.critic_math.target(m.critic_target(next_c, next_action), reward, discount,
                                       shift)

    def _losses(self, obs_a: torch.Tensor, obs_c: torch.Tensor, next_a: torch.Tensor,
                next_c: torch.Tensor, action: torch.Tensor, reward: torch.Tensor,
                discount: torch.Tensor, update_actor: bool
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        m, crit, cfg = self.model, self.critic_math, self.cfg
        alpha = m.log_alpha.detach().exp()
        target = self.td_target(next_a, next_c, reward, discount)
        out = m.critic(obs_c, action)
        critic_loss = crit.loss(out, target)
        stats = {"loss/critic": critic_loss.detach(), "q": crit.q(out.detach()).mean()}
        if not update_actor:
            return critic_loss, stats
        new_action, log_prob = m.actor.sample(obs_a)
        q_pi = crit.q(m.critic(obs_c, new_action, detach=True))
        q_pi = q_pi.min(0).values if cfg.actor_q == "min" else q_pi.mean(0)
        actor_loss = (alpha * log_prob - q_pi).mean()
        alpha_loss = -(m.log_alpha * (log_prob.detach() + self.target_entropy)).mean()
        stats.update({"loss/actor": actor_loss.detach(), "alpha": alpha,
                      "entropy": -log_prob.detach().mean()})
        return critic_loss + actor_loss + alpha_loss, stats

    def _update_actor_now(self) -> bool:
        return self.num_updates % self.cfg.actor_update_every == 0

    def _update_body(self, batch: dict[str, torch.Tensor], update_actor: bool
                     ) -> dict[str, torch.Tensor]:
        obs_a, obs_c, next_a, next_c = self.normalized(batch)
        loss, stats = self._losses(obs_a, obs_c, next_a, next_c, batch["action"],
                                   batch["reward"].squeeze(-1), batch["discount"].squeeze(-1),
                                   update_actor)
        self._step(loss)
        polyak(self.model.critic_target, self.model.critic, self.cfg.tau)
        return stats


class SACRunner(OffPolicyRunner):
    algo = "sac"
    agent_class = SAC
