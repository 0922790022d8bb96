"""The off-policy runner shared by SAC and TD3: collect, replay, update, log, checkpoint.

One iteration is `steps_per_iteration` steps of the vector env. After each step the new
transitions go through the n-step window into the replay buffer, and `updates_per_step`
gradient updates follow (a fraction accumulates: 0.5 is one update every other step). The
actor reads the "policy" observation group, the critics the "critic" group, each through its
own running normalizer (updated on collected observations, frozen inside an update, exported
with the actor).

Bootstrapping at the end of an episode: the observation the env returns for a done env is
already the post-reset one, so it must not be bootstrapped from. The runner sets the env's
`final_observations` flag and bootstraps a time-out from extras["final_obs"], the state the
cut episode actually reached. An env without that extra (e.g. another framework's VecEnv)
falls back to bootstrapping from the observation the last action was taken in, the
approximation rsl_rl's PPO makes (V(s_T) ~ V(s_{T-1}), close at a 100 Hz control rate).
Terminations never bootstrap.

Under a task's reward curriculum (sim/vec_env.py) the weights change as training goes on, and
the returns stored in the buffer would be those of old weights. With `relabel_rewards` the
buffer keeps each transition's unweighted reward terms per step (train/replay.py), and every
sampled batch's n-step return is recomputed at the current weights: the relabelling RLtools
does over its whole buffer, done per batch (a (batch, n, terms) product per update).

The replay buffer is not checkpointed (it is large and refills in seconds): a resumed run
refills `learning_starts` steps before updating again.
"""

from __future__ import annotations

import copy
import ctypes
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from pydantic import Field, model_validator
from torch import nn
from tqdm import tqdm

from simreal.core.config import StrictModel
from simreal.train import distributed
from simreal.train.checkpoint import save_checkpoint
from simreal.train.cuda_graph import GraphedUpdate
from simreal.train.modules import EmpiricalNormalization
from simreal.train.offpolicy_modules import CriticEnsemble, ExportActor, project_distribution
from simreal.train.progress import end_iteration, set_training_progress
from simreal.train.replay import NStepWindow, ReplayBuffer, relabelled

Callback = Callable[["OffPolicyRunner", dict[str, float]], bool]


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed blocks of up to 32 MB instead of handing them back to the OS.

    Every update allocates and frees the same activation tensors (MBs each); by default glibc
    maps large blocks fresh and unmaps them on free, so each update page-faults them back in:
    ~1,300 faults and ~20% of an update's CPU time at batch 1024 (measured). The knobs are
    mallopt's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD (as MALLOC_MMAP_THRESHOLD_ would set
    them); elsewhere than glibc this does nothing. Returns whether it applied.
    """
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_mmap_threshold, 32 << 20)
                and libc.mallopt(m_trim_threshold, 1 << 30))


class OffPolicyConfig(StrictModel):
    """What SAC and TD3 share. Sizes are per vector-env step unless they say transitions."""

    gamma: float = Field(0.99, gt=0, le=1)
    n_step: int = Field(3, ge=1)
    # rewards are multiplied by this before they are learned from: Adam moves a critic's
    # output by about its learning rate per update, so Q-values of hundreds take thousands
    reward_scale: float = Field(1.0, gt=0)
    batch_size: int = Field(4096, ge=1, le=65536)  # transitions per gradient update
    updates_per_step: float = Field(1.0, gt=0)  # gradient updates per vector-env step
    buffer_size: int = Field(1_000_000, ge=1)  # transitions
    learning_starts: int = Field(10, ge=0)  # vector-env steps collected before updating
    steps_per_iteration: int = Field(20, ge=1)  # between logs, callbacks and checkpoints
    actor_hidden: list[int] = [128, 128]
    critic_hidden: list[int] = [256, 256]
    num_critics: int = Field(2, ge=1)  # the target takes their minimum (clipped double Q)
    actor_lr: float = Field(3e-4, gt=0)
    critic_lr: float = Field(3e-4, gt=0)
    tau: float = Field(0.01, gt=0, le=1)  # Polyak step of the target networks
    layer_norm: bool = True  # in the critics
    # C51-style distributional critic: `num_atoms` atoms evenly spaced over [v_min, v_max]
    distributional: bool = False
    num_atoms: int = Field(51, ge=2)
    v_min: float = -100.0
    v_max: float = 100.0
    max_grad_norm: float = Field(0.0, ge=0)  # 0: no clipping
    compile: bool = False  # torch.compile the update (see docs/ARCHITECTURE.md: measured)
    # on a CUDA device, each update replays as a CUDA graph (train/cuda_graph.py); ignored on
    # the CPU, with `compile`, and under torchrun (the gradient all-reduce is not captured)
    cuda_graph: bool = True
    amp: bool = False  # bfloat16 autocast in the critics' hidden layers
    # under a task's reward curriculum, each sampled batch's returns are recomputed from the
    # reward terms the buffer keeps, at the current weights (False: as collected)
    relabel_rewards: bool = True
    device: str | None = None  # None: the env's device

    @model_validator(mode="after")
    def _check(self) -> OffPolicyConfig:
        if self.distributional and self.v_min >= self.v_max:
            raise ValueError(f"v_min ({self.v_min}) must be below v_max ({self.v_max})")
        return self


class CriticMath:
    """The critic's side of an update, scalar or distributional (C51), for any ensemble size.

    Scalar: the target is r + discount * (min over the target critics of Q' + shift) (clipped
    double Q) and each critic regresses to it. Distributional: the target critic whose
    distribution has the smallest mean is projected onto the atoms (the distributional form of
    the clipped double-Q minimum, as FastTD3 does) and each critic minimizes the cross-entropy
    to it. `shift` is SAC's entropy term, -alpha log pi(a'|s'), added to every atom.
    """

    def __init__(self, cfg: OffPolicyConfig, device: torch.device):
        self.distributional = cfg.distributional
        self.atoms = (torch.linspace(cfg.v_min, cfg.v_max, cfg.num_atoms, device=device)
                      if cfg.distributional else None)

    @property
    def outputs(self) -> int:
        return 1 if self.atoms is None else self.atoms.shape[0]

    def q(self, out: torch.Tensor) -> torch.Tensor:
        """(members, B) Q-values of critic outputs."""
        if self.atoms is None:
            return out
        return (torch.softmax(out.float(), dim=-1) * self.atoms).sum(-1)

    def target(self, target_out: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor,
               shift: torch.Tensor | None = None) -> torch.Tensor:
        if self.atoms is None:
            value = target_out.float().min(0).values
            if shift is not None:
                value = value + shift
            return reward + discount * value
        probs = torch.softmax(target_out.float(), dim=-1)  # (members, B, K)
        pick = (probs * self.atoms).sum(-1).argmin(0)  # (B,)
        chosen = probs[pick, torch.arange(probs.shape[1], device=probs.device)]
        return project_distribution(chosen, reward, discount, self.atoms, shift)

    def loss(self, out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Summed over the critics, each its mean over the batch."""
        if self.atoms is None:
            return (out.float() - target).square().mean(-1).sum()
        log_probs = torch.log_softmax(out.float(), dim=-1)
        return -(target * log_probs).sum(-1).mean(-1).sum()


