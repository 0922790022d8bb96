"""Legged velocity tracking on flat ground (go2-flat; legged_rough.py adds terrain), one task
for every legged robot: feet, joints, default pose, gains and contact sensors come from the
robot's description (robot.yaml), so another quadruped (any number of feet and joints per
leg) needs its robot folder and a registry entry that binds this class to it
(sim/registry.py), no task code. The config's defaults were tuned on the Go2; heights
(`init.height`, `reward_params.base_height_target`) are the ones a different robot sets.

The policy commands joint position targets (default pose + action_scale * a) that the motor
drivers' PD loop tracks at the physics rate inside MuJoCo (sim/actuators.py). It follows a
velocity command (forward, lateral m/s; yaw rate rad/s, held for the command or, for a
`heading_share` of commands, set by a heading: yaw rate = clamp(heading_gain * heading error)).
Rewards follow the legged_gym tradition
(Rudin et al. 2021): linear and angular velocity tracking, vertical velocity, roll/pitch rate,
orientation, base height, torques, joint accelerations, action rate, feet air time, unwanted
contacts, joint limits; the sum of a step is clipped at zero. An episode ends on trunk contact
or a tilt past `tilt_limit_deg`; time-outs (20 s) are bootstrapped by the trainer.

The actor sees what the robot senses, as deploy builds it: gyro, projected gravity (IMU
quaternion), velocity command, joint positions relative to the default pose, joint velocities,
last action; never the linear velocity. It sees them as a real robot's state arrives: an
episode's observation age (0-40 ms, whole physics steps) picks readings that old from a ring
buffer of each physics step's sensors, and the IMU's per-episode biases (gyro, accelerometer,
a tilt of the attitude estimate) and per-step noise are added. The critic adds, noise-free and
current: body linear velocity, foot contact forces, every randomized parameter as a named term
(normalized by its range), and terrain heights around each foot relative to it.

Domain randomization (per episode): contact friction (feet and ground, 0.3-1.5), restitution
and softness (solimp along robot.yaml's stiff-to-soft segment), trunk mass and CoM, the other
links' masses (inertias scaled with them) and CoMs, joint damping (0-2.5 N m s/rad),
frictionloss (0-0.3 N m) and armature, motor strength, kp and kd, joint (encoder) offsets,
command latency (0-40 ms), observation age (0-40 ms), IMU biases; per step: observation noise;
every `push_interval_s`: a random push (a change of the trunk's horizontal velocity). A
`randomization_curriculum` (training only) widens named ranges from narrow start ranges to
the config's as training goes on. The model fields are written per env (both backends) and
MuJoCo's derived constants recomputed for the reset envs only (set_const). The ranges of the
robot's uncertain physics come from robot.yaml's `physics` unless the config gives them; a
robot without them keeps its MJCF's values (the task checks those equal robot.yaml's
nominals, naming a disagreeing field).

Torch work per control step is a fixed, small set of batched ops on preallocated buffers: one
float32 copy of sensordata, views into it, and no host syncs but the resample/reset checks.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Literal

import mujoco
import torch
from pydantic import Field, model_validator

from simreal.core.config import StrictModel
from simreal.core.spatial import GRAVITY, quat_mul, quat_to_matrix, wrap_angle, yaw_of
from simreal.deploy.contract import (
    ActionSpec,
    CommandFeedback,
    CommandRange,
    ObsTerm,
    PolicyContract,
)
from simreal.robots import Robot
from simreal.sim.actuators import PDActuators, check_physics
from simreal.sim.backend import compile_model
from simreal.sim.delays import SensorHistory
from simreal.sim.legs import LegModelError, leg_model
from simreal.sim.rewards import State, action_rate
from simreal.sim.vec_env import Curriculum, NoiseStd, TaskConfig, VecEnv, Weights

log = logging.getLogger(__name__)

# what `simreal train go2-flat` uses unless told otherwise. Measured on 2 cores, seed 0: PPO
# walks (lin_vel_error 0.145 m/s, 1% falls over 100 20 s episodes) after 8.7M steps (693 s),
# but per-command tracking (simreal eval --tracking) needs more: at 16M steps 5 of 8 rows met
# their targets, at 25M 7, at 50M (3874 s, ~12.9k steps/s) 7 (vx 1.0 m/s: 0.18 m/s error).
TRAIN_DEFAULTS = {
    "algo": "ppo",
    # Training-only narrowing of the hardest randomization (measured, seed 0, 16M steps): with
    # the full ranges (latency and observation age 0-40 ms, soft feet to solimp 0.015, joint
    # damping 0-2.5) PPO did not walk by 8.7M steps (eval lin_vel_error 0.76 m/s, 44% falls);
    # with these it walks (0.136 m/s, 3.4% falls over 1000 episodes, 1098 s on 2 cores).
    # Widening them to the full ranges for 12M more steps after 50M (a second stage) made
    # nominal tracking worse (3 of 8 rows) and --variant hard no better (0 of 8).
    # Since 2026-12-07 the default also widens latency, observation age and joint damping to
    # the ranges, gives the actor three actions and two states of history and the
    # leg-odometry velocity, and pays torque 10x less (under damping 2.5 a gait at the
    # commanded speed pays torque the tracking term barely pays back). Measured, seed 0, 36M
    # steps (5639 s on 2 cores): with the default command feedback it walks every model in
    # bench/transfer_go2.py without a fall (friction 1.5 aside), go2_other.xml success 0.78
    # and the hard variant 0.62, where the 50M-step policy of the settings before fell on both
    # (0.66 and 0.23); its gait is noisier on our nominal model (0.72 against 0.99).
    "ppo": {"envs": 1024, "steps": 36_000_000,
            "config": {"steps_per_env": 24, "epochs": 5, "minibatches": 4,
                       "actor_hidden": [128, 128], "critic_hidden": [128, 128],
                       "init_std": 1.0, "learning_rate": 1e-3, "entropy_coef": 0.01},
            "task_config": {"action_history": 3, "state_history": 2, "leg_odometry_tau": 0.1,
                            "rewards": {"torques": -2e-5},
                            "randomization": {"latency": [0.0, 0.04],
                                              "observation_age": [0.0, 0.02],
                                              "softness": [0.0, 0.2],
                                              "joint_damping": [0.0, 2.5]}}},
    # off-policy: the algorithms' own defaults (batch 4096, one update per vector step,
    # critics [256, 256]) with rewards scaled up: a step earns at most ~0.045 here
    "sac": {"envs": 1024, "steps": 20_000_000, "config": {"reward_scale": 10.0}},
    "td3": {"envs": 1024, "steps": 20_000_000, "config": {"reward_scale": 10.0}},
}

Range = tuple[float, float]


class CommandConfig(StrictModel):
    lin_vel_x: Range = (-1.0, 1.0)  # m/s, base frame
    lin_vel_y: Range = (-1.0, 1.0)
    heading: Range = (-math.pi, math.pi)  # rad, world yaw to turn to
    heading_gain: float = 0.5  # yaw rate command = gain * heading error, clamped
    yaw_rate_limit: float = 1.0  # rad/s
    # share of commands that turn to a heading; the others hold a yaw rate from `yaw_rate` for
    # the whole command (an operator's joystick, and the tracking table's held yaw commands)
    heading_share: float = Field(default=0.5, ge=0.0, le=1.0)
    yaw_rate: Range = (-1.0, 1.0)  # rad/s
    resample_s: float = 10.0
    zero_below: float = 0.2  # m/s: smaller horizontal commands become 0 (standing still)
    # share of commands with no horizontal velocity: turn in place at a held yaw rate, or turn
    # to a heading and stand. A uniform draw in [-1, 1]^2 falls below zero_below 3% of the
    # time, too rarely to learn the tracking table's yaw rows (turning in place)
    in_place_share: float = Field(default=0.0, ge=0.0, le=1.0)
    # hold this command (vx, vy m/s; yaw rate rad/s) for whole episodes: no resampling, no
    # heading mode (per-command tracking evaluation, simreal/evaluate.py)
    fixed: tuple[float, float, float] | None = None


class InitConfig(StrictModel):
    height: float = 0.35  # m above the ground under the spawn point
    joint_noise: float = 0.1  # rad, uniform around the default pose
    base_speed: float = 0.3  # m/s and rad/s, uniform per component


class RandomizationConfig(StrictModel):
    """Per-episode domain randomization. A range given as None is robot.yaml's
    (`physics.<name>.range`); a robot without that parameter keeps its MJCF's value."""

    enabled: bool = True
    # contact friction of the robot's geoms and the ground (MuJoCo takes the larger of a
    # pair's): None is physics.foot_friction.range, else (0.3, 1.5)
    friction: Range | None = None
    restitution: Range = (0.0, 0.3)  # as a contact damping ratio (see _damping_ratio)
    # contact softness: where on physics.foot_solimp's segment (0: its first end, stiff on the
    # Go2; 1: its second, soft) the robot's and the ground's solimp lie
    softness: Range = (0.0, 1.0)
    added_mass: Range = (-1.0, 2.0)  # kg on the trunk
    com_offset: float = 0.03  # m, uniform per axis
    link_mass_scale: Range = (0.8, 1.2)  # the other links' masses, inertias scaled alike
    link_com_offset: float = 0.01  # m, uniform per axis and link
    joint_damping: Range | None = None  # N m s/rad per joint; None: physics.joint_damping
    joint_frictionloss: Range | None = None  # N m per joint; None: physics.joint_frictionloss
    joint_armature: Range | None = None  # kg m^2 per joint; None: physics.joint_armature
    motor_strength: Range = (0.9, 1.1)
    kp_scale: Range = (0.9, 1.1)
    kd_scale: Range = (0.9, 1.1)
    joint_offset: float = 0.02  # rad, uniform per joint (encoder calibration)
    latency: Range = (0.0, 0.04)  # s, policy command to motor driver (at most the MJCF's)
    # s: how much older than the step's end the sensor readings the actor sees are (whole
    # physics steps; a ring buffer of past readings per env)
    observation_age: Range = (0.0, 0.04)
    gyro_bias: float = 0.02  # rad/s, uniform per axis
    accel_bias: float = 0.1  # m/s^2, uniform per axis
    tilt_bias: float = 0.02  # rad, the IMU attitude estimate's roll and pitch errors (uniform)
    push_interval_s: float = 8.0
    push_velocity: float = 0.5  # m/s, uniform per horizontal axis


