"""What the arm tasks (arm-reach, arm-lift) share: the Panda's joint position control,
its signals, the actor's view of the tool pose, and the per-episode randomization.

Actions are joint position targets: target_i = default_i + scale_i * a_i, a in [-1, 1] (the
contract's ActionSpec), tracked by the joint position controllers that MuJoCo runs at the
physics rate (PD with gravity compensation, sim/actuators.py). The last action is the gripper:
finger opening in metres, finger 2 coupled. Before the controllers see a target it is clamped
as the deploy node's safety layer clamps it (deploy/safety.py): to the joint's range, then to
at most its velocity limit times the control period from the previous target. So the policy
learns the command stream the robot will receive, and the gripper's wide scale (0.1 m per
unit over a 0.04 m travel here, wider in arm-lift) makes it nearly open/closed: any a >= 0
opens it fully.

The actor sees what the robot's joint states give (positions relative to the default pose,
velocities), with encoder noise, and the tool pose computed from those noisy joint angles by
the forward kinematics the deploy runtime runs (robots/kinematics.py): the same function of
the same kind of numbers on both sides. The critic sees the true signals (MuJoCo's sensors)
and privileged parameters.

Randomized per episode: joint damping, controller gains, command latency (MuJoCo's actuator
delay, 0..20 ms), and the age of the joint states the actor sees (`observation_age`: a robot's
node on its own timer acts on a state up to a period old; 0 unless set), and the links' mass
against the gravity compensation's model (`mass`: nominal unless set); per step: encoder
noise.
"""

from __future__ import annotations

from typing import Any

import mujoco
import torch
from pydantic import Field, field_validator

from simreal.core.config import StrictModel
from simreal.core.spatial import quat_mul
from simreal.deploy.contract import ActionSpec, ObsTerm, PolicyContract
from simreal.deploy.terms import Signals
from simreal.robots import Robot
from simreal.robots.description import Kinematics
from simreal.robots.kinematics import forward_kinematics
from simreal.sim.actuators import PDActuators
from simreal.sim.delays import SensorHistory
from simreal.sim.threads import single_torch_thread
from simreal.sim.vec_env import NoiseStd, TaskConfig, VecEnv

Range = tuple[float, float]
NUM_ARM_JOINTS = 7


class ArmRandomization(StrictModel):
    enabled: bool = True
    damping: Range = (0.5, 3.0)  # N m s/rad, joint (gear) damping, uniform per joint
    kp_scale: Range = (0.9, 1.1)
    kd_scale: Range = (0.9, 1.1)
    latency: Range = (0.0, 0.02)  # s, command to joint controller
    # s, the age of the joint states the actor sees (whole physics steps; sim/delays.py)
    observation_age: Range = (0.0, 0.0)
    # scale of every arm link's mass and inertia (hand and fingers included), while the
    # controllers' gravity compensation stays the nominal model's, as a real arm's does (its
    # controller compensates with its own model): what a wrong mass costs is a sag the policy
    # must correct. Nominal (1, 1) unless set: a perturbation of bench/transfer_arm.py.
    mass: Range = (1.0, 1.0)

    @field_validator("mass")
    @classmethod
    def _positive(cls, v: Range) -> Range:
        if not 0 < v[0] <= v[1]:
            raise ValueError(f"need 0 < low <= high, got {list(v)}")
        return v


class ArmConfig(TaskConfig):
    # rad per action unit for joints 1-7, then m for the gripper (offset: the default pose)
    action_scale: list[float] = Field(
        default=[1.2, 1.5, 1.2, 1.5, 1.2, 1.5, 2.0, 0.1], min_length=8, max_length=8)
    joint_noise: float = 0.2  # rad, uniform around the default pose at a reset
    # control periods of its own past actions the actor sees (last_action's history)
    action_history: int = Field(default=1, ge=1)
    # control periods of the joint states it sees: with more than one it can tell from how
    # its recent targets played out what it is not told (latency, damping, gains)
    state_history: int = Field(default=1, ge=1)
    randomization: ArmRandomization = ArmRandomization()
    # encoder noise: rad (m for the finger), rad/s; the tool pose follows from the noisy angles
    noise: NoiseStd = {"joint_pos": 0.002, "joint_vel": 0.02}


