"""PPO: clipped surrogate, clipped value loss, KL-adaptive learning rate, asymmetric critic.

Every hyperparameter is in PPOConfig; the update reads top to bottom.
"""

from __future__ import annotations

import torch

from simreal.core.config import StrictModel
from simreal.train import distributed
from simreal.train.modules import ActorCritic
from simreal.train.storage import RolloutStorage


class PPOConfig(StrictModel):
    steps_per_env: int = 24  # rollout length per iteration
    epochs: int = 5
    minibatches: int = 4
    learning_rate: float = 1e-3  # initial; adapted from the KL divergence
    desired_kl: float = 0.01
    gamma: float = 0.99
    lam: float = 0.95
    clip: float = 0.2
    value_clip: float = 0.2
    value_coef: float = 1.0
    entropy_coef: float = 0.0
    max_grad_norm: float = 1.0
    actor_hidden: list[int] = [64, 64]
    critic_hidden: list[int] = [128, 128]
    init_std: float = 0.5


class PPO:
    def __init__(self, policy: ActorCritic, cfg: PPOConfig, generator: torch.Generator):
        self.policy, self.cfg, self.generator = policy, cfg, generator
        self.learning_rate = cfg.learning_rate
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=self.learning_rate)
        self.optimizer_params = distributed.optimizer_params(self.optimizer)

    def update(self, storage: RolloutStorage) -> dict[str, float]:
        cfg, policy = self.cfg, self.policy
        stats = {"loss/surrogate": 0.0, "loss/value": 0.0, "loss/entropy": 0.0, "kl": 0.0}
        count = 0
        for mb in storage.minibatches(cfg.minibatches, cfg.epochs, self.generator):
            dist = policy.distribution(mb["actor_obs"])
            log_prob = dist.log_prob(mb["actions"]).sum(-1)
            entropy = dist.entropy().sum(-1).mean()
            value = policy.value(mb["critic_obs"])

            with torch.no_grad():  # KL(old || new) between diagonal Gaussians
                kl = (torch.log(dist.stddev / mb["sigma"])
                      + (mb["sigma"].square() + (mb["mu"] - dist.mean).square())
                      / (2 * dist.stddev.square()) - 0.5).sum(-1).mean()
                kl = distributed.mean(kl)  # every rank adapts the rate alike
                if kl > 2 * cfg.desired_kl:
                    self.learning_rate = max(1e-5, self.learning_rate / 1.5)
                elif 0 < kl < cfg.desired_kl / 2:
                    self.learning_rate = min(1e-2, self.learning_rate * 1.5)
                for group in self.optimizer.param_groups:
                    group["lr"] = self.learning_rate

            adv = mb["advantages"]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            ratio = torch.exp(log_prob - mb["log_probs"])
            surrogate = -torch.min(ratio * adv,
                                   ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * adv).mean()
            clipped_value = mb["values"] + (value - mb["values"]).clamp(-cfg.value_clip,
                                                                       cfg.value_clip)
            value_loss = torch.max((value - mb["returns"]).square(),
                                   (clipped_value - mb["returns"]).square()).mean()
            loss = surrogate + cfg.value_coef * value_loss - cfg.entropy_coef * entropy

            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            distributed.all_reduce_gradients(self.optimizer_params)  # no-op on one process
            # actor and critic share no weights: clipped apart, a large value loss (returns in
            # the hundreds) cannot shrink the actor's step
            for group in policy.parameter_groups():
                torch.nn.utils.clip_grad_norm_(group, cfg.max_grad_norm)
            self.optimizer.step()

            stats["loss/surrogate"] += surrogate.item()
            stats["loss/value"] += value_loss.item()
            stats["loss/entropy"] += entropy.item()
            stats["kl"] += kl.item()
            count += 1
        out = {k: v / count for k, v in stats.items()}
        out["learning_rate"] = self.learning_rate
        out["action_std"] = policy.log_std.exp().mean().item()
        return out