class LeggedRewardParams(StrictModel):
    tracking_sigma: float = 0.25  # (m/s)^2 and (rad/s)^2 of exp(-err^2 / sigma)
    base_height_target: float = 0.30  # m above the terrain
    air_time_target: float = 0.5  # s
    soft_limit: float = 0.9  # fraction of the joint range that is free
    only_positive: bool = True  # clip each step's sum at zero


# Reward terms (legged_gym's): tracking_lin_vel, tracking_ang_vel: exp(-err^2 / sigma) of the
# horizontal velocity and yaw rate; lin_vel_z (m/s)^2; ang_vel_xy: roll and pitch rates
# squared; orientation: the horizontal part of gravity in the body frame, squared;
# base_height: (height above the terrain - target)^2; torques, joint_acc: squared sums;
# action_rate; feet_air_time: each touchdown's air time less its target, while a motion is
# commanded; collision: unwanted contacts (count); joint_limits: rad past the soft range.
def _joint_limits(s: State, p: LeggedRewardParams) -> torch.Tensor:
    lo, hi, q = s["joint_lower"], s["joint_upper"], s["joint_pos"]
    mid, half = (lo + hi) / 2, (hi - lo) / 2 * p.soft_limit
    return ((mid - half - q).clamp(min=0) + (q - (mid + half)).clamp(min=0)).sum(-1)


def _feet_air_time(s: State, p: LeggedRewardParams) -> torch.Tensor:
    return ((s["air_time"] - p.air_time_target) * s["first_contact"]).sum(-1) * s["moving"]


REWARDS = {
    "tracking_lin_vel": lambda s, p: torch.exp(-s["lin_vel_error_sq"] / p.tracking_sigma),
    "tracking_ang_vel": lambda s, p: torch.exp(-s["yaw_rate_error"].square()
                                               / p.tracking_sigma),
    "lin_vel_z": lambda s, p: s["base_lin_vel"][:, 2].square(),
    "ang_vel_xy": lambda s, p: s["angular_velocity"][:, :2].square().sum(-1),
    "orientation": lambda s, p: s["projected_gravity"][:, :2].square().sum(-1),
    "base_height": lambda s, p: (s["base_height"] - p.base_height_target).square(),
    "torques": lambda s, p: s["joint_effort"].square().sum(-1),
    "joint_acc": lambda s, p: s["joint_acc"].square().sum(-1),
    "action_rate": action_rate,
    "feet_air_time": _feet_air_time,
    "collision": lambda s, p: s["unwanted_contacts"],
    "joint_limits": _joint_limits,
}


# the fields of RandomizationConfig that are ranges, which a curriculum may narrow
RANGE_FIELDS = ("friction", "restitution", "softness", "added_mass", "link_mass_scale",
                "joint_damping", "joint_frictionloss", "joint_armature", "motor_strength",
                "kp_scale", "kd_scale", "latency", "observation_age")


class RandomizationCurriculum(Curriculum):
    """Training draws the named randomization ranges from `start` at first (say, narrow ones
    around the nominal robot, where walking is learnt quickly), then widens them linearly to
    the config's (robot.yaml's where the config gives None). The critic's terms stay scaled
    by the final ranges, so their meaning does not move."""

    start: dict[str, Range]


class FeedbackConfig(StrictModel):
    """The deploy runtime's integral trim of the velocity command (deploy/feedback.py),
    written into the contract; training itself does not see it."""

    # "auto": all three where leg odometry can model the robot's legs (sim/legs.py: sphere
    # feet named in robot.yaml), else the yaw rate alone (logged)
    axes: list[Literal["vx", "vy", "wz"]] | Literal["auto"] = Field(default="auto",
                                                                   min_length=1)
    gain: float = Field(default=1.0, gt=0)  # 1/s
    filter_s: float = Field(default=0.3, gt=0)  # s, low-pass of the measured velocity
    limit: float = Field(default=0.25, gt=0)  # m/s, the largest forward or lateral trim
    yaw_limit: float = Field(default=0.5, gt=0)  # rad/s, the largest yaw-rate trim
    # leg odometry's stance rule for vx, vy (sim/legs.py: load and height read truest on
    # damped joints)
    stance: Literal["torque", "height", "torque_height"] = "torque_height"


