"""The on-policy runner: collect rollouts from a VecEnv, update PPO, log, checkpoint."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from simreal.train import distributed
from simreal.train.checkpoint import save_checkpoint
from simreal.train.modules import ActorCritic, DeterministicActor
from simreal.train.ppo import PPO, PPOConfig
from simreal.train.progress import end_iteration, set_training_progress
from simreal.train.storage import RolloutStorage

# called after each iteration with (runner, stats); returning True stops training
Callback = Callable[["OnPolicyRunner", dict[str, float]], bool]


class OnPolicyRunner:
    def __init__(self, env: Any, cfg: PPOConfig, run_dir: Path | None, seed: int,
                 run_config: dict[str, Any], checkpoint_every: int = 50):
        self.env, self.cfg, self.run_dir = env, cfg, run_dir
        self.run_config = run_config
        self.checkpoint_every = checkpoint_every
        # everything on the env's device (a GPU backend's tensors never leave it); under
        # torchrun each rank samples differently and starts from rank 0's weights
        self.device = torch.device(getattr(env, "device", "cpu"))
        torch.manual_seed(distributed.rank_seed(seed))
        obs = env.get_observations()
        self.actor_dim, self.critic_dim = obs["policy"].shape[-1], obs["critic"].shape[-1]
        self.policy = ActorCritic(self.actor_dim, self.critic_dim, env.num_actions,
                                  cfg.actor_hidden, cfg.critic_hidden, cfg.init_std
                                  ).to(self.device)
        distributed.broadcast_module(self.policy)
        distributed.sync_normalizers(self.policy)
        self.generator = torch.Generator(device=self.device).manual_seed(
            distributed.rank_seed(seed) + 1)
        self.alg = PPO(self.policy, cfg, self.generator)
        self.storage = RolloutStorage(cfg.steps_per_env, env.num_envs, self.actor_dim,
                                      self.critic_dim, env.num_actions, self.device)
        self.iteration = 0
        self.env_steps = 0
        self.wall_s = 0.0  # training time over all sessions of this run
        self.writer = None
        if run_dir is not None:
            from torch.utils.tensorboard import SummaryWriter
            self.writer = SummaryWriter(str(run_dir))

    # --- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "task": self.env.name, "algo": "ppo", "robot": self.env.robot.name,
            "iteration": self.iteration, "env_steps": self.env_steps, "wall_s": self.wall_s,
            "model": self.policy.state_dict(), "optimizer": self.alg.optimizer.state_dict(),
            "learning_rate": self.alg.learning_rate, "config": self.run_config,
            "dims": {"actor": self.actor_dim, "critic": self.critic_dim,
                     "actions": self.env.num_actions},
        }

    def load_state_dict(self, ckpt: dict[str, Any]) -> None:
        self.policy.load_state_dict(ckpt["model"])
        distributed.broadcast_module(self.policy)
        self.alg.optimizer.load_state_dict(ckpt["optimizer"])
        self.alg.learning_rate = ckpt["learning_rate"]
        self.iteration, self.env_steps = ckpt["iteration"], ckpt["env_steps"]
        self.wall_s = ckpt.get("wall_s", 0.0)

    def save(self) -> Path:
        assert self.run_dir is not None
        return save_checkpoint(self.state_dict(), self.run_dir, self.iteration)

    def exportable_actor(self) -> torch.nn.Module:
        """A CPU copy (training may run on a GPU; export and deploy run on the CPU)."""
        return DeterministicActor(copy.deepcopy(self.policy).cpu())

    # --- learning ----------------------------------------------------------------------------
    def learn(self, total_env_steps: int, callback: Callback | None = None,
              progress: bool = True) -> dict[str, float]:
        env, cfg, policy, storage = self.env, self.cfg, self.policy, self.storage
        obs = env.get_observations()
        stats: dict[str, float] = {}
        episode_log = distributed.StepLog()  # per-step values stay on the device
        bar = tqdm(total=total_env_steps, initial=min(self.env_steps, total_env_steps),
                   unit="step", unit_scale=True, disable=not progress or not distributed.is_main(),
                   mininterval=1.0, dynamic_ncols=True)
        while self.env_steps < total_env_steps:
            start = time.perf_counter()
            curriculum = set_training_progress(env, self.env_steps)
            with torch.inference_mode():
                for _ in range(cfg.steps_per_env):
                    actor_obs, critic_obs = obs["policy"], obs["critic"]
                    policy.actor_norm.update(actor_obs)
                    policy.critic_norm.update(critic_obs)
                    dist = policy.distribution(actor_obs)
                    actions = dist.sample()
                    values = policy.value(critic_obs)
                    obs, rewards, dones, extras = env.step(actions)
                    # bootstrap time-outs: the cut-off future is worth the state's value
                    rewards = rewards + cfg.gamma * values * extras["time_outs"].float()
                    storage.add(actor_obs, critic_obs, actions, dist.log_prob(actions).sum(-1),
                                dist.mean, dist.stddev, values, rewards, dones)
                    episode_log.add(extras["log"])
                last_values = policy.value(obs["critic"])
            storage.finish(last_values, cfg.gamma, cfg.lam)
            stats = self.alg.update(storage)
            self.iteration += 1
            steps = cfg.steps_per_env * env.num_envs * distributed.world_size()  # all ranks
            self.env_steps += steps
            stats["mean_reward"] = distributed.mean(storage.rewards.mean()).item()
            for key, value in episode_log.means().items():
                stats[key.lstrip("/")] = value
            elapsed = time.perf_counter() - start
            self.wall_s += elapsed
            stats["steps_per_s"] = steps / elapsed
            stats.update({f"curriculum/{name}": frac for name, frac in curriculum.items()})
            if end_iteration(self, bar, stats, steps, callback):
                break
        bar.close()
        if self.run_dir is not None:
            self.save()
        return stats

