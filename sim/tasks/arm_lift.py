"""arm-lift: grasp a cube from the table and hold it at a commanded height.

Each episode draws a cube (edge, mass, friction), places it at rest at a random position and
yaw in front of the robot, and commands a lift height (of the cube's centre above the table).
The arm starts near its default pose with the gripper open.

Actor: joint states (noisy), the tool pose from their forward kinematics (as on the robot),
and the cube's pose as a camera-based estimator gives it: `delay_steps` control periods old
(per episode), with a per-episode bias and per-step noise; the lift height command; last
action. Critic: the same from the true signals (the cube's exact pose), plus the cube's
velocity, the fingertip touch forces and each finger's contact force on the cube, the cube's
size, mass and friction, the estimator's delay and the randomized joint parameters.

Success: over the last `hold_s` of the episode the cube's centre stays within
`success_tolerance` of the commanded height.
"""

from __future__ import annotations

import math
from typing import Any

import mujoco
import torch
from pydantic import Field

from simreal.core.config import StrictModel
from simreal.core.spatial import quat_mul
from simreal.deploy.contract import CommandRange, ObsTerm, PolicyContract
from simreal.deploy.terms import Signals
from simreal.robots import Robot
from simreal.sim.rewards import State, action_rate, joint_vel, tanh_kernel
from simreal.sim.sampling import yaw_quat
from simreal.sim.tasks.arm_base import NUM_ARM_JOINTS, ArmConfig, ArmTask, Range, solve_ik
from simreal.sim.tasks.arm_reach import DOWN
from simreal.sim.vec_env import Weights

# what `simreal train arm-lift` uses unless told otherwise (2 cores, seed 0, bench/train_arm.py,
# success from the default pose over 200-500 ONNX episodes). SAC without history: 35% at 3M
# steps, 76% at 6M (2849 s, sharing the cores; resumed once at 3M), unsteady between
# evaluations (50-69% over 4.5-5.9M). PPO: 23% at 18M steps (3144 s), 38-40% at 21-24M (about
# 7000 s), its grasp rate ~80% against SAC's ~95%.
# SAC's actor sees its last 3 actions and 2 periods of joint states: the command latency
# (0-20 ms, per episode) is hidden from it, and with one period of each its success fell from
# 84% at 0 ms to 62% at a fixed 20 ms (drops x3, missed grasps x5). With the history,
# seed 0, 6M steps, 2228 s: 79.6% over 500 episodes; bench/transfer_arm.py 81.4% nominal, 0.941x
# at 20 ms (0.811x without); seed 1: 83.4%, 85.7% nominal, 0.901x. Ten times the action-rate
# cost instead (reach's lever) did not help here: 59.4% nominal, 0.830x.
TRAIN_DEFAULTS: dict[str, Any] = {
    "algo": "sac",
    "ppo": {"envs": 512, "steps": 20_000_000,
            "config": {"steps_per_env": 32, "epochs": 5, "minibatches": 4,
                       "actor_hidden": [256, 128], "critic_hidden": [256, 128],
                       "init_std": 0.3, "learning_rate": 1e-3, "entropy_coef": 0.001},
            # start-state curriculum (evaluation starts from the default pose alone)
            "task_config": {"grasped_start": 0.2, "above_start": 0.3, "stagger_start": True}},
    # arm-reach's SAC settings with a wider actor and gamma 0.98 (a 1 s horizon: reach, grasp
    # and lift take longer than a reach)
    "sac": {"envs": 256, "steps": 6_000_000,
            "config": {"gamma": 0.98, "batch_size": 1024, "actor_hidden": [256, 128],
                       "critic_hidden": [256, 256], "actor_lr": 1e-3, "critic_lr": 1e-3,
                       "alpha_lr": 1e-3, "alpha_init": 0.01, "target_entropy_per_action": -2.0,
                       "tau": 0.05, "reward_scale": 0.1},
            "task_config": {"grasped_start": 0.2, "above_start": 0.3, "stagger_start": True,
                            "action_history": 3, "state_history": 2}},
}


