"""The batched environment every task builds on, following rsl_rl's VecEnv protocol.

`get_observations()` gives a TensorDict with the groups "policy" (what the robot senses, as
the deploy runtime will build it) and "critic" (that, noise-free, plus privileged simulator
state). `step(actions)` returns (observations, rewards, dones, extras) with
extras["time_outs"] (episodes cut by the time limit, to bootstrap) and extras["log"]. With
`final_observations` set (off-policy trainers set it), extras["final_obs"] also holds the last
observation of the envs that were done, rows in `dones.nonzero()` order: the returned
observation of a done env is already its post-reset one, and a cut episode bootstraps from the
state it ended in.

A task subclass supplies: its config, `policy_terms` (the contract's observation terms),
`signals()` (named sensor readings), the physics of one control step, rewards, terminations,
resets and the privileged critic terms. Everything is batched; no Python loop over envs.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict
from tensordict import TensorDict

from simreal.deploy.contract import ObsTerm, PolicyContract
from simreal.deploy.observation import ObservationBuilder
from simreal.robots import Robot


class TaskConfig(BaseModel):
    """Base of every task's typed config: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")
    episode_s: float = 5.0


class VecEnv(ABC):
    name: str = ""
    config_class: type[TaskConfig] = TaskConfig
    final_observations: bool = False  # put extras["final_obs"] in step()'s result

    def __init__(self, robot: Robot, cfg: TaskConfig, num_envs: int, seed: int,
                 backend: str = "mujoco", device: str | torch.device = "cpu"):
        """`backend` names the physics (sim/backends.py) and `device` where it and every
        tensor of the env live. A task builds its backend with `self.make_backend(...)`."""
        from simreal.sim.backends import check_device

        self.robot = robot
        self.cfg = cfg
        self.num_envs = num_envs
        self.backend_name = backend
        self.device = check_device(backend, device)
        self.num_actions = len(robot.actuator_names)
        self.dt = 1.0 / robot.spec.control.rate_hz
        self.decimation = robot.spec.control.decimation
        self.max_episode_length = round(cfg.episode_s / self.dt)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        zeros = functools.partial(torch.zeros, device=self.device)
        self.episode_length_buf = zeros(num_envs, dtype=torch.long)
        self.episode_return = zeros(num_envs)
        self.last_action = zeros(num_envs, self.num_actions)
        self.prev_action = zeros(num_envs, self.num_actions)
        self.success = zeros(num_envs, dtype=torch.bool)  # of each env's last episode
        self.obs_builder = ObservationBuilder(self.policy_terms(), self.num_actions, self.dt)
        self.critic_builder = ObservationBuilder(self.policy_terms(), self.num_actions, self.dt)
        self.action_clip = self.contract().action.clip
        self._obs: TensorDict | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _built_on_device(cls.__dict__["__init__"])

    def make_backend(self, mjcf_path: str | Path, nthread: int | None = None,
                     model: Any = None, **options: Any):
        """This env's physics: `num_envs` copies of the MJCF (or of `model`, compiled from it
        with additions) on the env's backend and device."""
        from simreal.sim.backends import make_backend

        return make_backend(self.backend_name, mjcf_path, self.num_envs, self.device,
                            model=model, nthread=nthread, **options)

    def on_device(self):
        """torch's default device set to the env's while task code runs, so that tensors a
        task makes with torch's factory functions land there (nothing to do on the CPU)."""
        if self.device.type == "cpu" or torch.get_default_device() == self.device:
            return nullcontext()
        return torch.device(self.device)

    # --- what a task provides -------------------------------------------------------------
    @abstractmethod
    def policy_terms(self) -> list[ObsTerm]: ...

    @abstractmethod
    def signals(self) -> dict[str, torch.Tensor]:
        """True named signals (float32) the policy terms read, from the simulator's sensors."""

    @abstractmethod
    def noisy_signals(self) -> dict[str, torch.Tensor]:
        """The signals as the robot's estimator gives them: what the actor and deploy see."""

    @abstractmethod
    def privileged(self) -> torch.Tensor:
        """(num_envs, k) privileged state the critic alone sees."""

    @abstractmethod
    def apply_actions(self, actions: torch.Tensor) -> None:
        """Run one control period of physics with the (clipped) actions."""

    @abstractmethod
    def rewards_and_terminations(self) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        """(reward, terminated, per-step log) after a control period."""

    @abstractmethod
    def reset_envs(self, ids: torch.Tensor) -> dict[str, Any]:
        """Randomize and re-initialize envs `ids`; return episode statistics to log."""

    @abstractmethod
    def contract(self) -> PolicyContract: ...

    def step_metrics(self) -> dict[str, torch.Tensor]:
        """Per-env task metrics of the last control step, for evaluation."""
        return {}

    def summarize(self, history: dict[str, torch.Tensor], lengths: torch.Tensor
                  ) -> dict[str, float]:
        """Task metrics of finished evaluation episodes from (T, N) step-metric history."""
        return {}

    # --- the protocol -----------------------------------------------------------------------
    def reset(self) -> TensorDict:
        if self.device.type != "cpu" and torch.get_default_device() != self.device:
            with self.on_device():
                return self.reset()
        self._reset(torch.arange(self.num_envs, device=self.device))
        self.obs_builder.reset()
        self.critic_builder.reset()
        self._obs = self._observe()
        return self._obs

    def get_observations(self) -> TensorDict:
        if self._obs is None:
            self.reset()
        return self._obs

    def step(self, actions: torch.Tensor) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
        if self.device.type != "cpu" and torch.get_default_device() != self.device:
            with self.on_device():
                return self.step(actions)
        if self._obs is None:
            self.reset()
        clip = self.action_clip
        actions = actions.to(torch.float32).clamp(-clip, clip)
        self.apply_actions(actions)
        # copied into the env's own buffers: the caller's tensor may be an inference tensor
        self.prev_action.copy_(self.last_action)
        self.last_action.copy_(actions)
        self.episode_length_buf += 1
        reward, terminated, log = self.rewards_and_terminations()
        time_out = (self.episode_length_buf >= self.max_episode_length) & ~terminated
        done = terminated | time_out
        self.episode_return += reward
        ids = done.nonzero(as_tuple=False).flatten()
        final = None
        if len(ids):
            if self.final_observations:  # before the reset overwrites the state
                final = self._final_observation(ids)
            log.update(self._reset(ids))
            self.obs_builder.reset(done)
            self.critic_builder.reset(done)
        self._obs = self._observe()
        extras = {"time_outs": time_out, "log": log}
        if final is not None:
            extras["final_obs"] = final
        return self._obs, reward, done, extras

    def _final_observation(self, ids: torch.Tensor) -> TensorDict:
        """Envs `ids`' observation of the current state, without advancing term histories."""
        saved = [(b, dict(b._history)) for b in (self.obs_builder, self.critic_builder)]
        try:
            return self._observe()[ids]
        finally:
            for builder, history in saved:
                builder._history = history

    def _reset(self, ids: torch.Tensor) -> dict[str, Any]:
        stats = self.reset_envs(ids)
        self.episode_length_buf[ids] = 0
        self.episode_return[ids] = 0.0
        self.last_action[ids] = 0.0
        self.prev_action[ids] = 0.0
        return stats

    def _observe(self) -> TensorDict:
        policy = self.obs_builder.build(self.noisy_signals())
        exact = self.critic_builder.build(self.signals())
        critic = torch.cat([exact, self.privileged()], dim=-1)
        return TensorDict({"policy": policy, "critic": critic}, batch_size=[self.num_envs])


def _built_on_device(init):
    """A task's __init__ run under torch.device(device) (its `device` keyword): the tensors it
    makes with torch's factory functions land on the env's device without naming it."""

    @functools.wraps(init)
    def wrapped(self, *args: Any, **kwargs: Any) -> None:
        device = torch.device(kwargs.get("device", "cpu"))
        if device.type == "cpu" or torch.get_default_device() == device:
            return init(self, *args, **kwargs)
        with torch.device(device):
            return init(self, *args, **kwargs)

    return wrapped
