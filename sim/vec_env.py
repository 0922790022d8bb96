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
`signals()` (named sensor readings), the physics of one control step, `reward_state()` (what
its reward terms read) with `reward_functions` (sim/rewards.py), terminations, resets and
the privileged critic terms (named, like the actor's). Everything is batched; no Python loop
over envs.

The task config names reward weights (`rewards: {term: weight}`) and per-signal observation
noise (`noise: {signal: std}`); a config that sets some of them keeps the task's defaults for
the others, and an unknown name is an error naming it. The base env sums the weighted terms
(`/reward/<term>` in the log: per episode, per second of `episode_s`) and gives the actor the
signals through the observation builder's perturbation hook, which adds the noise; the
critic builds the same terms from the exact signals.

A reward curriculum (`reward_curriculum: {start: {term: weight}, steps: N}`, training only)
moves the named terms' weights linearly from `start` to the config's `rewards` over the first N
env transitions; the trainer calls `set_training_progress(env_steps)` every iteration (a task
may follow it too: go2's randomization curriculum, sim/tasks/legged.py). With
`keep_reward_terms` set (an off-policy trainer that relabels its replay sets it),
extras["reward_terms"] holds each step's unweighted terms (columns in `reward_term_names`
order), from which `reward_from_terms` gives the reward under the current weights.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any, ClassVar

import torch
from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveInt,
    ValidationInfo,
    field_validator,
    model_validator,
)
from tensordict import TensorDict

from simreal.core.config import StrictModel
from simreal.deploy.contract import ObsTerm, PolicyContract
from simreal.deploy.observation import ObservationBuilder
from simreal.deploy.terms import Signals
from simreal.robots import Robot
from simreal.sim.rewards import RewardFn
from simreal.sim.threads import single_torch_thread

Weights = dict[str, float]  # reward term -> weight
NoiseStd = dict[str, NonNegativeFloat]  # signal -> standard deviation of its noise
# config settings that give an actor term's history length (control periods), as the tasks
# that have them name them: read back off a contract by `VecEnv.settings_from_contract`
HISTORY_SETTINGS = (("action_history", "last_action"), ("state_history", "joint_pos_rel"))


class Curriculum(StrictModel):
    """A linear schedule over training: `hold` env transitions (all envs, all ranks) at the
    start values, then `steps` transitions to the config's own."""

    steps: PositiveInt
    hold: NonNegativeInt = 0

    def fraction(self, env_steps: int) -> float:
        """How far from the start values to the config's (0 to 1) after `env_steps`."""
        return min(1.0, max(0.0, env_steps - self.hold) / self.steps)


class RewardCurriculum(Curriculum):
    """Training's reward weights start at `start` (terms not named keep their config weight)
    and reach the config's `rewards`. RLtools' habit: small costs first, so that staying
    alive and near the goal is learnt before smoothness is asked for."""

    start: Weights


class TaskConfig(StrictModel):
    """Base of every task's typed config: unknown keys and non-finite numbers are errors.

    A task's config class gives, as field defaults, every reward term's weight (`rewards`)
    and every noisy signal's standard deviation (`noise`), and its terms' parameters in
    `reward_params`."""

    episode_s: float = 5.0
    rewards: Weights = {}
    noise: NoiseStd = {}
    reward_curriculum: RewardCurriculum | None = Field(None, json_schema_extra={"train_only": True})

    @field_validator("episode_s")
    @classmethod
    def _positive_duration(cls, value: float) -> float:
        # inherited by every task's own episode_s (a subclass's default does not drop it)
        if value <= 0:
            raise ValueError("an episode lasts a positive number of seconds")
        return value

    @field_validator("rewards", "noise", mode="before")
    @classmethod
    def _onto_defaults(cls, value: Any, info: ValidationInfo) -> Any:
        """A partial mapping overrides the task's defaults by name; an unknown name is an
        error (a typo must not add a silent zero)."""
        if not isinstance(value, Mapping):
            return value
        defaults = cls.model_fields[info.field_name].default
        what = "reward term" if info.field_name == "rewards" else "noisy signal"
        for name in value:
            if name not in defaults:
                raise ValueError(f"unknown {what} {name!r} (known: {', '.join(defaults)})")
        return {**defaults, **value}

    @model_validator(mode="after")
    def _curriculum_names_terms(self) -> TaskConfig:
        if self.reward_curriculum is not None:
            for name in self.reward_curriculum.start:
                if name not in self.rewards:
                    raise ValueError(f"reward_curriculum.start: unknown reward term {name!r} "
                                     f"(known: {', '.join(self.rewards)})")
        return self

    @model_validator(mode="before")
    @classmethod
    def _old_reward_mapping(cls, data: Any) -> Any:
        """Configs before named terms had one `reward:` mapping of weights and parameters;
        say where each of its keys went instead of only refusing it."""
        if not isinstance(data, Mapping) or not isinstance(data.get("reward"), Mapping):
            return data
        weights = cls.model_fields["rewards"].default
        params_cls = getattr(cls.model_fields.get("reward_params"), "annotation", None)
        params = getattr(params_cls, "model_fields", {})
        moves = []
        for key in data["reward"]:
            new = ("rewards" if key in weights else "reward_params" if key in params
                   else None)
            moves.append(f"reward.{key} is now {new}.{key}" if new
                         else f"reward.{key} is no longer a setting")
        raise ValueError("the `reward` mapping was split into `rewards` (term weights, a "
                         "cost's negative) and `reward_params`: " + "; ".join(moves))