# settings that shape training alone: `simreal eval` and the end-of-training evaluation drop
# them (simreal/api.py evaluation_config)
TRAIN_ONLY = {"train_only": True}


class CubeConfig(StrictModel):
    half_size: Range = (0.02, 0.03)  # m: edges of 4 to 6 cm (the fingers open to 8 cm)
    mass: Range = (0.05, 0.3)  # kg
    friction: Range = (0.5, 1.2)
    x: Range = (0.4, 0.6)  # m, base frame
    y: Range = (-0.15, 0.15)
    # a cube repeats every pi/2; within +-15 degrees the open hand (8 cm) passes around every
    # cube (at most 2 x 3 cm x (cos 15 + sin 15) = 7.3 cm) without turning the wrist, which
    # still helps; +-45 degrees needs the wrist aligned for the larger cubes
    yaw: float = Field(default=math.pi / 12, ge=0, le=math.pi)


class EstimatorConfig(StrictModel):
    """The camera-based pose estimate the actor gets."""

    delay_steps: tuple[int, int] = (1, 3)  # control periods, per episode (20-60 ms)
    position_bias: float = 0.003  # m, per episode per axis (calibration)
    position_noise: float = 0.003  # m, per step
    orientation_noise: float = 0.02  # quaternion components per step, renormalized


class LiftRewardParams(StrictModel):
    reach_scale: float = 0.2  # m
    reach_fine_scale: float = 0.03  # m
    align_scale: float = 0.02  # m
    # the hand is ready to close with the tool within ready_xy of the cube's centre
    # horizontally and less than ready_z above it
    ready_xy: float = 0.015  # m
    ready_z: float = 0.015  # m
    contact_force: float = 0.5  # N: a finger pressing on the cube harder grasps it
    lifted: float = 0.02  # m above its resting height: the cube counts as lifted
    goal_coarse_scale: float = 0.3  # m
    goal_scale: float = 0.05  # m


# Reward terms, d the tool-to-cube distance, e the cube's distance from the commanded height:
# reach_linear d (it pulls from the start pose, ~0.5 m away, where the tanh terms are flat),
# reach 1 - tanh(d / reach_scale), reach_fine 1 - tanh(d / reach_fine_scale);
# align 1 - tanh(d_xy / align_scale): the tool over the cube in the horizontal first (the
# fingers pass around the cube only from straight above; the 3-D terms alone left the hand
# hovering 5 cm off to a side);
# open: finger opening / full opening until the hand is ready to close (with a random
# gripper the hand came half-closed and pressed on the cube's top; paid only while the hand
# was far, the bonus made the policy hover just outside that distance);
# grasp: both fingers pressing on the cube, near the tool; lift: the cube lifted;
# goal_coarse, goal: lifted x (1 - tanh(e / goal_coarse_scale)), (1 - tanh(e / goal_scale));
# action_rate |da|^2, joint_vel |qdot|^2 (arm joints).
# Holding and lifting pay a few times what reaching does, not ten times: with larger weights
# the grasped starts' returns swamped the batch's advantages and the approach from the
# default pose was not learned (measured, 2.5M steps: the hand hovered away).
def _goal(s: State, scale: float) -> torch.Tensor:
    return s["lifted"] * tanh_kernel(s["goal_error"], scale)


REWARDS = {
    "reach_linear": lambda s, p: s["distance"],
    "reach": lambda s, p: tanh_kernel(s["distance"], p.reach_scale),
    "reach_fine": lambda s, p: tanh_kernel(s["distance"], p.reach_fine_scale),
    "align": lambda s, p: tanh_kernel(s["distance_xy"], p.align_scale),
    "open": lambda s, p: s["hand_open"],
    "grasp": lambda s, p: s["grasped"],
    "lift": lambda s, p: s["lifted"],
    "goal_coarse": lambda s, p: _goal(s, p.goal_coarse_scale),
    "goal": lambda s, p: _goal(s, p.goal_scale),
    "action_rate": action_rate,
    "joint_vel": joint_vel,
}


