"""quadrotor-track: follow a moving reference, a figure-eight or a random smooth path.

The hover task's robot, physics, link and randomization, with its target moving: each control
step the reference gives a position and a velocity (world frame), and the actor sees the
position error to it and the reference velocity (the deploy node takes both from one
nav_msgs/Odometry on `/reference`, published at the policy rate). The velocity reward
penalizes the speed relative to the reference.

References (`reference:`): the evaluation's is a figure-eight `size` wide (x) and tall (y)
about `target` (the hover's target is the figure's center), one lap per `period_s`,
x = sx/2 sin(wt + phase), y = sy/2 sin(2(wt + phase)), at a random phase. Training
(`TRAIN_REFERENCE`) also draws the figure-eight's scale, period and heading, sends a share of
the episodes along random smooth paths (Catmull-Rom splines through waypoints drawn in a ball
about the center, one every `waypoint_interval_s`) and holds another share still (a take-off
to a setpoint).

An episode succeeds when it ends without a crash and its mean position error over the last
lap (`period_s`) is below `success_position` (0.1 m); a crash is the hover's (2 m from the
reference, upside down, spinning past the gyro's range).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from pydantic import Field, model_validator

from simreal.core.config import StrictModel
from simreal.core.trajectories import figure_eight
from simreal.deploy.contract import CommandRange, ObsTerm, PolicyContract
from simreal.robots import Robot
from simreal.sim.sampling import in_ball, tilted_quat, uniform
from simreal.sim.tasks.quadrotor_hover import TRAIN_LINK, HoverConfig, QuadrotorHover

Range = tuple[float, float]

# training's references: the figure-eight varied, and half the episodes on random paths
TRAIN_REFERENCE = {"reference": {"random_paths": 0.4, "hover": 0.1, "scale": [0.5, 1.2],
                                 "period_s": [4.0, 8.0], "heading": True}}

TRAIN_DEFAULTS = {
    "algo": "sac",
    "sac": {"envs": 256, "steps": 5_000_000, "task_config": {**TRAIN_LINK, **TRAIN_REFERENCE},
            "config": {"batch_size": 1024, "actor_hidden": [64, 64], "critic_hidden": [128, 128],
                       "actor_lr": 1e-3, "critic_lr": 1e-3, "alpha_lr": 1e-3, "alpha_init": 0.01,
                       "tau": 0.05, "reward_scale": 0.1}},
    "td3": {"envs": 256, "steps": 5_000_000, "task_config": {**TRAIN_LINK, **TRAIN_REFERENCE},
            "config": {"batch_size": 1024, "actor_hidden": [64, 64], "critic_hidden": [128, 128],
                       "actor_lr": 1e-3, "critic_lr": 1e-3, "tau": 0.05, "reward_scale": 0.1}},
    "ppo": {"envs": 256, "steps": 8_000_000, "task_config": {**TRAIN_LINK, **TRAIN_REFERENCE},
            "config": {"steps_per_env": 16, "epochs": 4, "minibatches": 1, "value_clip": 20.0,
                       "critic_hidden": [64, 64], "init_std": 0.15}},
}


class ReferenceConfig(StrictModel):
    """The reference each episode follows (see the module's docstring)."""

    size: tuple[float, float] = (1.0, 0.5)  # m: the figure-eight's x and y extents
    period_s: Range = (5.0, 5.0)  # s per lap, uniform per episode
    scale: Range = (1.0, 1.0)  # of `size`, uniform per episode
    heading: bool = False  # a random yaw of the figure (else x along the world's x)
    # the shares of episodes on random smooth paths and holding a still reference (a random
    # point of the waypoint ball: a take-off to a setpoint, before a figure starts) instead
    # of the figure-eight
    random_paths: float = Field(0.0, ge=0.0, le=1.0)
    hover: float = Field(0.0, ge=0.0, le=1.0)
    waypoint_radius: float = Field(0.6, gt=0)  # m about the center
    waypoint_interval_s: Range = (1.5, 3.0)

    @model_validator(mode="after")
    def _shares(self) -> ReferenceConfig:
        if self.random_paths + self.hover > 1:
            raise ValueError(f"random_paths ({self.random_paths}) + hover ({self.hover}) "
                             "exceed 1")
        return self


class InitConfig(StrictModel):
    """The start about the reference's first point, moving with it: the hover's ranges (with
    starts within 0.6 m and 30 degrees the policy tracked as well but flipped when taking off
    from HIL's pad under 50 ms of link delay)."""

    position_radius: float = 1.0  # m
    speed: float = 1.0  # m/s relative to the reference
    tilt_deg: float = 45.0
    angular_rate: float = 2.0  # rad/s


class TrackConfig(HoverConfig):
    episode_s: float = 10.0  # two laps of the figure-eight
    # m about `target` that the contract admits as a reference position (and m/s each axis
    # as its velocity): a robot's node clamps commands to them
    command_reach: float = Field(1.0, gt=0)
    command_speed: float = Field(2.0, gt=0)
    reference: ReferenceConfig = Field(ReferenceConfig(), json_schema_extra={"train_only": True})
    init: InitConfig = InitConfig()  # type: ignore[assignment]
    success_position: float = 0.1  # m: mean error over the last lap


def catmull_rom(points: torch.Tensor, interval: torch.Tensor, t: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(position, velocity) at times t (N,) on the Catmull-Rom spline through points
    (N, K, 3), one every interval (N,) s, passing points[:, 1] at t = 0."""
    u = t / interval
    k = u.floor().long().clamp(0, points.shape[1] - 4)
    s = (u - k).clamp(0.0, 1.0)[:, None]
    idx = (k[:, None] + torch.arange(4, device=points.device))[..., None].expand(-1, -1, 3)
    p0, p1, p2, p3 = points.gather(1, idx).unbind(1)
    a, b = 2 * p1, p2 - p0
    c, d = 2 * p0 - 5 * p1 + 4 * p2 - p3, -p0 + 3 * p1 - 3 * p2 + p3
    position = 0.5 * (a + b * s + c * s ** 2 + d * s ** 3)
    velocity = 0.5 * (b + 2 * c * s + 3 * d * s ** 2) / interval[:, None]
    return position, velocity


class QuadrotorTrack(QuadrotorHover):
    name = "quadrotor-track"
    robot_name = "crazyflie"
    config_class = TrackConfig
    cfg: TrackConfig
    train_defaults = TRAIN_DEFAULTS

    def __init__(self, robot: Robot, cfg: TrackConfig, num_envs: int, seed: int,
                 nthread: int | None = None, backend: str = "mujoco",
                 device: str | torch.device = "cpu"):
        r = cfg.reference
        super().__init__(robot, cfg, num_envs, seed, nthread, backend, device)
        n = num_envs
        self.center = torch.tensor(cfg.target, dtype=torch.float32)
        self.target_velocity = torch.zeros(n, 3)
        # per env: which reference, and its parameters
        self.on_path = torch.zeros(n, dtype=torch.bool)
        self.size = torch.zeros(n, 2)
        self.omega = torch.ones(n)
        self.phase = torch.zeros(n)
        self.yaw = torch.zeros(n)
        self.interval = torch.ones(n)
        waypoints = math.ceil(cfg.episode_s / r.waypoint_interval_s[0]) + 4
        self.waypoints = torch.zeros(n, waypoints, 3)
        self.window = max(1, round(max(r.period_s) / self.dt))  # the last lap
        self.error_sum = torch.zeros(n)
        self.error_steps = torch.zeros(n)

    # --- contract --------------------------------------------------------------------------
    def policy_terms(self) -> list[ObsTerm]:
        terms = super().policy_terms()
        terms.insert(1, ObsTerm(name="target_velocity", dim=3, scale=0.5, clip=5.0))
        return terms

    def contract(self) -> PolicyContract:
        # the ranges depend on settings evaluation keeps (not on the train-only reference)
        c, reach, speed = self.cfg.target, self.cfg.command_reach, self.cfg.command_speed
        return super().contract().model_copy(update={"commands": {
            "target_position": CommandRange(low=[x - reach for x in c],
                                            high=[x + reach for x in c]),
            "target_velocity": CommandRange(low=[-speed] * 3, high=[speed] * 3)}})

    def signals(self) -> dict[str, torch.Tensor]:
        s = super().signals()
        s["target_velocity"] = self.target_velocity
        return s

    # --- the reference ---------------------------------------------------------------------
    def _reference(self, ids: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        size = self.size[ids]
        offset, velocity = figure_eight(t, size[:, 0], size[:, 1], self.omega[ids],
                                        self.phase[ids], self.yaw[ids])
        position = self.center + offset
        path = self.on_path[ids]
        if path.any():
            p_pos, p_vel = catmull_rom(self.waypoints[ids], self.interval[ids], t)
            position = torch.where(path[:, None], p_pos, position)
            velocity = torch.where(path[:, None], p_vel, velocity)
        return position, velocity

    def _advance_reference(self) -> None:
        ids = torch.arange(self.num_envs)
        t = self.episode_length_buf.float() * self.dt
        position, velocity = self._reference(ids, t)
        self.target.copy_(position)
        self.target_velocity.copy_(velocity)

    def _draw_reference(self, ids: torch.Tensor) -> None:
        n, g, r = len(ids), self.generator, self.cfg.reference
        u = torch.rand(n, generator=g)
        self.on_path[ids] = u < r.random_paths + r.hover  # a still reference is a path too
        scale = uniform(n, *r.scale, g)
        self.size[ids] = torch.tensor(r.size, dtype=torch.float32) * scale[:, None]
        self.omega[ids] = 2 * math.pi / uniform(n, *r.period_s, g)
        self.phase[ids] = uniform(n, -math.pi, math.pi, g)
        self.yaw[ids] = uniform(n, -math.pi, math.pi, g) if r.heading else 0.0
        self.interval[ids] = uniform(n, *r.waypoint_interval_s, g)
        k = self.waypoints.shape[1]
        points = (self.center + in_ball(n * k, r.waypoint_radius, g)).reshape(n, k, 3)
        still = u < r.hover
        self.waypoints[ids] = torch.where(still[:, None, None], points[:, :1], points)

    # --- episode ---------------------------------------------------------------------------
    def _initial_state(self, ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n, g, init = len(ids), self.generator, self.cfg.init
        self._draw_reference(ids)
        position, velocity = self._reference(ids, torch.zeros(n))
        self.target[ids] = position
        self.target_velocity[ids] = velocity
        pos = position + in_ball(n, init.position_radius, g)
        quat = tilted_quat(n, math.radians(init.tilt_deg), g)
        vel = velocity + in_ball(n, init.speed, g)
        ang = in_ball(n, init.angular_rate, g)
        return pos, quat, vel, ang

    def reward_state(self) -> dict[str, torch.Tensor]:
        self._advance_reference()  # the reference at this step's time, before what reads it
        state = super().reward_state()
        s = self.signals()
        state["speed"] = torch.linalg.vector_norm(s["linear_velocity"] - self.target_velocity,
                                                  dim=-1)
        return state

    def terminations(self, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor,
                                                                     dict[str, Any]]:
        terminated, log = super().terminations(state)
        last_lap = self.episode_length_buf > self.max_episode_length - self.window
        self.error_sum += torch.where(last_lap, state["position_error"], 0.0)
        self.error_steps += last_lap.float()
        return terminated, log

    def _succeeded(self, ids: torch.Tensor) -> torch.Tensor:
        mean = self.error_sum[ids] / self.error_steps[ids].clamp(min=1)
        return mean < self.cfg.success_position

    def reset_envs(self, ids: torch.Tensor) -> dict[str, Any]:
        stats = super().reset_envs(ids)
        self.error_sum[ids] = 0.0
        self.error_steps[ids] = 0.0
        return stats

    def summarize(self, history: dict[str, torch.Tensor], lengths: torch.Tensor
                  ) -> dict[str, float]:
        """The position error over each full episode's last lap (crashed episodes count in
        crash_rate only)."""
        err = history["position_error"]
        t = torch.arange(err.shape[0])[:, None]
        full = lengths >= self.max_episode_length
        in_lap = (t >= lengths[None] - self.window) & (t < lengths[None]) & full[None]
        lap = err[in_lap]
        result = {"crash_rate": (~full).float().mean().item()}
        if lap.numel():
            per_episode = (torch.where(in_lap, err, 0.0).sum(0)[full]
                           / in_lap.sum(0)[full].clamp(min=1))
            result.update(lap_error_mean=lap.mean().item(),
                          lap_error_p95=torch.quantile(lap, 0.95).item(),
                          lap_error_worst_episode=per_episode.max().item())
        return result