def feedback_spec(robot: Robot, fb: FeedbackConfig | None) -> CommandFeedback | None:
    """The contract's command feedback, its leg model built now (before training, not at
    export): "auto" falls back to the yaw rate on legs leg odometry cannot model; axes that
    name vx or vy are refused on them."""
    if fb is None:
        return None
    settings: dict[str, Any] = fb.model_dump(exclude={"stance"})
    auto = fb.axes == "auto"
    if auto:
        settings["axes"] = ["vx", "vy", "wz"]
    if {"vx", "vy"} & set(settings["axes"]):
        try:
            settings["legs"] = leg_model(compile_model(robot.mjcf_path), robot, fb.stance)
        except LegModelError as exc:
            if auto:
                log.info("command feedback on the yaw rate only: %s", exc)
                return CommandFeedback(**{**settings, "axes": ["wz"]})
            raise LegModelError(
                f"{exc}; command feedback on vx or vy measures speed by leg odometry: give the "
                "yaw rate only ('task.command_feedback.axes=[wz]', --command-feedback wz), "
                "'auto', or none ('task.command_feedback=null')") from None
    return CommandFeedback(**settings)


class LeggedConfig(TaskConfig):
    episode_s: float = 20.0
    tilt_limit_deg: float = 60.0
    contact_threshold: float = 1.0  # N: a touch sensor above it is a contact
    settle_s: float = 1.0  # tracking metrics skip this long after each command change
    # control periods of the actor's own past actions it sees (commands still in flight under
    # the command latency are part of the state)
    action_history: int = Field(default=1, ge=1)
    # control periods of the sensed state (gyro, gravity, joint positions and velocities) the
    # actor sees: with more than one it can infer what it is not told (joint damping, contact
    # softness, latency) from how its recent commands played out, as an adaptation module would
    state_history: int = Field(default=1, ge=1)
    # the actor also sees the trunk's velocity from leg odometry (robots/legs.py: the feet in
    # stance, from the sensed joint states and IMU, as deploy computes it), low-passed with
    # this time constant (s; the contract's leaky integral scaled by 1/tau is a first-order
    # filter); None: not seen. A blind actor's speed is otherwise open-loop (docs/SIM2SIM.md)
    leg_odometry_tau: float | None = Field(default=None, gt=0)
    # which feet it counts as standing: the loaded legs (joint torques) or the lowest feet
    leg_odometry_stance: Literal["torque", "height", "torque_height"] = "torque"
    # a loop the deploy runtime closes on the velocity command (yaw rate from the gyro; speed
    # from leg odometry); None: the policy's command as given (docs/SIM2SIM.md, "Command
    # feedback": on by default since 2026-12-07)
    command_feedback: FeedbackConfig | None = FeedbackConfig()
    success_lin_vel_error: float = 0.15  # m/s, for an episode's success (and no fall)
    commands: CommandConfig = CommandConfig()
    init: InitConfig = InitConfig()
    randomization: RandomizationConfig = RandomizationConfig()
    randomization_curriculum: RandomizationCurriculum | None = Field(
        None, json_schema_extra={"train_only": True})
    # sensor noise the actor sees: rad/s, quaternion components (renormalized), rad, rad/s
    noise: NoiseStd = {"angular_velocity": 0.1, "orientation": 0.02, "joint_pos": 0.01,
                       "joint_vel": 0.75}
    # per second of simulated time (each term is multiplied by the control period)
    rewards: Weights = {"tracking_lin_vel": 1.5, "tracking_ang_vel": 0.75, "lin_vel_z": -2.0,
                        "ang_vel_xy": -0.05, "orientation": -1.0, "base_height": -10.0,
                        "torques": -2e-4, "joint_acc": -2.5e-7, "action_rate": -0.01,
                        "feet_air_time": 0.25, "collision": -1.0, "joint_limits": -10.0}
    reward_params: LeggedRewardParams = LeggedRewardParams()
    foot_scan: float = Field(0.1, gt=0)  # m: heights at +-this around each foot (critic)

    @model_validator(mode="after")
    def _curriculum_names_ranges(self) -> LeggedConfig:
        if self.randomization_curriculum is not None:
            for name, (low, high) in self.randomization_curriculum.start.items():
                if name not in RANGE_FIELDS:
                    raise ValueError(f"randomization_curriculum.start: {name!r} is not a "
                                     f"randomization range (known: {', '.join(RANGE_FIELDS)})")
                if low > high:
                    raise ValueError(f"randomization_curriculum.start.{name}: low {low} > "
                                     f"high {high}")
        return self


def _damping_ratio(restitution: torch.Tensor) -> torch.Tensor:
    """Damping ratio of a contact spring that bounces back with this restitution (0 -> 1)."""
    log_e = torch.log(restitution.clamp(1e-6, 0.99))
    return (-log_e / torch.sqrt(math.pi ** 2 + log_e ** 2)).clamp(max=1.0)