def rotation_error(target: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """Rotation vector (..., 3) turning unit quaternion `current` into `target` (base frame)."""
    d = quat_mul(target, current * torch.tensor([1.0, -1.0, -1.0, -1.0], dtype=current.dtype))
    d = torch.where(d[..., :1] < 0, -d, d)
    s = torch.linalg.vector_norm(d[..., 1:], dim=-1, keepdim=True).clamp(min=1e-12)
    return d[..., 1:] / s * 2 * torch.atan2(s, d[..., :1])


def solve_ik(kin: Kinematics, q: torch.Tensor, position: torch.Tensor,
             orientation: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor,
             iterations: int = 30, damping: float = 1e-3) -> torch.Tensor:
    """Joint angles (n, 7) putting the tool at `position` (n, 3), `orientation` (n, 4), from
    `q` (n, >= 7): damped least squares on the forward kinematics, finite-difference Jacobian,
    joint ranges enforced at every step. Used for training start states, not by a policy."""
    q = q[:, :NUM_ARM_JOINTS].double().clone()
    position, orientation = position.double(), orientation.double()
    lower, upper = lower[:NUM_ARM_JOINTS].double(), upper[:NUM_ARM_JOINTS].double()
    eye = torch.eye(NUM_ARM_JOINTS, dtype=q.dtype)
    h = 1e-6
    for _ in range(iterations):
        # the base configuration and one perturbation per joint in one batched call
        qs = torch.cat([q[None], q[None] + h * eye[:, None, :]], 0)
        pos, quat = forward_kinematics(kin, qs)
        err = torch.cat([position - pos[0], rotation_error(orientation, quat[0])], -1)
        jac = torch.cat([(pos[1:] - pos[0]) / h,
                         rotation_error(quat[1:], quat[0].expand_as(quat[1:])) / h], -1)
        jac = jac.permute(1, 2, 0)  # (n, 6, 7)
        jjt = jac @ jac.transpose(1, 2) + damping * torch.eye(6, dtype=q.dtype)
        q = q + (jac.transpose(1, 2) @ torch.linalg.solve(jjt, err[..., None]))[..., 0]
        q = torch.minimum(torch.maximum(q, lower), upper)
    return q.float()


class ArmTask(VecEnv):
    robot_name = "panda"
    config_class = ArmConfig
    one_torch_thread = True
    cfg: ArmConfig
    # sensor roles (robot.yaml `sensors`) the task reads; others may be absent from its model
    sensor_roles: tuple[str, ...] = ("ee_position", "ee_orientation", "ee_linear_velocity",
                                     "finger2_pos", "finger_force_left", "finger_force_right")

    def __init__(self, robot: Robot, cfg: ArmConfig, num_envs: int, seed: int,
                 nthread: int | None = None):
        spec = robot.spec
        if spec.kind != "arm" or spec.kinematics is None or len(spec.joints) != 8:
            raise ValueError(f"{self.name} needs a 7-joint arm with a gripper, {robot.name} is "
                             f"{spec.kind} with {len(spec.joints)} joints")
        self.kinematics = spec.kinematics
        self.default_pos = torch.tensor([j.default for j in spec.joints])
        self.action_scale = torch.tensor(cfg.action_scale)
        super().__init__(robot, cfg, num_envs, seed)
        self.backend = self.make_backend(robot.mjcf_path, nthread, model=self._build_model())
        b, m, n = self.backend, self.backend.model, num_envs
        self.actuators = PDActuators(robot, b)
        joints = spec.joints
        self._joint_ids = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, j.name)
                           for j in joints]
        self._qpos_adr = torch.tensor([int(m.jnt_qposadr[j]) for j in self._joint_ids])
        self._dof_adr = torch.tensor([int(m.jnt_dofadr[j]) for j in self._joint_ids])
        # the second finger: coupled to the gripper joint by a joint equality in the MJCF
        gripper = self._joint_ids[NUM_ARM_JOINTS]
        coupled = [int(m.eq_obj1id[e]) for e in range(m.neq)
                   if m.eq_type[e] == mujoco.mjtEq.mjEQ_JOINT and m.eq_obj2id[e] == gripper]
        self._finger2_qpos = int(m.jnt_qposadr[coupled[0]]) if coupled else None
        self._cols = {
            "joint_pos": self._columns([j.position_sensor for j in joints]),
            "joint_vel": self._columns([j.velocity_sensor for j in joints]),
            "joint_effort": self._columns([j.torque_sensor for j in joints]),
            **{role: self._columns([spec.sensors[role]]) for role in self.sensor_roles},
        }
        self.lower = torch.tensor(m.jnt_range[self._joint_ids, 0], dtype=torch.float32)
        self.upper = torch.tensor(m.jnt_range[self._joint_ids, 1], dtype=torch.float32)
        # the safety layer's per-period step: velocity limit x control period (robot.yaml)
        self.max_step = torch.tensor([(j.velocity_limit or float("inf")) * self.dt
                                      for j in joints], dtype=torch.float32)
        self.target = self.default_pos.expand(n, -1).clone()  # last joint targets, absolute
        # the actuators' command history (MuJoCo keeps nsample past commands per actuator for
        # the latency), written at a reset so a start pose is held from its first physics step
        self._history = b.batch.bind("history") if m.nhistory else None
        self.dof_damping = b.model_field("dof_damping")
        self.nominal_damping = torch.from_numpy(m.dof_damping[self._dof_adr[:NUM_ARM_JOINTS]]
                                                .copy())
        self.damping = self.nominal_damping.expand(n, -1).clone().float()
        self._sensors: dict[str, torch.Tensor] | None = None
        self.success = torch.zeros(n, dtype=torch.bool)
        # the joint states' age: a ring of past physics steps' sensor rows
        physics_dt = self.dt / self.decimation
        max_age = round(cfg.randomization.observation_age[1] / physics_dt)
        self.history = (SensorHistory(n, m.nsensordata, max_age)
                        if cfg.randomization.enabled and max_age > 0 else None)
        # the arm's own bodies (its kinematic tree: not the world, not an object)
        root = int(m.body_rootid[m.jnt_bodyid[self._joint_ids[0]]])
        self._arm_bodies = torch.tensor([i for i in range(m.nbody)
                                         if m.body_rootid[i] == root and m.body_mass[i] > 0])
        self.mass_scale = torch.ones(n)
        self._mass_fields = None  # expanded only when masses vary (mjwarp copies them per env)
        if cfg.randomization.enabled and tuple(cfg.randomization.mass) != (1.0, 1.0):
            self._mass_fields = {f: b.model_field(f) for f in
                                 ("body_mass", "body_inertia", "body_gravcomp")}
            self._nominal_body = {f: torch.from_numpy(getattr(m, f).copy())
                                  for f in self._mass_fields}

    # --- what a task provides beyond VecEnv's -----------------------------------------------
    def _build_model(self) -> mujoco.MjModel | None:
        """The model to simulate; None compiles the robot's MJCF as it is."""
        return None

    def _columns(self, names: list[str]) -> slice | torch.Tensor:
        idx: list[int] = []
        for name in names:
            sl = self.backend.sensor_slice(name)
            idx.extend(range(sl.start, sl.stop))
        if idx == list(range(idx[0], idx[0] + len(idx))):
            return slice(idx[0], idx[0] + len(idx))
        return torch.tensor(idx)

    # --- contract ---------------------------------------------------------------------------
    def action_spec(self) -> ActionSpec:
        spec = self.robot.spec
        return ActionSpec(kind="joint_position", scale=list(self.cfg.action_scale),
                          offset=[j.default for j in spec.joints], clip=1.0,
                          kp=[j.kp for j in spec.joints], kd=[j.kd for j in spec.joints])

    def joint_terms(self) -> list[ObsTerm]:
        h = self.cfg.state_history
        return [ObsTerm(name="joint_pos_rel", dim=self.num_actions, clip=10.0, history=h),
                ObsTerm(name="joint_vel", dim=self.num_actions, scale=0.2, clip=10.0,
                        history=h)]

    def action_term(self) -> ObsTerm:
        return ObsTerm(name="last_action", dim=self.num_actions, clip=1.0,
                       history=self.cfg.action_history)

    def _contract(self, commands: dict) -> PolicyContract:
        spec = self.robot.spec
        return PolicyContract(task=self.name, robot=self.robot.name,
                              robot_hash=self.robot.description_hash,
                              control_rate_hz=spec.control.rate_hz,
                              actuators=self.robot.actuator_names,
                              observations=self.policy_terms(), action=self.action_spec(),
                              commands=commands)

    # --- signals ----------------------------------------------------------------------------
    def read(self) -> dict[str, torch.Tensor]:
        """Named float32 views of this physics update's sensors (one copy per update)."""
        if self._sensors is None:
            data = self.backend.sensordata.to(torch.float32)
            self._sensors = {k: data[:, c] for k, c in self._cols.items()}
        return self._sensors

    def joint_signals(self) -> dict[str, torch.Tensor]:
        s = self.read()
        return {"joint_pos": s["joint_pos"], "joint_vel": s["joint_vel"],
                "joint_effort": s["joint_effort"], "default_joint_pos": self.default_pos,
                "ee_position": s["ee_position"], "ee_orientation": s["ee_orientation"],
                "last_action": self.last_action}

    def perturb(self, signals: Signals) -> dict[str, torch.Tensor]:
        """Joint states as old as the episode's observation age, with encoder noise, and the
        tool pose as deploy computes it from them."""
        if self.history is not None:
            aged = self.history.aged()
            signals = {**signals, **{k: aged[:, self._cols[k]]
                                     for k in ("joint_pos", "joint_vel", "joint_effort")}}
        s = super().perturb(signals)
        with single_torch_thread():  # evaluation calls this outside step()
            s["ee_position"], s["ee_orientation"] = forward_kinematics(self.kinematics,
                                                                       s["joint_pos"])
        return s

    def actuator_privileged(self) -> dict[str, torch.Tensor]:
        """Randomized joint parameters, for the critic: damping, gains, latency."""
        a = self.actuators
        age = (self.history.age.float() * (self.dt / self.decimation) if self.history is not None
               else torch.zeros(self.num_envs))
        return {
            "joint_damping": (self.damping - 1.0) / 2.0,
            "kp_scale": (a.kp_scale - 1).float().mean(-1, keepdim=True) * 10,
            "kd_scale": (a.kd_scale - 1).float().mean(-1, keepdim=True) * 10,
            "latency": a.latency[:, None].float() * 50,
            "observation_age": age[:, None] * 50,  # s, as latency
            # only where masses vary: a critic of the nominal-mass tasks keeps its inputs
            **({"mass_scale": (self.mass_scale[:, None] - 1) * 5}
               if self._mass_fields is not None else {}),
        }

    def joint_reward_state(self) -> dict[str, torch.Tensor]:
        """What the shared terms read: actions and the arm's joint velocities (no finger)."""
        return {"action": self.last_action, "prev_action": self.prev_action,
                "joint_vel": self.read()["joint_vel"][:, :NUM_ARM_JOINTS]}

    # --- dynamics ---------------------------------------------------------------------------
    def apply_actions(self, actions: torch.Tensor) -> None:
        # as deploy's safety layer: the joint range, then the rate limit from the last target
        target = self.default_pos + actions * self.action_scale
        target = torch.minimum(torch.maximum(target, self.lower), self.upper)
        self.target = torch.minimum(torch.maximum(target, self.target - self.max_step),
                                    self.target + self.max_step)
        self.backend.ctrl.copy_(self.target - self.default_pos)  # relative to the default pose
        if self.history is None:
            self.backend.step(self.decimation)
        else:
            self.history.push(self.backend.step_recording(self.decimation))
        self._sensors = None

    def hold_targets(self, ids: torch.Tensor, q: torch.Tensor) -> None:
        """Envs `ids` start with joint targets `q` (n, 8, absolute): the controllers hold
        that pose, and the rate limit counts from it."""
        self.target[ids] = q
        ctrl = (q - self.default_pos).double()
        b = self.backend
        b.ctrl[ids] = ctrl
        if self._history is None:
            return
        # MuJoCo's per-actuator history: [user, cursor, nsample times, nsample values]
        m, hist = b.model, torch.from_numpy(self._history)
        for col, act in enumerate(self.actuators.ids.tolist()):
            size = int(m.actuator_history[act, 0])
            if size:
                start = int(m.actuator_historyadr[act]) + 2 + size
                hist[ids, start:start + size] = ctrl[:, col:col + 1]

    # --- resets -----------------------------------------------------------------------------
    def randomize_joints(self, ids: torch.Tensor) -> None:
        rnd, a, n, g = self.cfg.randomization, self.actuators, len(ids), self.generator
        if not rnd.enabled:
            return

        def u(low: float, high: float, *shape: int) -> torch.Tensor:
            return low + (high - low) * torch.rand(n, *shape, generator=g)

        self.damping[ids] = u(*rnd.damping, NUM_ARM_JOINTS)
        a.kp_scale[ids] = u(*rnd.kp_scale, self.num_actions).double()
        a.kd_scale[ids] = u(*rnd.kd_scale, self.num_actions).double()
        a.latency[ids] = u(*rnd.latency).double()
        a.write(ids)
        age = u(*rnd.observation_age)  # drawn whatever the range: a seed fixes the rest
        if self.history is not None:
            physics_dt = self.dt / self.decimation
            self.history.age[ids] = torch.round(age / physics_dt).long().clamp(
                0, self.history.max_age_steps)
        self.dof_damping[ids[:, None], self._dof_adr[None, :NUM_ARM_JOINTS]] = \
            self.damping[ids].double()
        if self._mass_fields is not None:
            self.mass_scale[ids] = u(*rnd.mass)
            self._scale_links(ids)

    def _scale_links(self, ids: torch.Tensor) -> None:
        """Envs `ids`' arm links at mass_scale times their mass and inertia, their gravity
        compensation at 1/mass_scale: it still cancels the nominal weight, and no more."""
        s, bodies = self.mass_scale[ids][:, None], self._arm_bodies
        rows, nominal = (ids[:, None], bodies[None]), self._nominal_body
        for field, value in (("body_mass", nominal["body_mass"][bodies] * s),
                             ("body_inertia", nominal["body_inertia"][bodies] * s[..., None]),
                             ("body_gravcomp", nominal["body_gravcomp"][bodies] / s)):
            target = self._mass_fields[field]
            target[rows] = value.to(target.dtype)
        # MuJoCo reads the mass matrix from compiled constants until they are recomputed
        self.backend.set_const(ids)

    def reset_joints(self, ids: torch.Tensor) -> None:
        """Back to the default pose plus noise, at rest, the controllers holding that pose."""
        b, n, g = self.backend, len(ids), self.generator
        b.reset(ids)  # time, warm starts and the actuators' command history
        q = self.default_pos + (torch.rand(n, self.num_actions, generator=g) * 2 - 1
                                ) * self.cfg.joint_noise
        q[:, NUM_ARM_JOINTS] = self.default_pos[NUM_ARM_JOINTS]  # the gripper starts open
        q = torch.minimum(torch.maximum(q, self.lower), self.upper)
        qpos = b.qpos[ids]
        qpos[:, self._qpos_adr] = q.double()
        if self._finger2_qpos is not None:
            qpos[:, self._finger2_qpos] = q[:, NUM_ARM_JOINTS].double()
        b.qpos[ids] = qpos
        b.qvel[ids] = 0.0
        self.hold_targets(ids, q)

    def start_history(self, ids: torch.Tensor) -> None:
        """After envs `ids`' reset state is computed: their past reads as that state."""
        if self.history is not None:
            self.history.fill(ids, self.backend.sensordata[ids].to(torch.float32))

    def episode_stats(self, ids: torch.Tensor, ok: torch.Tensor) -> dict[str, Any]:
        """Success of envs `ids`' finished episodes (ok), for the log."""
        lengths = self.episode_length_buf[ids]
        ended = lengths > 0
        if not ended.any():
            return {}
        self.success[ids] = ok
        return {"/episode/success_rate": ok[ended].float().mean().item(),
                "/episode/return": self.episode_return[ids][ended].mean().item()}

    # --- evaluation helpers -----------------------------------------------------------------
    def window_mask(self, steps: int, lengths: torch.Tensor) -> torch.Tensor:
        t = torch.arange(steps)[:, None]
        return (t < lengths[None]) & (t >= lengths[None] - self.window)