class LiftConfig(ArmConfig):
    # the gripper at 2 m per unit: a >= 0 opens the hand, a <= -0.02 closes it fully (the
    # safety layer clamps the target to the finger's travel): nearly binary, so exploration
    # closes it about as often as it opens it, and a policy does not settle on a half-closed
    # hand that neither passes around the cube nor holds it; at 0.1 m per unit nearly every
    # exploratory sample opened a grasp
    action_scale: list[float] = Field(
        default=[1.2, 1.5, 1.2, 1.5, 1.2, 1.5, 2.0, 2.0], min_length=8, max_length=8)
    episode_s: float = 5.0
    hold_s: float = 0.5
    lift_height: Range = (0.15, 0.3)  # m, the cube's centre above the table
    success_tolerance: float = 0.03  # m
    # training only (a start-state curriculum; evaluation uses the defaults, 0): the fraction
    # of episodes that start with the open hand over the cube, aligned with it, the tool
    # `above_height` above its centre (inverse kinematics), and the fraction that start with
    # the fingers closed on the cube resting on the table; so that grasping and lifting are
    # learned while the approach is
    above_start: float = Field(default=0.0, ge=0, le=1, json_schema_extra=TRAIN_ONLY)
    above_height: Range = Field(default=(0.0, 0.1), json_schema_extra=TRAIN_ONLY)  # m
    grasped_start: float = Field(default=0.0, ge=0, le=1, json_schema_extra=TRAIN_ONLY)
    # training only: a full reset (the first) draws each env's elapsed episode time, so that
    # episodes end at staggered times and a rollout mixes every phase of an episode (all
    # envs starting together make each rollout one phase: the grasp, or the long hold)
    stagger_start: bool = Field(default=False, json_schema_extra=TRAIN_ONLY)
    cube: CubeConfig = CubeConfig()
    estimator: EstimatorConfig = EstimatorConfig()
    rewards: Weights = {"reach_linear": -2.0, "reach": 1.0, "reach_fine": 1.0, "align": 1.0,
                        "open": 0.5, "grasp": 2.0, "lift": 2.0, "goal_coarse": 2.0,
                        "goal": 3.0, "action_rate": -0.01, "joint_vel": -0.001}
    reward_params: LiftRewardParams = LiftRewardParams()