class VecEnv(ABC):
    name: str = ""
    config_class: type[TaskConfig] = TaskConfig
    final_observations: bool = False  # put extras["final_obs"] in step()'s result
    # reward term name -> function (sim/rewards.py); the config's `rewards` weighs them
    reward_functions: ClassVar[dict[str, RewardFn]] = {}
    # weights per second of simulated time (legged_gym's convention): times the period
    rewards_per_second: ClassVar[bool] = False
    # step() and reset() run their torch work on one thread (sim/threads.py says why)
    one_torch_thread: ClassVar[bool] = False

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
        self._init_reward_terms()
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

    def _init_reward_terms(self) -> None:
        declared, weights = set(self.reward_functions), self.cfg.rewards
        if declared != set(weights):  # a task's own defaults must name exactly its terms
            raise TypeError(f"{type(self).__name__}: config rewards {sorted(weights)} differ "
                            f"from reward_functions {sorted(declared)}")
        curriculum = self.cfg.reward_curriculum
        start = {**weights, **(curriculum.start if curriculum else {})}
        scale = self.dt if self.rewards_per_second else 1.0
        # a term weighted 0 from start to end is not computed at all
        self.reward_term_names = [n for n in weights if weights[n] != 0 or start[n] != 0]
        self._reward_fns = [self.reward_functions[n] for n in self.reward_term_names]
        as_tensor = functools.partial(torch.tensor, dtype=torch.float32, device=self.device)
        self._weights_end = as_tensor([weights[n] * scale for n in self.reward_term_names])
        self._weights_start = as_tensor([start[n] * scale for n in self.reward_term_names])
        self.reward_weights = self._weights_start.clone()
        self.keep_reward_terms = False  # put extras["reward_terms"] in step()'s result
        self._last_reward_terms: torch.Tensor | None = None
        self.episode_reward_terms = torch.zeros(self.num_envs, len(self.reward_term_names),
                                                device=self.device)

    @property
    def has_reward_curriculum(self) -> bool:
        return self.cfg.reward_curriculum is not None

    @property
    def has_curriculum(self) -> bool:
        """Whether `set_training_progress` changes anything (a reward or a task curriculum)."""
        return self.has_reward_curriculum

    def set_training_progress(self, env_steps: int) -> dict[str, float]:
        """Follow training to `env_steps` transitions: set the reward weights of a reward
        curriculum; returns each curriculum's progress (0 to 1) by name ("reward"; a task may
        add its own), empty without one."""
        c = self.cfg.reward_curriculum
        if c is None:
            return {}
        frac = c.fraction(env_steps)
        self.reward_weights = torch.lerp(self._weights_start, self._weights_end, frac)
        return {"reward": frac}

    def reward_from_terms(self, terms: torch.Tensor, terminated: torch.Tensor) -> torch.Tensor:
        """The reward of steps whose unweighted terms are `terms` (..., len(reward_term_names))
        under the current weights, shaped as `step()` shapes it (for relabelling replay: a
        task's `shape_reward` may read only `state["terminated"]`). A non-finite reward (a
        broken simulation) is 0."""
        weighted = terms * self.reward_weights.to(terms.device)
        reward = self._shaped(weighted, {"terminated": terminated})
        return torch.where(torch.isfinite(reward), reward, 0.0)

    def _shaped(self, weighted: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """The task's shaping of the sum of weighted terms (..., len(reward_term_names))."""
        named = {name: weighted[..., i] for i, name in enumerate(self.reward_term_names)}
        return self.shape_reward(weighted.sum(-1), named, state)

    # --- what a task provides -------------------------------------------------------------
    @abstractmethod
    def policy_terms(self) -> list[ObsTerm]: ...

    @abstractmethod
    def signals(self) -> dict[str, torch.Tensor]:
        """True named signals (float32) the policy terms read, from the simulator's sensors."""

    def perturb(self, signals: Signals) -> dict[str, torch.Tensor]:
        """The signals as the robot's estimator gives them (the actor's, through the
        observation builder's perturbation hook): each signal in the config's `noise` plus
        Gaussian noise of its standard deviation, quaternions renormalized. One draw per
        call for all of them, in the config's order, whatever the deviations (a seed fixes
        the rest of the trajectory whatever noise is configured)."""
        s = dict(signals)
        names = list(self.cfg.noise)
        if not names:
            return s
        dims = [s[k].shape[-1] for k in names]
        noise = torch.randn(self.num_envs, sum(dims), generator=self.generator)
        start = 0
        for name, dim in zip(names, dims, strict=True):
            value = s[name] + self.cfg.noise[name] * noise[:, start:start + dim]
            if name.endswith("orientation"):  # a unit quaternion
                value = torch.nn.functional.normalize(value, dim=-1)
            s[name] = value
            start += dim
        return s

    def noisy_signals(self) -> dict[str, torch.Tensor]:
        """The signals as the actor and deploy see them."""
        return self.perturb(self.signals())

    def privileged_terms(self) -> dict[str, torch.Tensor]:
        """Named (num_envs, k) privileged state the critic alone sees, in critic order."""
        raise NotImplementedError

    def privileged(self) -> torch.Tensor:
        return torch.cat(list(self.privileged_terms().values()), dim=-1)

    @abstractmethod
    def apply_actions(self, actions: torch.Tensor) -> None:
        """Run one control period of physics with the (clipped) actions."""

    def reward_state(self) -> dict[str, torch.Tensor]:
        """Named tensors the reward terms read, after a control period (once per step; it
        may advance per-step bookkeeping such as feet air time)."""
        raise NotImplementedError

    def terminations(self, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor,
                                                                     dict[str, Any]]:
        """(terminated, per-step log) after the rewards of the step were computed."""
        raise NotImplementedError

    def shape_reward(self, reward: torch.Tensor, terms: dict[str, torch.Tensor],
                     state: dict[str, torch.Tensor]) -> torch.Tensor:
        """The step's reward from the sum of its weighted terms (a task may clip it). It may
        read only `state["terminated"]`: a relabelled replay has kept nothing else."""
        return reward

    def rewards_and_terminations(self) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
        """(reward, terminated, per-step log) after a control period. A non-finite reward
        (a broken simulation) is 0 and ends the episode."""
        state = self.reward_state()
        p = getattr(self.cfg, "reward_params", None)
        raw = (torch.stack([fn(state, p) for fn in self._reward_fns], -1) if self._reward_fns
               else torch.zeros(self.num_envs, 0, device=self.device))
        self._last_reward_terms = raw
        weighted = raw * self.reward_weights
        self.episode_reward_terms += weighted
        reward = self._shaped(weighted, state)
        terminated, log = self.terminations(state)
        broken = ~torch.isfinite(reward)
        return torch.where(broken, 0.0, reward), terminated | broken, log

    @abstractmethod
    def reset_envs(self, ids: torch.Tensor) -> dict[str, Any]:
        """Randomize and re-initialize envs `ids`; return episode statistics to log."""

    @abstractmethod
    def contract(self) -> PolicyContract: ...

    @classmethod
    def settings_from_contract(cls, contract: PolicyContract) -> dict[str, Any]:
        """The task settings a policy's contract pins (the shape of what its actor sees), so
        that a policy is evaluated without its run's config.yaml. Here the history lengths a
        config class declares: `action_history` (last_action's) and `state_history`
        (joint_pos_rel's)."""
        terms = {t.name: t for t in contract.observations}
        fields = cls.config_class.model_fields
        return {setting: terms[term].history for setting, term in HISTORY_SETTINGS
                if setting in fields and term in terms}

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
        if self.one_torch_thread:
            with single_torch_thread():
                return self._reset_all()
        return self._reset_all()

    def _reset_all(self) -> TensorDict:
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
        if self.one_torch_thread:
            with single_torch_thread():
                return self._step(actions)
        return self._step(actions)

    def _step(self, actions: torch.Tensor
              ) -> tuple[TensorDict, torch.Tensor, torch.Tensor, dict]:
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
        if self.keep_reward_terms:
            extras["reward_terms"] = self._last_reward_terms
        if final is not None:
            extras["final_obs"] = final
        return self._obs, reward, done, extras

    def _final_observation(self, ids: torch.Tensor) -> TensorDict:
        """Envs `ids`' observation of the current state, without advancing term histories or
        integrals."""
        # term histories and integrals: building advances both, for every env
        saved = [(b, dict(b._history), dict(b._integral))
                 for b in (self.obs_builder, self.critic_builder)]
        try:
            return self._observe()[ids]
        finally:
            for builder, history, integral in saved:
                builder._history, builder._integral = history, integral

    def _reward_term_stats(self, ids: torch.Tensor) -> dict[str, Any]:
        """`/reward/<term>`: each term's sum over the finished episodes of envs `ids`, per
        second of `episode_s` (tensors: no host sync)."""
        ended = self.episode_length_buf[ids] > 0
        sums = self.episode_reward_terms[ids]
        self.episode_reward_terms[ids] = 0.0
        if not self.reward_term_names or not ended.any():  # none before the first episodes
            return {}
        per_s = sums[ended].mean(0) / self.cfg.episode_s
        return {f"/reward/{name}": per_s[i] for i, name in enumerate(self.reward_term_names)}

    def _reset(self, ids: torch.Tensor) -> dict[str, Any]:
        stats = self._reward_term_stats(ids)
        stats.update(self.reset_envs(ids))
        self.episode_length_buf[ids] = 0
        self.episode_return[ids] = 0.0
        self.last_action[ids] = 0.0
        self.prev_action[ids] = 0.0
        return stats

    def _observe(self) -> TensorDict:
        signals = self.signals()
        policy = self.obs_builder.build(signals, perturb=self.perturb)
        exact = self.critic_builder.build(signals)
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