class OffPolicyModel(nn.Module):
    """Every learned tensor of an agent: normalizers, actor, critics, targets (+ extras)."""

    def __init__(self, actor_dim: int, critic_dim: int, num_actions: int, actor: nn.Module,
                 cfg: OffPolicyConfig, critic_outputs: int):
        super().__init__()
        self.actor_norm = EmpiricalNormalization(actor_dim)
        self.critic_norm = EmpiricalNormalization(critic_dim)
        self.actor = actor
        self.critic = CriticEnsemble(critic_dim, num_actions, cfg.critic_hidden, cfg.num_critics,
                                     critic_outputs, cfg.layer_norm, cfg.amp)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)


class OffPolicyAgent:
    """What SAC and TD3 share: the model, one optimizer, autocast, compile, the step, and the
    update's frame: `update` = `_update_body(batch, update_actor)` (eager, or replayed as a
    CUDA graph) and the update count."""

    def __init__(self, cfg: OffPolicyConfig, device: torch.device):
        self.cfg, self.device = cfg, device
        self.critic_math = CriticMath(cfg, device)
        self.num_updates = 0
        self.model: OffPolicyModel
        self.optimizer: torch.optim.Optimizer
        self.graphed = (torch.device(device).type == "cuda" and cfg.cuda_graph
                        and not cfg.compile and not distributed.is_distributed())
        self._graphs: GraphedUpdate | None = None

    def _make_optimizer(self, groups: list[dict[str, Any]]) -> torch.optim.Optimizer:
        # fused Adam: one kernel for all parameters (measured fastest on CPU, see the docs);
        # capturable keeps its step count on the device, as a CUDA graph needs
        return torch.optim.Adam(groups, fused=True, capturable=self.graphed)

    def _update_actor_now(self) -> bool:
        raise NotImplementedError

    def _update_body(self, batch: dict[str, torch.Tensor], update_actor: bool
                     ) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One gradient update on `batch`; returns its statistics as tensors (no host sync)."""
        update_actor = self._update_actor_now()
        if self.graphed:
            if self._graphs is None:
                self._graphs = GraphedUpdate(self._update_body, self.model, self.optimizer)
            stats = self._graphs(batch, update_actor)
        else:
            stats = self._update_body(batch, update_actor)
        self.num_updates += 1
        return stats

    def drop_graphs(self) -> None:
        """Forget captured graphs (after state is loaded into new tensors: a resume)."""
        self._graphs = None

    def _maybe_compile(self, fn):
        return torch.compile(fn, dynamic=False) if self.cfg.compile else fn

    def _step(self, loss: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        # under torchrun: the ranks' mean gradient (a no-op on one process)
        distributed.all_reduce_gradients(distributed.optimizer_params(self.optimizer))
        if self.cfg.max_grad_norm > 0:
            for group in self.optimizer.param_groups:
                torch.nn.utils.clip_grad_norm_(group["params"], self.cfg.max_grad_norm)
        self.optimizer.step()

    def normalized(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """(actor obs, critic obs, next actor obs, next critic obs), normalized."""
        m = self.model
        with torch.no_grad():
            return (m.actor_norm(batch["obs/policy"]), m.critic_norm(batch["obs/critic"]),
                    m.actor_norm(batch["next/policy"]), m.critic_norm(batch["next/critic"]))

    def exportable_actor(self) -> nn.Module:
        return ExportActor(copy.deepcopy(self.model.actor_norm).cpu(),
                           copy.deepcopy(self.model.actor).cpu())

    def episodes_ended(self, done: torch.Tensor) -> None:
        """Per-env exploration state to renew for the envs that were reset (TD3's noise)."""


class OffPolicyRunner:
    """Runs an off-policy agent (`agent_class`) on a VecEnv; subclasses name the algorithm."""

    algo: str = ""
    agent_class: type = object

    def __init__(self, env: Any, cfg: OffPolicyConfig, run_dir: Path | None, seed: int,
                 run_config: dict[str, Any], checkpoint_every: int = 50):
        self.env, self.cfg, self.run_dir = env, cfg, run_dir
        self.run_config = run_config
        self.checkpoint_every = checkpoint_every
        self.device = torch.device(cfg.device) if cfg.device else torch.device(env.device)
        torch.manual_seed(distributed.rank_seed(seed))  # each rank explores differently
        env.final_observations = True  # see the module docstring
        keep_freed_memory()
        obs = env.get_observations()
        self.actor_dim, self.critic_dim = obs["policy"].shape[-1], obs["critic"].shape[-1]
        self.agent = self.agent_class(self.actor_dim, self.critic_dim, env.num_actions,
                                      env.num_envs, cfg, self.device)
        # under torchrun every rank starts from rank 0's weights, and the normalizers see
        # every rank's observations
        distributed.broadcast_module(self.agent.model)
        distributed.sync_normalizers(self.agent.model)
        self.generator = torch.Generator(device=self.device).manual_seed(
            distributed.rank_seed(seed) + 1)
        self.buffer: ReplayBuffer | None = None  # allocated by learn(): export needs none
        self.relabel = cfg.relabel_rewards and getattr(env, "has_reward_curriculum", False)
        if self.relabel:
            env.keep_reward_terms = True
        self.window = NStepWindow(cfg.n_step, cfg.gamma)
        self.iteration = 0
        self.env_steps = 0
        self.wall_s = 0.0
        self._credit = 0.0  # fractional updates owed
        self._collected = 0  # vector-env steps since this session started
        self._reward_sum = torch.zeros(())
        self.writer = None
        if run_dir is not None:
            from torch.utils.tensorboard import SummaryWriter
            self.writer = SummaryWriter(str(run_dir))

    # --- state --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "task": self.env.name, "algo": self.algo, "robot": self.env.robot.name,
            "iteration": self.iteration, "env_steps": self.env_steps, "wall_s": self.wall_s,
            "model": self.agent.model.state_dict(),
            "optimizer": self.agent.optimizer.state_dict(),
            "num_updates": self.agent.num_updates, "config": self.run_config,
            "dims": {"actor": self.actor_dim, "critic": self.critic_dim,
                     "actions": self.env.num_actions},
        }

    def load_state_dict(self, ckpt: dict[str, Any]) -> None:
        self.agent.model.load_state_dict(ckpt["model"])
        distributed.broadcast_module(self.agent.model)
        self.agent.optimizer.load_state_dict(ckpt["optimizer"])
        self.agent.drop_graphs()
        self.agent.num_updates = ckpt["num_updates"]
        self.iteration, self.env_steps = ckpt["iteration"], ckpt["env_steps"]
        self.wall_s = ckpt.get("wall_s", 0.0)

    def save(self) -> Path:
        assert self.run_dir is not None
        return save_checkpoint(self.state_dict(), self.run_dir, self.iteration)

    def exportable_actor(self) -> torch.nn.Module:
        return self.agent.exportable_actor()

    # --- learning ----------------------------------------------------------------------------
    def _make_buffer(self) -> ReplayBuffer:
        fields = {"obs/policy": self.actor_dim, "obs/critic": self.critic_dim,
                  "action": self.env.num_actions, "reward": 1, "discount": 1,
                  "next/policy": self.actor_dim, "next/critic": self.critic_dim}
        if self.relabel:
            n = self.cfg.n_step
            fields.update({"terms": n * len(self.env.reward_term_names), "step_discount": n,
                           "step_terminated": n})
        return ReplayBuffer(self.cfg.buffer_size, fields, self.device)

    def _bootstrap_obs(self, obs: dict[str, torch.Tensor], next_obs: dict[str, torch.Tensor],
                       done: torch.Tensor, extras: dict[str, Any]) -> dict[str, torch.Tensor]:
        """The observation each env's step led to: the final one for a done env."""
        if not bool(done.any()):
            return next_obs
        ids = done.nonzero(as_tuple=False).flatten()
        final = extras.get("final_obs")
        out = {}
        for group, value in next_obs.items():
            value = value.clone()
            if final is not None:
                value[ids] = final[group].to(self.device)
            else:  # approximation: the state the last action was taken in (module docstring)
                value[ids] = obs[group][ids]
            out[group] = value
        return out

    def _collect_step(self, obs: dict[str, torch.Tensor], episode_log: distributed.StepLog
                      ) -> dict[str, torch.Tensor]:
        env, agent, dev = self.env, self.agent, self.device
        with torch.no_grad():
            agent.model.actor_norm.update(obs["policy"])
            agent.model.critic_norm.update(obs["critic"])
            actions = agent.act(obs["policy"])
        step_obs, reward, done, extras = env.step(actions.to(env.device))
        next_obs = {g: step_obs[g].to(dev) for g in ("policy", "critic")}
        reward, done = reward.to(dev), done.to(dev)
        terminated = done & ~extras["time_outs"].to(dev)
        boot = self._bootstrap_obs(obs, next_obs, done, extras)
        terms = extras["reward_terms"].to(dev) if self.relabel else None
        transition = self.window.add(obs, actions, reward * self.cfg.reward_scale, terminated,
                                     done, boot, terms)
        if transition is not None:
            self.buffer.add(transition)
        agent.episodes_ended(done)
        self._reward_sum += reward.mean()
        episode_log.add(extras["log"])  # tensors stay on the device: no sync per step
        return next_obs

    def learn(self, total_env_steps: int, callback: Callback | None = None,
              progress: bool = True) -> dict[str, float]:
        env, cfg = self.env, self.cfg
        if self.buffer is None:
            self.buffer = self._make_buffer()
        obs = {g: env.get_observations()[g].to(self.device) for g in ("policy", "critic")}
        stats: dict[str, float] = {}
        episode_log = distributed.StepLog()
        bar = tqdm(total=total_env_steps, initial=min(self.env_steps, total_env_steps),
                   unit="step", unit_scale=True, disable=not progress or not distributed.is_main(),
                   mininterval=1.0, dynamic_ncols=True)
        while self.env_steps < total_env_steps:
            start = time.perf_counter()
            curriculum = set_training_progress(env, self.env_steps)
            self._reward_sum = torch.zeros((), device=self.device)
            last: dict[str, torch.Tensor] = {}
            updates = 0
            for _ in range(cfg.steps_per_iteration):
                obs = self._collect_step(obs, episode_log)
                self._collected += 1
                if self._collected < max(cfg.learning_starts, cfg.n_step):
                    continue
                self._credit += cfg.updates_per_step
                while self._credit >= 1.0:
                    batch = self.buffer.sample(cfg.batch_size, self.generator)
                    if self.relabel:
                        batch = relabelled(batch, cfg.n_step, cfg.reward_scale,
                                           env.reward_from_terms)
                    last = self.agent.update(batch)
                    self._credit -= 1.0
                    updates += 1
            self.iteration += 1
            steps = cfg.steps_per_iteration * env.num_envs * distributed.world_size()
            self.env_steps += steps
            elapsed = time.perf_counter() - start
            self.wall_s += elapsed
            # one host sync per iteration: the last update's figures
            stats = {k: float(v) for k, v in last.items()}
            stats["steps_per_s"] = steps / elapsed
            stats["updates_per_s"] = updates / elapsed
            stats["mean_reward"] = (float(distributed.mean(self._reward_sum))
                                    / cfg.steps_per_iteration)
            stats.update({f"curriculum/{name}": frac for name, frac in curriculum.items()})
            for key, value in episode_log.means().items():
                stats[key.lstrip("/")] = value
            if end_iteration(self, bar, stats, steps, callback):
                break
        bar.close()
        if self.run_dir is not None:
            self.save()
        return stats