class ArmLift(ArmTask):
    name = "arm-lift"
    config_class = LiftConfig
    cfg: LiftConfig
    train_defaults = TRAIN_DEFAULTS
    reward_functions = REWARDS
    sensor_roles = (*ArmTask.sensor_roles, "object_position", "object_orientation",
                    "object_linear_velocity", "object_angular_velocity", "finger_object_left",
                    "finger_object_right")

    def __init__(self, robot: Robot, cfg: LiftConfig, num_envs: int, seed: int,
                 nthread: int | None = None):
        super().__init__(robot, cfg, num_envs, seed, nthread)
        b, m, n = self.backend, self.backend.model, num_envs
        self.cube_body = b.body_id("cube")
        self.cube_geom = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "cube")
        joint = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, "cube")
        self._cube_qpos = int(m.jnt_qposadr[joint])
        self._cube_dof = int(m.jnt_dofadr[joint])
        self.geom_size = b.model_field("geom_size")
        self.geom_friction = b.model_field("geom_friction")
        self.body_mass = b.model_field("body_mass")
        self.body_inertia = b.model_field("body_inertia")
        self.half_size = torch.full((n,), 0.025)
        self.cube_mass = torch.full((n,), 0.1)
        self.friction = torch.ones(n)
        self.lift_height = torch.zeros(n, 1)
        est = cfg.estimator
        self.max_delay = est.delay_steps[1]
        # true cube poses of the last max_delay + 1 control steps, newest last
        self.pose_history = torch.zeros(n, self.max_delay + 1, 7)
        self.delay = torch.ones(n, dtype=torch.long)
        self.bias = torch.zeros(n, 3)
        self.hold_steps = torch.zeros(n, dtype=torch.long)
        self.window = max(1, round(cfg.hold_s / self.dt))
        self._rows = torch.arange(n)
        self._metrics: dict[str, torch.Tensor] = {}

    def _build_model(self) -> mujoco.MjModel:
        """The MJCF with the cube compiled at its largest size, so that the collision bounds
        cover every size an episode draws (per-env sizes only shrink it, then set_const)."""
        spec = mujoco.MjSpec.from_file(str(self.robot.mjcf_path))
        s = self.cfg.cube.half_size[1]
        spec.geom("cube").size = [s, s, s]
        return spec.compile()

    def reset(self):
        obs = super().reset()
        if self.cfg.stagger_start:
            self.episode_length_buf[:] = torch.randint(
                0, self.max_episode_length, (self.num_envs,), generator=self.generator)
        return obs

    # --- contract ---------------------------------------------------------------------------
    def policy_terms(self) -> list[ObsTerm]:
        return [*self.joint_terms(),
                ObsTerm(name="object_position_rel", dim=3, scale=2.0, clip=10.0),
                ObsTerm(name="object_rotation_matrix", dim=9, clip=1.0),
                ObsTerm(name="lift_height_error", dim=1, scale=5.0, clip=10.0),
                self.action_term()]

    def contract(self) -> PolicyContract:
        lo, hi = self.cfg.lift_height
        return self._contract({"lift_height": CommandRange(low=[lo], high=[hi])})

    # --- signals ----------------------------------------------------------------------------
    def signals(self) -> dict[str, torch.Tensor]:
        s = self.joint_signals()
        r = self.read()
        s["object_position"] = r["object_position"]
        s["object_orientation"] = r["object_orientation"]
        s["lift_height"] = self.lift_height
        return s

    def perturb(self, signals: Signals) -> dict[str, torch.Tensor]:
        """Encoder noise (ArmTask), then the cube's pose as the estimator gives it: delayed,
        biased, noisy."""
        s = super().perturb(signals)
        est, n = self.cfg.estimator, self.num_envs
        old = self.pose_history[self._rows, self.max_delay - self.delay]
        noise = torch.randn(n, 7, generator=self.generator)
        s["object_position"] = old[:, :3] + self.bias + est.position_noise * noise[:, :3]
        s["object_orientation"] = torch.nn.functional.normalize(
            old[:, 3:] + est.orientation_noise * noise[:, 3:], dim=-1)
        s["lift_height"] = self.lift_height
        return s

    def privileged_terms(self) -> dict[str, torch.Tensor]:
        r = self.read()
        force = torch.cat([r["finger_force_left"], r["finger_force_right"],
                           r["finger_object_left"][:, 1:], r["finger_object_right"][:, 1:]], -1)
        return {
            "object_linear_velocity": r["object_linear_velocity"],
            "object_angular_velocity": r["object_angular_velocity"] * 0.1,
            "finger_forces": (force / 10).clamp(max=5.0),
            "object_half_size": ((self.half_size - 0.025) * 100)[:, None],
            "object_mass": (self.cube_mass * 5)[:, None],
            "object_friction": self.friction[:, None],
            "estimator_delay": self.delay[:, None].float(),
            **self.actuator_privileged(),
        }

    # --- dynamics ---------------------------------------------------------------------------
    def apply_actions(self, actions: torch.Tensor) -> None:
        super().apply_actions(actions)
        r = self.read()
        self.pose_history = torch.roll(self.pose_history, -1, dims=1)
        self.pose_history[:, -1, :3] = r["object_position"]
        self.pose_history[:, -1, 3:] = r["object_orientation"]

    def reward_state(self) -> dict[str, torch.Tensor]:
        r, p = self.read(), self.cfg.reward_params
        obj = r["object_position"]
        dist = torch.linalg.vector_norm(obj - r["ee_position"], dim=-1)
        # each finger pressing on the cube itself (not the table), the cube near the tool and
        # between the fingers: their opening near its half-width (closed fingers pressing on
        # its top also touch it with both fingers; a policy learned to collect that reward)
        left = torch.linalg.vector_norm(r["finger_object_left"][:, 1:], dim=-1)
        right = torch.linalg.vector_norm(r["finger_object_right"][:, 1:], dim=-1)
        opening = r["finger2_pos"][:, 0]
        grasped = ((left > p.contact_force) & (right > p.contact_force)
                   & (dist < self.half_size + 0.02) & (opening > self.half_size - 0.005))
        height = obj[:, 2] - self.half_size  # above its resting height
        rel = r["ee_position"] - obj
        dist_xy = torch.linalg.vector_norm(rel[:, :2], dim=-1)
        ready = (dist_xy < p.ready_xy) & (rel[:, 2] < p.ready_z)
        return {**self.joint_reward_state(), "distance": dist, "distance_xy": dist_xy,
                "hand_open": ~ready * opening / self.upper[NUM_ARM_JOINTS],
                "grasped": grasped.float(), "height": height,
                "lifted": (height > p.lifted).float(),
                "goal_error": (obj[:, 2] - self.lift_height[:, 0]).abs(),
                "object_finite": torch.isfinite(obj).all(-1)}

    def terminations(self, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor,
                                                                     dict[str, Any]]:
        goal_err = state["goal_error"]
        inside = goal_err < self.cfg.success_tolerance
        self.hold_steps = torch.where(inside, self.hold_steps + 1, 0)
        broken = ~state["object_finite"]  # (the base env zeroes a non-finite reward)
        self._metrics = {"lift_height": state["height"], "height_error": goal_err,
                         "grasped": state["grasped"]}
        log = {"/reward/grasped": state["grasped"].mean().item(),
               "/reward/lifted": state["lifted"].mean().item(),
               "/reward/distance_m": state["distance"].mean().item()}
        return broken, log

    def step_metrics(self) -> dict[str, torch.Tensor]:
        return self._metrics

    def summarize(self, history: dict[str, torch.Tensor], lengths: torch.Tensor
                  ) -> dict[str, float]:
        """Over each episode's hold window: the cube's lift above its resting height (m), its
        distance from the commanded height (mean, p95); grasp_rate: episodes that held the
        cube between both fingers pressing on it at some step."""
        steps = history["lift_height"].shape[0]
        mask = self.window_mask(steps, lengths)
        valid = torch.arange(steps)[:, None] < lengths[None]
        err = history["height_error"][mask]
        return {"lift_height_mean": history["lift_height"][mask].mean().item(),
                "height_error_mean": err.mean().item(),
                "height_error_p95": torch.quantile(err, 0.95).item(),
                "grasp_rate": ((history["grasped"] * valid).amax(0) > 0).float().mean().item()}

    # --- resets -----------------------------------------------------------------------------
    def _randomize_cube(self, ids: torch.Tensor) -> None:
        c, g, n = self.cfg.cube, self.generator, len(ids)

        def u(low: float, high: float) -> torch.Tensor:
            return low + (high - low) * torch.rand(n, generator=g)

        self.half_size[ids] = s = u(*c.half_size)
        self.cube_mass[ids] = mass = u(*c.mass)
        self.friction[ids] = u(*c.friction)
        self.geom_size[ids, self.cube_geom] = s[:, None].double().expand(-1, 3)
        self.geom_friction[ids, self.cube_geom, 0] = self.friction[ids].double()
        self.body_mass[ids, self.cube_body] = mass.double()
        inertia = (2.0 / 3.0) * mass * s * s  # a solid cube of edge 2s
        self.body_inertia[ids, self.cube_body] = inertia[:, None].double().expand(-1, 3)
        self.backend.batch.set_const(ids=ids.numpy().astype("int32"))

    def _start_at_cube(self, ids: torch.Tensor, above: torch.Tensor, grasped: torch.Tensor,
                       pose: torch.Tensor) -> None:
        """Envs ids[above] start with the open hand over the cube (pose: its (n, 7) pose),
        aligned with its faces; ids[grasped] with the tool at its centre, the fingers closed
        on it. The arm's joints by inverse kinematics from the reset pose."""
        c, g, b = self.cfg, self.generator, self.backend
        pick = above | grasped
        rows, n = ids[pick], int(pick.sum())
        height = c.above_height[0] + (c.above_height[1] - c.above_height[0]) * torch.rand(
            n, generator=g)
        height = torch.where(grasped[pick], 0.0, height)
        position = pose[pick, :3] + torch.nn.functional.pad(height[:, None], (2, 0))
        # the cube's yaw (about z), folded to the nearest face: +-45 degrees
        cube_yaw = 2 * torch.atan2(pose[pick, 6], pose[pick, 3])
        yaw = torch.remainder(cube_yaw + math.pi / 4, math.pi / 2) - math.pi / 4
        orientation = quat_mul(yaw_quat(yaw), torch.tensor(DOWN).expand(n, 4))
        q = self.target[rows].clone()
        q[:, :NUM_ARM_JOINTS] = solve_ik(self.kinematics, q, position, orientation,
                                         self.lower, self.upper)
        opening = self.upper[NUM_ARM_JOINTS].expand(n).clone()
        grip = grasped[pick]
        opening[grip] = self.half_size[rows[grip]] - 0.0005  # pressing on the faces
        q[:, NUM_ARM_JOINTS] = opening
        qpos = b.qpos[rows]
        qpos[:, self._qpos_adr] = q.double()
        if self._finger2_qpos is not None:
            qpos[:, self._finger2_qpos] = opening.double()
        b.qpos[rows] = qpos
        q[grip, NUM_ARM_JOINTS] = self.lower[NUM_ARM_JOINTS]  # the gripper commanded closed
        self.hold_targets(rows, q)

    def reset_envs(self, ids: torch.Tensor) -> dict[str, Any]:
        ok = (self.episode_length_buf[ids] >= self.max_episode_length) & \
            (self.hold_steps[ids] >= self.window)
        stats = self.episode_stats(ids, ok)
        c, g, n, b = self.cfg, self.generator, len(ids), self.backend
        self.randomize_joints(ids)
        self._randomize_cube(ids)
        self.reset_joints(ids)
        u = torch.rand(n, 4, generator=g)
        yaw = (2 * u[:, 2] - 1) * c.cube.yaw
        pose = torch.zeros(n, 7)
        pose[:, 0] = c.cube.x[0] + (c.cube.x[1] - c.cube.x[0]) * u[:, 0]
        pose[:, 1] = c.cube.y[0] + (c.cube.y[1] - c.cube.y[0]) * u[:, 1]
        pose[:, 2] = self.half_size[ids]
        pose[:, 3] = torch.cos(yaw / 2)
        pose[:, 6] = torch.sin(yaw / 2)
        draw = torch.rand(n, generator=g)
        grasped = draw < c.grasped_start
        above = ~grasped & (draw < c.grasped_start + c.above_start)
        if (above | grasped).any():
            self._start_at_cube(ids, above, grasped, pose)
        qpos = b.qpos[ids]
        qpos[:, self._cube_qpos:self._cube_qpos + 7] = pose.double()
        b.qpos[ids] = qpos
        b.forward(ids, forces=True)  # contact sensors too
        self.start_history(ids)
        self._sensors = None
        lo, hi = c.lift_height
        self.lift_height[ids, 0] = lo + (hi - lo) * u[:, 3]
        est = c.estimator
        self.delay[ids] = torch.randint(est.delay_steps[0], est.delay_steps[1] + 1, (n,),
                                        generator=g)
        self.bias[ids] = est.position_bias * torch.randn(n, 3, generator=g)
        self.pose_history[ids] = pose[:, None, :].expand(-1, self.max_delay + 1, -1)
        self.hold_steps[ids] = 0
        return stats
