"""quadrotor-hover: fly to a target and hold it, from a random initial state.

Actions are four normalized rotor-speed commands (the contract maps a = 0 to the nominal
hover speed) through the link (sim/delays.py: late, or lost and held) and a first-order motor
model; MuJoCo receives each rotor's thrust. The actor sees what an onboard estimator gives
(position error, rotation matrix, linear and angular velocity, its last actions), with noise,
as old as the episode's observation age; the critic sees the same, current and without noise,
plus the true motor speeds, mass, inertia, thrust and motor-lag scales, the disturbance force
and the link's latency, age and loss.

An episode succeeds when, over its last second, the position error stays below 0.1 m and the
speed below 0.2 m/s, with no crash (leaving a 2 m sphere around the target, an upside-down
attitude, or spinning faster than the gyro's range ends the episode as a failure).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from pydantic import Field, ValidationInfo, field_validator

from simreal.core.config import StrictModel
from simreal.core.spatial import GRAVITY
from simreal.deploy.contract import ActionSpec, CommandRange, ObsTerm, PolicyContract
from simreal.robots import Robot
from simreal.sim import rotors
from simreal.sim.delays import CommandLink, SensorHistory
from simreal.sim.rewards import State, action_rate, alive, terminated
from simreal.sim.sampling import in_ball, tilted_quat, uniform
from simreal.sim.vec_env import NoiseStd, TaskConfig, VecEnv, Weights

# what `simreal train quadrotor-hover` uses unless told otherwise (measured on 2 cores)
# training's link: commands up to 30 ms late and up to half of them lost, states up to 30 ms
# old (LinkConfig); evaluation measures the task on the nominal link
TRAIN_LINK = {"link": {"latency": [0.0, 0.03], "observation_age": [0.0, 0.03],
                       "command_loss": [0.0, 0.5]}}

# what `simreal train quadrotor-hover` uses unless told otherwise (measured on 2 cores)
TRAIN_DEFAULTS = {
    # SAC: see docs/ARCHITECTURE.md for the figures; PPO peaked around 93-95% at 4M steps
    # (~105 s) before the link was randomized, not reliably (bench/compare_algos.py)
    "algo": "sac",
    "ppo": {"envs": 256, "steps": 4_000_000, "task_config": TRAIN_LINK,
            "config": {"steps_per_env": 16, "epochs": 4, "minibatches": 1, "value_clip": 20.0,
                       "critic_hidden": [64, 64], "init_std": 0.15}},
    # off-policy (train/sac.py, train/td3.py): few, cheap updates; see docs/ARCHITECTURE.md
    "sac": {"envs": 256, "steps": 1_500_000, "task_config": TRAIN_LINK,
            "config": {"batch_size": 1024, "actor_hidden": [64, 64], "critic_hidden": [128, 128],
                       "actor_lr": 1e-3, "critic_lr": 1e-3, "alpha_lr": 1e-3, "alpha_init": 0.01,
                       "tau": 0.05, "reward_scale": 0.1}},
    "td3": {"envs": 256, "steps": 800_000, "task_config": TRAIN_LINK,
            "config": {"batch_size": 1024, "actor_hidden": [64, 64], "critic_hidden": [128, 128],
                       "actor_lr": 1e-3, "critic_lr": 1e-3, "tau": 0.05, "reward_scale": 0.1}},
}


class InitConfig(StrictModel):
    position_radius: float = 1.0  # m from the target
    speed: float = 1.0  # m/s
    tilt_deg: float = 45.0
    angular_rate: float = 2.0  # rad/s


Range = tuple[float, float]


def _ordered(value: Range, info: ValidationInfo) -> Range:
    low, high = value
    if not 0 <= low <= high:
        raise ValueError(f"{info.field_name} must be (low, high) with 0 <= low <= high, "
                         f"got {value}")
    return value


class RandomizationConfig(StrictModel):
    """Per-episode multiplicative scales, uniform in (low, high), and the disturbance bound."""

    mass: Range = (0.9, 1.1)
    inertia: Range = (0.9, 1.1)
    thrust_coefficient: Range = (0.9, 1.1)
    motor_time_constant: Range = (0.5, 2.0)
    disturbance_force: float = 0.03  # N-per-N of weight, uniform in a ball

    _check = field_validator("mass", "inertia", "thrust_coefficient",
                             "motor_time_constant")(_ordered)


class LinkConfig(StrictModel):
    """The link between the policy and the motors, per episode uniform in (low, high) (see
    sim/delays.py). Nominal (all zero) unless set: training's defaults set them (TRAIN_DEFAULTS),
    and evaluation measures the task on the nominal link (a perturbation bench sets them)."""

    # s from the policy's command to the motors, and the age of the state the actor sees
    # (physics steps): together they span the ~50 ms from a state to the motors that a 20 ms
    # link each way gives (tests/assets/hil/delay20.yaml)
    latency: Range = (0.0, 0.0)
    observation_age: Range = (0.0, 0.0)
    # probability that a control period's command is lost and the motors hold the last one
    # received: 30% loss each way loses about half the periods' commands in lock-step
    command_loss: Range = (0.0, 0.0)
    # bursts of lost commands (s, uniform in (low, high)), starting at `loss_burst_rate` per
    # second: the link going silent for as long as the deploy node's watchdog holds the last
    # command (K periods) before it damps; (0, 0): none
    loss_burst: Range = (0.0, 0.0)
    loss_burst_rate: float = Field(default=0.0, ge=0)

    _check = field_validator("latency", "observation_age", "command_loss",
                             "loss_burst")(_ordered)

    @field_validator("command_loss")
    @classmethod
    def _below_one(cls, value: Range) -> Range:
        if value[1] >= 1:
            raise ValueError(f"command_loss must stay below 1, got {value}")
        return value


class HoverRewardParams(StrictModel):
    position_scale: float = 0.25  # m: the position term is exp(-err / position_scale)


# reward terms: alive (1), position (exp(-err / position_scale)), velocity (m/s),
# angular_velocity (rad/s), tilt (1 - cos tilt), action_rate (|a - a_prev|^2), crash (1 on a
# crash). A step's reward is never below 0 before a crash, so that ending an episode early
# never pays; a crash's step gets the crash term alone (shape_reward).
def _position(s: State, p: HoverRewardParams) -> torch.Tensor:
    return torch.exp(-s["position_error"] / p.position_scale)


REWARDS = {
    "alive": alive,
    "position": _position,
    "velocity": lambda s, p: s["speed"],
    "angular_velocity": lambda s, p: s["angular_rate"],
    "tilt": lambda s, p: 1 - s["cos_tilt"],
    "action_rate": action_rate,
    "crash": terminated,
}


class HoverConfig(TaskConfig):
    episode_s: float = 5.0
    target: tuple[float, float, float] = (0.0, 0.0, 1.0)
    # integral action: the actor also sees the leaky integral of the position error (time
    # constant in s), which a steady disturbance or a thrust mismatch builds up (with it, SAC's
    # steady hover error fell from 0.055 to 0.041 m in evaluation, and from 0.053 to 0.027 m
    # in HIL; null: off)
    integral_time_constant_s: float | None = Field(default=1.0, gt=0)
    # control periods of the actor's own past actions it sees: with commands up to ~50 ms
    # late (the link's randomization), the actions still in flight are part of the state
    action_history: int = Field(default=8, ge=1)
    crash_distance: float = 2.0  # m from the target
    # rad/s; the Crazyflie's gyro saturates at 2000 deg/s, and spinning faster makes the
    # explicit integrator unstable at this time step
    crash_angular_rate: float = 34.9
    success_position: float = 0.1  # m
    success_speed: float = 0.2  # m/s
    success_window_s: float = 1.0
    init: InitConfig = InitConfig()
    randomization: RandomizationConfig = RandomizationConfig()
    link: LinkConfig = Field(LinkConfig(), json_schema_extra={"train_only": True})
    # standard deviations of the estimator's errors: m, quaternion components (renormalized),
    # m/s, rad/s
    noise: NoiseStd = {"position": 0.005, "orientation": 0.01,
                               "linear_velocity": 0.02, "angular_velocity": 0.05}
    rewards: Weights = {"alive": 0.5, "position": 8.0, "velocity": -0.1,
                                 "angular_velocity": -0.02, "tilt": -0.2,
                                 "action_rate": -0.05, "crash": -10.0}
    reward_params: HoverRewardParams = HoverRewardParams()


class QuadrotorHover(VecEnv):
    name = "quadrotor-hover"
    robot_name = "crazyflie"
    config_class = HoverConfig
    cfg: HoverConfig
    train_defaults = TRAIN_DEFAULTS
    reward_functions = REWARDS

    def __init__(self, robot: Robot, cfg: HoverConfig, num_envs: int, seed: int,
                 nthread: int | None = None, backend: str = "mujoco",
                 device: str | torch.device = "cpu"):
        spec = robot.spec
        if spec.kind != "quadrotor" or spec.rotor_model is None:
            raise ValueError(f"{self.name} needs a quadrotor robot, {robot.name} is {spec.kind}")
        self.rotor = spec.rotor_model
        self.hover_fraction = math.sqrt(spec.mass * GRAVITY / (4 * self.rotor.max_thrust))
        super().__init__(robot, cfg, num_envs, seed, backend=backend, device=device)
        self.backend = self.make_backend(robot.mjcf_path, nthread)
        b = self.backend
        self.base = b.body_id(spec.base_body)
        self._sensors: dict[str, torch.Tensor] | None = None
        self._sensor_slices = {role: b.sensor_slice(name) for role, name in spec.sensors.items()}
        self.body_mass = b.model_field("body_mass")
        self.body_inertia = b.model_field("body_inertia")
        self.nominal_mass = self.body_mass[0, self.base].item()
        self.nominal_inertia = self.body_inertia[0, self.base].clone()
        n = num_envs
        self.target = torch.tensor(cfg.target, dtype=torch.float32).expand(n, 3).contiguous()
        self.rotor_speed = torch.zeros(n, 4)  # fraction of max rpm
        self.mass_scale = torch.ones(n)
        self.inertia_scale = torch.ones(n, 3)
        self.thrust_scale = torch.ones(n)
        self.tau_scale = torch.ones(n)
        self.disturbance = torch.zeros(n, 3)  # N, world frame
        # the link: commands late or lost on their way to the motors, readings that age
        link = cfg.link
        self.physics_dt = self.dt / self.decimation
        steps = lambda seconds: round(seconds / self.physics_dt)  # noqa: E731
        self.link = CommandLink(n, 4, self.decimation, steps(link.latency[1]), self.device)
        if link.loss_burst[1] > 0 and link.loss_burst_rate > 0:
            periods = (max(1, round(link.loss_burst[0] / self.dt)),
                       max(1, round(link.loss_burst[1] / self.dt)))
            self.link.burst_periods = periods
            self.link.burst_start.fill_(min(1.0, link.loss_burst_rate * self.dt))
        self.history: SensorHistory | None = None
        if steps(link.observation_age[1]) > 0:
            self.history = SensorHistory(n, b.sensordata.shape[1],
                                         steps(link.observation_age[1]), self.device)
        self.hold_steps = torch.zeros(n, dtype=torch.long)  # consecutive steps inside the goal
        self.window = round(cfg.success_window_s / self.dt)
        self.success = torch.zeros(n, dtype=torch.bool)  # set when an episode ends

    # --- contract --------------------------------------------------------------------------
    def policy_terms(self) -> list[ObsTerm]:
        terms = [
            ObsTerm(name="position_error", dim=3, clip=3.0),
            ObsTerm(name="rotation_matrix", dim=9, clip=1.0),
            ObsTerm(name="linear_velocity", dim=3, scale=0.5, clip=5.0),
            ObsTerm(name="angular_velocity", dim=3, scale=0.1, clip=5.0),
            ObsTerm(name="last_action", dim=4, clip=1.0, history=self.cfg.action_history),
        ]
        if self.cfg.integral_time_constant_s is not None:
            terms.append(ObsTerm(name="position_error_integral", dim=3, clip=1.0,
                                 integral_time_constant_s=self.cfg.integral_time_constant_s))
        return terms

    def contract(self) -> PolicyContract:
        h = self.hover_fraction
        r = self.cfg.init.position_radius
        target = self.cfg.target
        return PolicyContract(
            task=self.name,
            robot=self.robot.name,
            robot_hash=self.robot.description_hash,
            control_rate_hz=self.robot.spec.control.rate_hz,
            actuators=self.robot.actuator_names,
            observations=self.policy_terms(),
            # a = 0 is the nominal hover speed; a in [-1, 1] spans [2h - 1, 1] of max rpm
            action=ActionSpec(kind="rotor_speed", scale=[1 - h] * 4, offset=[h] * 4, clip=1.0),
            commands={"target_position": CommandRange(
                low=[t - r for t in target], high=[t + r for t in target])},
        )

    # --- signals ---------------------------------------------------------------------------
    def signals(self) -> dict[str, torch.Tensor]:
        # one float32 conversion of sensordata per physics update, then views into it
        if self._sensors is None:
            data = self.backend.sensordata.to(torch.float32)
            self._sensors = {role: data[:, sl] for role, sl in self._sensor_slices.items()}
        s = dict(self._sensors)
        s["target_position"] = self.target
        s["last_action"] = self.last_action
        return s

    def privileged_terms(self) -> dict[str, torch.Tensor]:
        weight = self.nominal_mass * GRAVITY
        return {
            "rotor_speed": self.rotor_speed,
            "mass_scale": self.mass_scale[:, None] - 1,
            "inertia_scale": self.inertia_scale - 1,
            "thrust_scale": self.thrust_scale[:, None] - 1,
            "motor_time_constant_scale": self.tau_scale[:, None] - 1,
            "disturbance_force": self.disturbance / weight,  # per N of weight
            # the link's timing, in control periods, and its loss probability
            "command_latency": self.link.latency[:, None] * (self.physics_dt / self.dt),
            "observation_age": self._observation_age()[:, None] * (self.physics_dt / self.dt),
            "command_loss": self.link.loss[:, None],
        }

    def _observation_age(self) -> torch.Tensor:
        if self.history is None:
            return torch.zeros(self.num_envs)
        return self.history.age.float()

    def perturb(self, signals: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The actor's signals: the sensor readings as old as the episode's observation age,
        then the estimator's noise (VecEnv.perturb)."""
        if self.history is None:
            return super().perturb(signals)
        aged = self.history.aged()
        s = dict(signals)
        for role, sl in self._sensor_slices.items():
            s[role] = aged[:, sl]
        return super().perturb(s)

    # --- dynamics --------------------------------------------------------------------------
    def apply_actions(self, actions: torch.Tensor) -> None:
        h = self.hover_fraction
        self.link.send(h + (1 - h) * actions, self.generator)  # the contract's action mapping
        # each physics step: the command in force after the link's latency, through the
        # first-order motor lag integrated exactly over the step (sim/rotors.py, which the HIL
        # robot shares), as thrust into MuJoCo
        alpha = rotors.lag_alpha(self.physics_dt, self.rotor.time_constant * self.tau_scale)
        b = self.backend
        for j in range(self.decimation):
            self.rotor_speed.copy_(rotors.lag_step(self.rotor_speed, self.link.at(j),
                                                   alpha[:, None]))
            b.ctrl[:] = rotors.thrust(self.rotor_speed, self.rotor.max_thrust,
                                      self.thrust_scale[:, None])
            b.xfrc_applied[:, self.base, :3] = self.disturbance
            if self.history is None:
                b.step(1)
            else:
                self.history.push(b.step_recording(1))
        self._sensors = None

    def reward_state(self) -> dict[str, torch.Tensor]:
        s = self.signals()
        err = torch.linalg.vector_norm(s["position"] - s["target_position"], dim=-1)
        speed = torch.linalg.vector_norm(s["linear_velocity"], dim=-1)
        rate = torch.linalg.vector_norm(s["angular_velocity"], dim=-1)
        q = s["orientation"]
        cos_tilt = 1 - 2 * (q[:, 1] ** 2 + q[:, 2] ** 2)  # body z . world z
        crashed = ((err > self.cfg.crash_distance) | (cos_tilt < 0) | ~torch.isfinite(err)
                   | (rate > self.cfg.crash_angular_rate))
        return {"position_error": err, "speed": speed, "angular_rate": rate,
                "cos_tilt": cos_tilt, "terminated": crashed, "action": self.last_action,
                "prev_action": self.prev_action}

    def shape_reward(self, reward: torch.Tensor, terms: dict[str, torch.Tensor],
                     state: dict[str, torch.Tensor]) -> torch.Tensor:
        # (the crash term is -0 except on a crash, where it replaces the step's reward)
        return torch.where(state["terminated"], terms.get("crash", 0.0), reward.clamp(min=0))

    def terminations(self, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor,
                                                                     dict[str, Any]]:
        err, speed = state["position_error"], state["speed"]
        inside = (err < self.cfg.success_position) & (speed < self.cfg.success_speed)
        self.hold_steps = torch.where(inside, self.hold_steps + 1, 0)
        self.position_error = err
        log = {"/reward/position_error_m": err.mean()}  # a tensor: no host sync per step
        return state["terminated"], log

    def step_metrics(self) -> dict[str, torch.Tensor]:
        """Per-env values of this control step, which evaluation summarizes."""
        return {"position_error": self.position_error}

    def summarize(self, history: dict[str, torch.Tensor], lengths: torch.Tensor
                  ) -> dict[str, float]:
        """Task metrics over each episode's last second (the hold phase), from (T, N) history."""
        err = history["position_error"]
        t = torch.arange(err.shape[0])[:, None]
        in_window = (t < lengths[None]) & (t >= lengths[None] - self.window)
        hold = err[in_window]
        return {"position_error_mean": hold.mean().item(),
                "position_error_p95": torch.quantile(hold, 0.95).item(),
                "crash_rate": (lengths < self.max_episode_length).float().mean().item()}

    def _succeeded(self, ids: torch.Tensor) -> torch.Tensor:
        """Whether envs `ids`, whose episodes ran to their end, met the goal."""
        return self.hold_steps[ids] >= self.window

    def _initial_state(self, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(position, quaternion, velocity, body angular velocity) of envs `ids`' start."""
        n, g, init = len(ids), self.generator, self.cfg.init
        pos = self.target[ids] + in_ball(n, init.position_radius, g)
        quat = tilted_quat(n, math.radians(init.tilt_deg), g)
        vel = in_ball(n, init.speed, g)
        ang = in_ball(n, init.angular_rate, g)  # body frame, as MuJoCo's free joint
        return pos, quat, vel, ang

    def reset_envs(self, ids: torch.Tensor) -> dict[str, Any]:
        n, g, c = len(ids), self.generator, self.cfg
        stats: dict[str, Any] = {}
        if self.episode_length_buf[ids].any():  # episodes that actually ran
            ended = self.episode_length_buf[ids] > 0
            timed_out = self.episode_length_buf[ids] >= self.max_episode_length
            ok = timed_out & self._succeeded(ids)
            self.success[ids] = ok
            stats["/episode/success_rate"] = ok[ended].float().mean().item()

            stats["/episode/crash_rate"] = (~timed_out[ended]).float().mean().item()
            stats["/episode/return"] = self.episode_return[ids][ended].mean().item()
        rnd = c.randomization
        self.mass_scale[ids] = uniform(n, *rnd.mass, g)
        self.inertia_scale[ids] = uniform(n, *rnd.inertia, g, dim=3)
        self.thrust_scale[ids] = uniform(n, *rnd.thrust_coefficient, g)
        self.tau_scale[ids] = uniform(n, *rnd.motor_time_constant, g)
        weight = self.nominal_mass * GRAVITY
        self.disturbance[ids] = in_ball(n, rnd.disturbance_force * weight, g)
        # in the backend's float type (float64 on mujoco, float32 on mjwarp)
        self.body_mass[ids, self.base] = (self.nominal_mass * self.mass_scale[ids]
                                          ).to(self.body_mass.dtype)
        self.body_inertia[ids, self.base] = (self.nominal_inertia * self.inertia_scale[ids]
                                             ).to(self.body_inertia.dtype)
        b = self.backend
        # MuJoCo's C engine reads the mass matrix from constants derived at compile time:
        # without this, a scaled mass weighs but does not resist thrust, and a scaled inertia
        # does not act at all (docs/SCALING.md)
        b.set_const(ids)
        link = c.link
        self.link.latency[ids] = torch.round(
            uniform(n, *link.latency, g) / self.physics_dt).long().clamp(
                max=self.link.max_latency_steps)
        self.link.loss[ids] = uniform(n, *link.command_loss, g)
        if self.history is not None:
            self.history.age[ids] = torch.round(
                uniform(n, *link.observation_age, g) / self.physics_dt).long().clamp(
                    0, self.history.max_age_steps)

        # No backend.reset(): this task writes all the state it depends on (qpos and qvel
        # here, ctrl and xfrc_applied every step; no activations, no contacts), and a
        # batch reset costs ~2 ms per call at 4096 envs (measured).
        pos, quat, vel, ang = self._initial_state(ids)
        b.qpos[ids] = torch.cat([pos, quat], dim=-1).to(b.qpos.dtype)
        b.qvel[ids] = torch.cat([vel, ang], dim=-1).to(b.qvel.dtype)
        b.forward(ids)
        self._sensors = None
        if self.history is not None:  # the envs' past is their initial state
            self.history.fill(ids, b.sensordata[ids].to(torch.float32))

        self.rotor_speed[ids] = self.hover_fraction
        self.link.reset(ids, torch.full((n, 4), self.hover_fraction))
        self.hold_steps[ids] = 0
        return stats