class LeggedVelocity(VecEnv):
    """Bound to a robot and a task name by the registry (`...:LeggedVelocity@go2`)."""

    name = "legged-flat"
    robot_name = "go2"  # the robot its defaults were tuned on
    config_class = LeggedConfig
    cfg: LeggedConfig
    train_defaults = TRAIN_DEFAULTS
    reward_functions = REWARDS
    rewards_per_second = True
    one_torch_thread = True
    ground_geom = "floor"

    def __init__(self, robot: Robot, cfg: LeggedConfig, num_envs: int, seed: int,
                 nthread: int | None = None, backend: str = "mujoco",
                 device: str | torch.device = "cpu"):
        spec = robot.spec
        if spec.kind != "legged" or not spec.feet or not spec.joints:
            raise ValueError(f"{self.name} needs a legged robot with feet and joints, "
                             f"{robot.name} is {spec.kind} with {len(spec.feet)} feet")
        self.num_feet = len(spec.feet)
        self.default_pos = torch.tensor([j.default for j in spec.joints])
        self.action_scale = float(spec.action_scale)
        # the legs leg odometry computes with (the base class builds the terms)
        self._legs = None
        if cfg.leg_odometry_tau is not None:
            try:
                self._legs = leg_model(compile_model(robot.mjcf_path), robot,
                                       cfg.leg_odometry_stance)
            except LegModelError as exc:  # go2-flat's training default asks for it
                raise LegModelError(f"{exc}; or train without the actor's leg odometry: "
                                    "'task.leg_odometry_tau=null'") from None
        self._feedback_spec = feedback_spec(robot, cfg.command_feedback)
        super().__init__(robot, cfg, num_envs, seed, backend=backend, device=device)
        self.backend = self.make_backend(robot.mjcf_path, nthread, model=self._build_model())
        b, n = self.backend, num_envs
        self.actuators = PDActuators(robot, b)
        self._init_sensors()
        self._init_randomization()
        nj = self.num_actions
        self.commands = torch.zeros(n, 3)  # vx, vy, yaw rate: what the policy is told
        self.heading = torch.zeros(n)
        self.heading_mode = torch.ones(n, dtype=torch.bool)  # else a held yaw-rate command
        self.last_joint_vel = torch.zeros(n, nj)
        self.air_time = torch.zeros(n, self.num_feet)
        self.last_contact = torch.zeros(n, self.num_feet, dtype=torch.bool)
        self.origin = torch.zeros(n, 3)  # spawn point of the episode (ground level)
        self.prev_xy = torch.zeros(n, 2)
        self.since_command = torch.zeros(n, dtype=torch.long)  # steps since a command change
        self.track_err_sum = torch.zeros(n)
        self.track_err_count = torch.zeros(n)
        self.commanded_distance = torch.zeros(n)  # m the commands asked for this episode
        self.joint_lower = torch.tensor([float(x) for x in b.model.jnt_range[self._joint_ids, 0]])
        self.joint_upper = torch.tensor([float(x) for x in b.model.jnt_range[self._joint_ids, 1]])
        self.resample_steps = max(1, round(cfg.commands.resample_s / self.dt))
        self.settle_steps = round(cfg.settle_s / self.dt)
        self.push_steps = max(1, round(cfg.randomization.push_interval_s / self.dt))
        self.control_steps = 0
        self._sensors: dict[str, torch.Tensor] | None = None
        self._metrics: dict[str, torch.Tensor] | None = {}
        self._metric_inputs: tuple[torch.Tensor, ...] | None = None
        self.success = torch.zeros(n, dtype=torch.bool)
        self.cos_tilt_limit = math.cos(math.radians(cfg.tilt_limit_deg))
        self._init_privileged_parameters()

    # --- what a terrain variant overrides ---------------------------------------------------
    def _build_model(self) -> mujoco.MjModel | None:
        """The model to simulate: None compiles the robot's MJCF as it is (flat floor)."""
        return None

    def terrain_height(self, xy: torch.Tensor) -> torch.Tensor:
        """Ground height (...) at world points (..., 2)."""
        return torch.zeros(xy.shape[:-1])

    def spawn_origins(self, ids: torch.Tensor) -> torch.Tensor:
        """(len(ids), 3) ground points where envs `ids` start their next episode."""
        return torch.zeros(len(ids), 3)

    def end_episodes(self, ids: torch.Tensor, stats: dict[str, Any]) -> None:
        """Hook for a curriculum: envs `ids` finished an episode (before their reset)."""

    # --- set-up ------------------------------------------------------------------------------
    def _init_sensors(self) -> None:
        b, spec = self.backend, self.robot.spec
        m = b.model

        def cols(names: list[str]) -> slice | torch.Tensor:
            idx = [i for name in names for i in range(*b.sensor_slice(name).indices(10**9))]
            if idx == list(range(idx[0], idx[0] + len(idx))):
                return slice(idx[0], idx[0] + len(idx))
            return torch.tensor(idx)

        joints = spec.joints
        self._cols = {
            "orientation": cols([spec.sensors["orientation"]]),
            "angular_velocity": cols([spec.sensors["angular_velocity"]]),
            "linear_acceleration": cols([spec.sensors["linear_acceleration"]]),
            "linear_velocity": cols([spec.sensors["linear_velocity"]]),
            "position": cols([spec.sensors["position"]]),
            "joint_pos": cols([j.position_sensor for j in joints]),
            "joint_vel": cols([j.velocity_sensor for j in joints]),
            "joint_effort": cols([j.torque_sensor for j in joints]),
            "foot_force": cols([f.contact_sensor for f in spec.feet]),
            "foot_pos": cols([f.position_sensor for f in spec.feet]),
            "terminate_contact": cols(spec.contacts.terminate),
            "penalize_contact": cols(spec.contacts.penalize),
        }
        self._joint_ids = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, j.name)
                           for j in joints]
        self.trunk = b.body_id(spec.base_body)
        # free joint of the trunk: qpos[0:7], qvel[0:6]; the joints' qpos/qvel addresses
        self._qpos_adr = torch.tensor([int(m.jnt_qposadr[j]) for j in self._joint_ids])
        self._qvel_adr = torch.tensor([int(m.jnt_dofadr[j]) for j in self._joint_ids])
        d = self.cfg.foot_scan
        self._scan = torch.tensor([[0, 0], [d, 0], [-d, 0], [0, d], [0, -d]],
                                  dtype=torch.float32)

    def _init_randomization(self) -> None:
        b, m, n, spec = self.backend, self.backend.model, self.num_envs, self.robot.spec
        rnd, phys, nj = self.cfg.randomization, spec.physics, self.num_actions
        check_physics(self.robot, m)
        robot_geoms = [g for g in range(m.ngeom) if m.geom_bodyid[g] != 0]
        ground = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, self.ground_geom)
        if ground < 0:
            raise ValueError(f"{self.name}: the model has no ground geom {self.ground_geom!r}")
        self._contact_geoms = torch.tensor([ground, *robot_geoms])
        self.geom_friction = b.model_field("geom_friction")
        self.geom_solref = b.model_field("geom_solref")
        self.body_mass = b.model_field("body_mass")
        self.body_ipos = b.model_field("body_ipos")
        self.body_inertia = b.model_field("body_inertia")
        self.dof_damping = b.model_field("dof_damping")
        self.dof_frictionloss = b.model_field("dof_frictionloss")
        self.dof_armature = b.model_field("dof_armature")
        self.nominal_mass = float(m.body_mass[self.trunk])
        self.nominal_ipos = torch.tensor(m.body_ipos[self.trunk])  # on the env's device
        # the other links: every body of the robot but its base that has mass
        self._links = torch.tensor([i for i in range(1, m.nbody) if i != self.trunk
                                    and m.body_weldid[i] != 0 and m.body_mass[i] > 0],
                                   dtype=torch.long)
        links = self._links.cpu().numpy()
        self.nominal_link_mass = torch.tensor(m.body_mass[links])
        self.nominal_link_inertia = torch.tensor(m.body_inertia[links])
        self.nominal_link_ipos = torch.tensor(m.body_ipos[links])
        dofs = [int(m.jnt_dofadr[j]) for j in self._joint_ids]

        # the ranges drawn from: the config's, else robot.yaml's (None: not randomized)
        def resolve(name: str, fallback: Range | None = None) -> Range | None:
            own = getattr(rnd, name)
            if own is not None:
                return tuple(own)
            p = getattr(phys, "foot_friction" if name == "friction" else name)
            return tuple(p.range) if p is not None else fallback

        own = {"friction": (0.3, 1.5), "joint_damping": None, "joint_frictionloss": None,
               "joint_armature": None}  # robot.yaml's physics, else these
        self._ranges: dict[str, Range | None] = {
            name: resolve(name, own[name]) if name in own else tuple(getattr(rnd, name))
            for name in RANGE_FIELDS}
        # a randomization curriculum's start ranges, and how far training has widened them
        curriculum = self.cfg.randomization_curriculum
        self._range_start = dict(curriculum.start) if curriculum else {}
        for name in self._range_start:
            if self._ranges[name] is None:
                raise ValueError(f"randomization_curriculum.start.{name}: {self.robot.name}'s "
                                 f"robot.yaml has no physics.{name}, so it is not randomized")
        self._range_progress = 0.0 if curriculum else 1.0
        # contact softness: solimp along robot.yaml's segment, on the ground and robot geoms
        self.geom_solimp = b.model_field("geom_solimp") if phys.foot_solimp else None
        if phys.foot_solimp is not None:
            ends = torch.tensor(phys.foot_solimp.range, dtype=torch.float64)
            self._solimp_ends = ends
            span = ends[1] - ends[0]
            nominal = torch.tensor(phys.foot_solimp.nominal, dtype=torch.float64)
            k = int(span.abs().argmax())
            t0 = float((nominal[k] - ends[0, k]) / span[k]) if span[k] != 0 else 0.0
        else:
            t0 = 0.0
        # per env: what the episode drew (nominal values until the first draw)
        self.friction = torch.full((n,), float(phys.foot_friction.nominal) if phys.foot_friction
                                   else float(m.geom_friction[ground, 0]))
        self.restitution = torch.zeros(n)
        self.softness = torch.full((n,), t0)
        self.added_mass = torch.zeros(n)
        self.com_offset = torch.zeros(n, 3)
        self.link_mass_scale = torch.ones(n, len(links))
        self.link_com_offset = torch.zeros(n, len(links), 3)
        # float64 as the model's (a nominal written back is the MJCF's value exactly)
        self.joint_damping = torch.tensor(m.dof_damping[dofs]).repeat(n, 1)
        self.joint_frictionloss = torch.tensor(m.dof_frictionloss[dofs]).repeat(n, 1)
        self.joint_armature = torch.tensor(m.dof_armature[dofs]).repeat(n, 1)
        self._dofs = torch.tensor(dofs, dtype=torch.long)
        self.joint_offset = torch.zeros(n, nj)
        self.gyro_bias = torch.zeros(n, 3)
        self.accel_bias = torch.zeros(n, 3)
        self.tilt_bias = torch.zeros(n, 2)  # rad about the world's x and y axes
        self._tilt_quat = torch.zeros(n, 4)
        self._tilt_quat[:, 0] = 1.0
        # observation age: a ring of the last physics steps' sensor readings (float32)
        self.physics_dt = float(m.opt.timestep)
        max_age = round(rnd.observation_age[1] / self.physics_dt) if rnd.enabled else 0
        self.obs_age = torch.zeros(n, dtype=torch.long)  # physics steps
        self._history: SensorHistory | None = None
        if max_age > 0:
            self._history = SensorHistory(n, b.sensordata.shape[1], max_age, self.device)
            self._history.age = self.obs_age  # one tensor: the task draws it, the ring reads it

    # --- contract ---------------------------------------------------------------------------
    def policy_terms(self) -> list[ObsTerm]:
        h = self.cfg.state_history
        return [
            ObsTerm(name="angular_velocity", dim=3, scale=0.25, clip=100.0, history=h),
            ObsTerm(name="projected_gravity", dim=3, clip=100.0, history=h),
            ObsTerm(name="velocity_command", dim=3, clip=100.0),
            ObsTerm(name="joint_pos_rel", dim=self.num_actions, clip=100.0, history=h),
            ObsTerm(name="joint_vel", dim=self.num_actions, scale=0.05, clip=100.0, history=h),
            ObsTerm(name="last_action", dim=self.num_actions, clip=100.0,
                    history=self.cfg.action_history),
            *self._odometry_terms(),
        ]

    def _odometry_terms(self) -> list[ObsTerm]:
        tau = self.cfg.leg_odometry_tau
        if tau is None:
            return []
        return [ObsTerm(name="leg_odometry_velocity", dim=3, scale=1.0 / tau, clip=5.0,
                        history=self.cfg.state_history, integral_time_constant_s=tau,
                        legs=self._legs)]

    @classmethod
    def settings_from_contract(cls, contract: PolicyContract) -> dict[str, Any]:
        """History lengths and leg odometry, read off the actor's terms (see policy_terms)."""
        terms = {t.name: t for t in contract.observations}
        out = super().settings_from_contract(contract)
        odometry = terms.get("leg_odometry_velocity")
        out["leg_odometry_tau"] = odometry.integral_time_constant_s if odometry else None
        if odometry is not None and odometry.legs is not None:
            legs = odometry.legs
            out["leg_odometry_stance"] = ("torque_height" if legs.stance_torque and
                                          legs.stance_sigma else
                                          "torque" if legs.stance_torque else "height")
        return out

    def contract(self) -> PolicyContract:
        spec, c = self.robot.spec, self.cfg.commands
        n = self.num_actions
        return PolicyContract(
            task=self.name,
            robot=self.robot.name,
            robot_hash=self.robot.description_hash,
            control_rate_hz=spec.control.rate_hz,
            actuators=self.robot.actuator_names,
            observations=self.policy_terms(),
            action=ActionSpec(kind="joint_position", scale=[self.action_scale] * n,
                              offset=[j.default for j in spec.joints], clip=10.0,
                              kp=[j.kp for j in spec.joints], kd=[j.kd for j in spec.joints]),
            commands={"velocity_command": CommandRange(
                low=[c.lin_vel_x[0], c.lin_vel_y[0], -c.yaw_rate_limit],
                high=[c.lin_vel_x[1], c.lin_vel_y[1], c.yaw_rate_limit])},
            command_feedback=self._feedback_spec,
        )

    # --- signals ----------------------------------------------------------------------------
    def _read(self) -> dict[str, torch.Tensor]:
        """Named float32 views of this physics update's sensors (one copy per update), and
        what rewards and critic derive from the trunk's orientation, computed once: its
        rotation matrix `rot` (body to world), `lin_vel_body` (m/s, body frame) and
        `gravity` (the unit down vector in the body frame)."""
        if self._sensors is None:
            data = self.backend.sensordata.to(torch.float32)
            s = {k: data[:, c] for k, c in self._cols.items()}
            s["joint_pos"] = s["joint_pos"] + self.joint_offset  # what the encoders read
            s["foot_pos"] = s["foot_pos"].reshape(-1, self.num_feet, 3)
            rot = quat_to_matrix(s["orientation"])
            s["rot"] = rot
            # R^T v as a (1 x 3)(3 x 3) product per env; R^T (0, 0, -1) is minus R's last row
            s["lin_vel_body"] = torch.bmm(s["linear_velocity"][:, None, :], rot)[:, 0]
            s["gravity"] = -rot[:, 2, :]
            self._sensors = s
        return self._sensors

    def signals(self) -> dict[str, torch.Tensor]:
        s = self._read()
        return {
            "orientation": s["orientation"],
            "angular_velocity": s["angular_velocity"],
            "linear_acceleration": s["linear_acceleration"],
            "joint_pos": s["joint_pos"],
            "joint_vel": s["joint_vel"],
            "joint_effort": s["joint_effort"],
            "default_joint_pos": self.default_pos,
            "velocity_command": self.commands,
            "last_action": self.last_action,
        }

    def privileged_terms(self) -> dict[str, torch.Tensor]:
        s = self._read()
        feet = s["foot_pos"]  # (N, feet, 3)
        points = feet[:, :, None, :2] + self._scan  # (N, feet, 5, 2)
        heights = feet[:, :, None, 2] - self.terrain_height(points)  # foot above each point
        return {
            "base_lin_vel": s["lin_vel_body"],
            "foot_contact_force": s["foot_force"] * (1.0 / (self.nominal_mass * GRAVITY)),
            "foot_height_scan": heights.reshape(self.num_envs, -1),
            "base_height": self._base_height(s)[:, None],
            # what each env's episode drew, one named term per parameter (see
            # _privileged_parameters): views into one per-episode buffer
            **{name: self._episode_params[:, sl] for name, sl in self._param_slices.items()},
        }

    def _base_height(self, s: dict[str, torch.Tensor]) -> torch.Tensor:
        """The trunk's height above the terrain under it (one lookup per physics update)."""
        if "base_height" not in s:
            pos = s["position"]
            s["base_height"] = pos[:, 2] - self.terrain_height(pos[:, :2])
        return s["base_height"]

    def _privileged_parameters(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """The randomized parameters of envs `ids` as the critic sees them, by name: each
        centred on its range's middle and divided by its half-width (so within [-1, 1])."""
        rnd, a, r = self.cfg.randomization, self.actuators, self._ranges

        def norm(x: torch.Tensor, rng: Range | None, nominal: float = 0.0) -> torch.Tensor:
            if rng is None:
                return (x - nominal).float()
            mid, half = (rng[0] + rng[1]) / 2, max((rng[1] - rng[0]) / 2, 1e-9)
            return ((x - mid) / half).float()

        def sym(x: torch.Tensor, half: float) -> torch.Tensor:
            return (x / half if half > 0 else x).float()

        k = len(ids)
        return {
            "contact_friction": norm(self.friction[ids, None], r["friction"]),
            "contact_restitution": norm(self.restitution[ids, None], rnd.restitution),
            "contact_softness": norm(self.softness[ids, None], rnd.softness),
            "trunk_added_mass": norm(self.added_mass[ids, None], rnd.added_mass),
            "trunk_com_offset": sym(self.com_offset[ids], rnd.com_offset),
            "link_mass_scale": norm(self.link_mass_scale[ids], rnd.link_mass_scale),
            "link_com_offset": sym(self.link_com_offset[ids].reshape(k, -1),
                                   rnd.link_com_offset),
            "joint_damping": norm(self.joint_damping[ids], r["joint_damping"]),
            "joint_frictionloss": norm(self.joint_frictionloss[ids], r["joint_frictionloss"]),
            "joint_armature": norm(self.joint_armature[ids], r["joint_armature"]),
            "joint_offset": sym(self.joint_offset[ids], rnd.joint_offset),
            "motor_strength": norm(a.strength[ids], rnd.motor_strength),
            "kp_scale": norm(a.kp_scale[ids], rnd.kp_scale),
            "kd_scale": norm(a.kd_scale[ids], rnd.kd_scale),
            "command_latency": norm(a.latency[ids, None], rnd.latency),
            "observation_age": norm(self.obs_age[ids, None] * self.physics_dt,
                                    rnd.observation_age),
            "imu_bias": torch.cat([sym(self.gyro_bias[ids], rnd.gyro_bias),
                                   sym(self.accel_bias[ids], rnd.accel_bias),
                                   sym(self.tilt_bias[ids], rnd.tilt_bias)], -1),
        }

    def _init_privileged_parameters(self) -> None:
        terms = self._privileged_parameters(torch.arange(self.num_envs))
        self._param_slices: dict[str, slice] = {}
        start = 0
        for name, value in terms.items():
            self._param_slices[name] = slice(start, start + value.shape[1])
            start += value.shape[1]
        self._episode_params = torch.cat(list(terms.values()), -1)  # the critic's, per episode

    def _update_episode_params(self, ids: torch.Tensor) -> None:
        """The critic's per-episode parameters of envs `ids`, gathered once per episode."""
        self._episode_params[ids] = torch.cat(list(self._privileged_parameters(ids).values()),
                                              -1)

    # --- dynamics ---------------------------------------------------------------------------
    def apply_actions(self, actions: torch.Tensor) -> None:
        b = self.backend
        b.ctrl.copy_(actions * self.action_scale)  # target relative to the default pose
        self.control_steps += 1
        rnd = self.cfg.randomization
        if rnd.enabled and rnd.push_velocity > 0 and self.control_steps % self.push_steps == 0:
            push = (torch.rand(self.num_envs, 2, generator=self.generator) * 2 - 1)
            b.qvel[:, :2] += (push * rnd.push_velocity).double()
        if self._history is None:
            b.step(self.decimation)
        else:  # keeping each physics step's readings for the actor
            self._history.push(b.step_recording(self.decimation))
        self._sensors = None

    def perturb(self, signals: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The signals as the robot's estimator gives the actor them: readings as old as the
        episode's observation age, the IMU's biases, then the per-step noise (VecEnv)."""
        if not self.cfg.randomization.enabled:
            return super().perturb(signals)
        s = dict(signals)
        if self._history is not None:
            aged = self._history.aged()
            for key in ("orientation", "angular_velocity", "linear_acceleration", "joint_pos",
                        "joint_vel", "joint_effort"):
                s[key] = aged[:, self._cols[key]]
            s["joint_pos"] = s["joint_pos"] + self.joint_offset
        s["angular_velocity"] = s["angular_velocity"] + self.gyro_bias
        s["linear_acceleration"] = s["linear_acceleration"] + self.accel_bias
        s["orientation"] = quat_mul(self._tilt_quat, s["orientation"])  # a world-frame tilt
        return super().perturb(s)

    def reward_state(self) -> dict[str, torch.Tensor]:
        s, c = self._read(), self.cfg
        rot = s["rot"]
        self._set_yaw_rate_commands(torch.atan2(rot[:, 1, 0], rot[:, 0, 0]))
        cmd, v, omega = self.commands, s["lin_vel_body"], s["angular_velocity"]
        joint_vel = s["joint_vel"]
        joint_acc = (joint_vel - self.last_joint_vel) / self.dt
        self.last_joint_vel.copy_(joint_vel)

        contact = s["foot_force"] > c.contact_threshold
        contact_filt = contact | self.last_contact
        self.last_contact = contact
        first_contact = (self.air_time > 0) & contact_filt
        air_time = self.air_time + self.dt
        self.air_time = air_time * ~contact_filt
        cmd_speed = torch.linalg.vector_norm(cmd[:, :2], dim=-1)
        self.commanded_distance += cmd_speed * self.dt
        return {
            "lin_vel_error_sq": (cmd[:, :2] - v[:, :2]).square().sum(-1),
            "yaw_rate_error": cmd[:, 2] - omega[:, 2],
            "base_lin_vel": v, "angular_velocity": omega, "projected_gravity": s["gravity"],
            "base_height": self._base_height(s), "joint_effort": s["joint_effort"],
            "joint_acc": joint_acc, "action": self.last_action, "prev_action": self.prev_action,
            "air_time": air_time, "first_contact": first_contact, "moving": cmd_speed > 0.1,
            "unwanted_contacts": (s["penalize_contact"] > c.contact_threshold).sum(-1).float(),
            # true joint angles (the encoders read the offset ones) for the limit penalty
            "joint_pos": s["joint_pos"] - self.joint_offset,
            "joint_lower": self.joint_lower, "joint_upper": self.joint_upper,
        }

    def shape_reward(self, reward: torch.Tensor, terms: dict[str, torch.Tensor],
                     state: dict[str, torch.Tensor]) -> torch.Tensor:
        return reward.clamp(min=0.0) if self.cfg.reward_params.only_positive else reward

    def terminations(self, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor,
                                                                     dict[str, Any]]:
        s, c = self._read(), self.cfg
        pos = s["position"]
        terminated = ((s["terminate_contact"] > c.contact_threshold).any(-1)
                      | (s["gravity"][:, 2] > -self.cos_tilt_limit) | ~torch.isfinite(pos[:, 2]))

        # evaluation metrics of this step (evaluate.py reads them before the next step)
        lin_err = state["lin_vel_error_sq"].sqrt()
        settled = self.since_command >= self.settle_steps
        self.since_command += 1
        self.track_err_sum += lin_err * settled
        self.track_err_count += settled
        xy = pos[:, :2]
        # what step_metrics() turns into this step's metrics, only when asked (evaluation)
        self._metric_inputs = (lin_err, state["yaw_rate_error"], settled, terminated, xy,
                               self.prev_xy, state["joint_effort"], state["base_lin_vel"],
                               state["angular_velocity"])
        self._metrics = None
        self.prev_xy = xy.clone()

        due = (self.episode_length_buf % self.resample_steps) == 0
        if self.cfg.commands.fixed is None and due.any():  # after the rewards, which read
            # this step's commands
            self._resample_commands(due.nonzero().flatten())
        return terminated, {}

    def _update_heading_commands(self, q: torch.Tensor) -> None:
        self._set_yaw_rate_commands(yaw_of(q))

    def _set_yaw_rate_commands(self, yaw: torch.Tensor) -> None:
        """The yaw-rate command that turns each trunk (at world yaw `yaw`) to its heading."""
        c = self.cfg.commands
        if c.fixed is not None:  # a held yaw-rate command, no heading
            return
        err = wrap_angle(self.heading - yaw)
        rate = (c.heading_gain * err).clamp(-c.yaw_rate_limit, c.yaw_rate_limit)
        self.commands[:, 2] = torch.where(self.heading_mode, rate, self.commands[:, 2])

    def _resample_commands(self, ids: torch.Tensor) -> None:
        c, g, k = self.cfg.commands, self.generator, len(ids)
        if c.fixed is not None:
            self.commands[ids] = torch.tensor(c.fixed, dtype=self.commands.dtype)
            self.since_command[ids] = 0
            return
        u = torch.rand(k, 5, generator=g)
        vx = c.lin_vel_x[0] + (c.lin_vel_x[1] - c.lin_vel_x[0]) * u[:, 0]
        vy = c.lin_vel_y[0] + (c.lin_vel_y[1] - c.lin_vel_y[0]) * u[:, 1]
        xy = torch.stack([vx, vy], -1)
        xy *= (torch.linalg.vector_norm(xy, dim=-1, keepdim=True) >= c.zero_below)
        if c.in_place_share > 0:  # a separate draw: a share of 0 keeps the old command stream
            xy *= (torch.rand(k, 1, generator=g) >= c.in_place_share)
        self.commands[ids, :2] = xy
        self.heading[ids] = c.heading[0] + (c.heading[1] - c.heading[0]) * u[:, 2]
        self.heading_mode[ids] = u[:, 3] < c.heading_share
        rate = c.yaw_rate[0] + (c.yaw_rate[1] - c.yaw_rate[0]) * u[:, 4]
        # heading envs get theirs from the next step's heading error (reset zeroes it)
        self.commands[ids, 2] = torch.where(self.heading_mode[ids], self.commands[ids, 2], rate)
        self.since_command[ids] = 0

    # --- evaluation ---------------------------------------------------------------------------
    def step_metrics(self) -> dict[str, torch.Tensor]:
        if self._metrics is None:
            if self._metric_inputs is None:
                return {}
            lin_err, yaw_err, settled, fell, xy, prev_xy, torque, v, omega = \
                self._metric_inputs
            self._metrics = {
                "lin_vel_error": lin_err, "ang_vel_error": yaw_err.abs(),
                "settled": settled.float(), "fell": fell.float(),
                "distance": torch.linalg.vector_norm(xy - prev_xy, dim=-1),
                "torque": torque.abs().mean(-1),
                # measured forward, lateral (m/s, base frame) and yaw rate (rad/s): the
                # tracking table's signed velocities
                "velocity": torch.cat([v[:, :2], omega[:, 2:3]], -1),
            }
        return self._metrics

    def summarize(self, history: dict[str, torch.Tensor], lengths: torch.Tensor
                  ) -> dict[str, float]:
        """lin_vel_error (m/s) and ang_vel_error (rad/s): mean over steps at least settle_s
        after a command change; fall_rate: episodes that ended before their time; distance:
        mean horizontal path walked per episode (m); torque: mean |joint torque| (N m)."""
        t = torch.arange(history["fell"].shape[0])[:, None]
        valid = t < lengths[None]
        settled = valid & (history["settled"] > 0)
        return {
            "lin_vel_error": history["lin_vel_error"][settled].mean().item(),
            "ang_vel_error": history["ang_vel_error"][settled].mean().item(),
            "fall_rate": (history["fell"] * valid).amax(0).mean().item(),
            "distance": (history["distance"] * valid).sum(0).mean().item(),
            "torque": history["torque"][valid].mean().item(),
        }

    # --- resets -----------------------------------------------------------------------------
    def reset_envs(self, ids: torch.Tensor) -> dict[str, Any]:
        stats = self._episode_stats(ids)
        self._randomize(ids)
        n, g, c, b = len(ids), self.generator, self.cfg, self.backend
        origin = self.spawn_origins(ids)
        self.origin[ids] = origin
        # a batch reset clears time, warm starts and the actuators' command history (zero:
        # the default pose), which the command latency reads
        b.reset(ids)
        yaw = (torch.rand(n, generator=g) * 2 - 1) * math.pi
        base = torch.zeros(n, 7)
        base[:, :2] = origin[:, :2]
        base[:, 2] = origin[:, 2] + c.init.height
        base[:, 3] = torch.cos(yaw / 2)
        base[:, 6] = torch.sin(yaw / 2)
        joints = self.default_pos + (torch.rand(n, self.num_actions, generator=g) * 2 - 1
                                     ) * c.init.joint_noise
        vel = (torch.rand(n, 6, generator=g) * 2 - 1) * c.init.base_speed
        qpos = b.qpos[ids]
        # in the backend's float type (float64 on mujoco, float32 on mjwarp)
        qpos[:, :7] = base.to(qpos.dtype)
        qpos[:, self._qpos_adr] = joints.to(qpos.dtype)
        b.qpos[ids] = qpos
        qvel = torch.zeros(n, b.qvel.shape[1], dtype=b.qvel.dtype)
        qvel[:, :6] = vel.to(qvel.dtype)
        b.qvel[ids] = qvel
        b.ctrl[ids] = 0.0
        b.forward(ids, forces=True)  # contact forces and torques too
        self._sensors = None
        if self._history is not None:  # no older readings than the first
            self._history.fill(ids, b.sensordata[ids])

        self.prev_xy[ids] = origin[:, :2]
        self.last_joint_vel[ids] = 0.0
        self.air_time[ids] = 0.0
        self.last_contact[ids] = False
        self.track_err_sum[ids] = 0.0
        self.track_err_count[ids] = 0.0
        self.commanded_distance[ids] = 0.0
        self._resample_commands(ids)
        if self.cfg.commands.fixed is None:  # heading mode sets the yaw rate each step
            self.commands[ids, 2] *= ~self.heading_mode[ids]
        return stats

    def _episode_stats(self, ids: torch.Tensor) -> dict[str, Any]:
        lengths = self.episode_length_buf[ids]
        ended = lengths > 0
        if not ended.any():
            return {}
        timed_out = lengths >= self.max_episode_length
        err = self.track_err_sum[ids] / self.track_err_count[ids].clamp(min=1)
        ok = timed_out & (err < self.cfg.success_lin_vel_error)
        self.success[ids] = ok
        stats: dict[str, Any] = {
            "/episode/success_rate": ok[ended].float().mean(),
            "/episode/fall_rate": (~timed_out[ended]).float().mean(),
            "/episode/return": self.episode_return[ids][ended].mean(),
            "/episode/length_s": lengths[ended].float().mean() * self.dt,
        }
        tracked = ended & (self.track_err_count[ids] > 0)
        if tracked.any():
            stats["/episode/lin_vel_error"] = err[tracked].mean()
        self.end_episodes(ids[ended], stats)
        return stats

    def set_training_progress(self, env_steps: int) -> dict[str, float]:
        progress = super().set_training_progress(env_steps)
        if self.cfg.randomization_curriculum is not None:
            self._range_progress = self.cfg.randomization_curriculum.fraction(env_steps)
            progress["randomization"] = self._range_progress
        return progress

    @property
    def has_curriculum(self) -> bool:
        return super().has_curriculum or self.cfg.randomization_curriculum is not None

    def draw_range(self, name: str) -> Range:
        """The range episodes now draw `name` from: the config's, or under a randomization
        curriculum its start range widened by training's progress so far."""
        end = self._ranges[name]
        start = self._range_start.get(name)
        if start is None:
            return end
        t = self._range_progress
        return (start[0] + t * (end[0] - start[0]), start[1] + t * (end[1] - start[1]))

    def _randomize(self, ids: torch.Tensor) -> None:
        rnd, g, n = self.cfg.randomization, self.generator, len(ids)
        a, r, nj, d = self.actuators, self._ranges, self.num_actions, self.draw_range
        if not rnd.enabled:
            return

        def u(low: float, high: float, *shape: int) -> torch.Tensor:
            return low + (high - low) * torch.rand(n, *shape, generator=g)

        self.friction[ids] = u(*d("friction"))
        self.restitution[ids] = u(*d("restitution"))
        if self.geom_solimp is not None:
            self.softness[ids] = u(*d("softness"))
        self.added_mass[ids] = u(*d("added_mass"))
        self.com_offset[ids] = u(-rnd.com_offset, rnd.com_offset, 3)
        nl = len(self._links)
        self.link_mass_scale[ids] = u(*d("link_mass_scale"), nl)
        self.link_com_offset[ids] = u(-rnd.link_com_offset, rnd.link_com_offset, nl, 3)
        for name in ("joint_damping", "joint_frictionloss", "joint_armature"):
            if r[name] is not None:
                getattr(self, name)[ids] = u(*d(name), nj).double()
        self.joint_offset[ids] = u(-rnd.joint_offset, rnd.joint_offset, nj)
        a.strength[ids] = u(*d("motor_strength"), nj).double()
        a.kp_scale[ids] = u(*d("kp_scale"), nj).double()
        a.kd_scale[ids] = u(*d("kd_scale"), nj).double()
        a.offset[ids] = self.joint_offset[ids].double()
        a.latency[ids] = u(*d("latency")).double().clamp(max=a.max_latency)
        if self._history is not None:
            steps = torch.round(u(*d("observation_age")) / self.physics_dt).long()
            self.obs_age[ids] = steps.clamp(0, self._history.max_age_steps)
        self.gyro_bias[ids] = u(-rnd.gyro_bias, rnd.gyro_bias, 3)
        self.accel_bias[ids] = u(-rnd.accel_bias, rnd.accel_bias, 3)
        tilt = u(-rnd.tilt_bias, rnd.tilt_bias, 2)
        self.tilt_bias[ids] = tilt
        half = tilt / 2  # rotation vector (x, y, 0) -> quaternion
        angle = half.norm(dim=-1, keepdim=True)
        axis_sin = torch.where(angle > 0, torch.sin(angle) / angle.clamp(min=1e-12), 1.0)
        self._tilt_quat[ids] = torch.cat([torch.cos(angle), half * axis_sin,
                                          torch.zeros(n, 1)], -1)
        self.write_model(ids)

    def write_model(self, ids: torch.Tensor) -> None:
        """Write envs `ids`' parameters (this class's per-env tensors and the actuators') into
        the backend's per-env model fields, recompute MuJoCo's derived constants for them
        (masses, inertias, armature: set_const, `ids` only) and update the critic's terms."""
        rows, geoms = ids[:, None], self._contact_geoms[None, :]
        dtype = self.body_mass.dtype  # the backend's float type
        self.geom_friction[rows, geoms, 0] = self.friction[ids, None].to(dtype)
        self.geom_solref[rows, geoms, 1] = _damping_ratio(self.restitution[ids])[:, None].to(
            dtype)
        if self.geom_solimp is not None:
            ends = self._solimp_ends
            t = self.softness[ids, None].double()
            solimp = ends[0] + t * (ends[1] - ends[0])  # (k, 3)
            self.geom_solimp[rows, geoms, :3] = solimp[:, None, :].to(dtype)
        self.body_mass[ids, self.trunk] = (self.nominal_mass + self.added_mass[ids]).to(dtype)
        self.body_ipos[ids, self.trunk] = (self.nominal_ipos + self.com_offset[ids]).to(dtype)
        links, scale = self._links[None, :], self.link_mass_scale[ids].double()
        self.body_mass[rows, links] = (self.nominal_link_mass * scale).to(dtype)
        self.body_inertia[rows, links] = (self.nominal_link_inertia * scale[..., None]).to(dtype)
        self.body_ipos[rows, links] = (self.nominal_link_ipos
                                       + self.link_com_offset[ids].double()).to(dtype)
        dofs = self._dofs[None, :]
        self.dof_damping[rows, dofs] = self.joint_damping[ids].to(dtype)
        self.dof_frictionloss[rows, dofs] = self.joint_frictionloss[ids].to(dtype)
        self.dof_armature[rows, dofs] = self.joint_armature[ids].to(dtype)
        self.actuators.write(ids)
        # the C engine's mass matrix reads constants derived from the masses and armature:
        # without this an added mass would weigh but not resist acceleration (sim/backend.py)
        self.backend.set_const(ids)
        self._update_episode_params(ids)
