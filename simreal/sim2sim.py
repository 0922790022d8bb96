"""sim2sim: a policy against another MJCF of its robot, through the deploy runtime.

The step between training and a real robot (train, play, sim2sim, real; docs/SIM2SIM.md):
the policy meets a model it was not trained on, with the robot's own control loop around it.

- Joints are matched by robot.yaml's names; whatever the other model calls its bodies does not
  matter. The other model's own actuators on those joints are removed (with the sensors that
  read them) and robot.yaml's PD takes their place: one MuJoCo general actuator per joint,
  gain kp and affine bias (kp q_default, -kp, -kd), so the PD law runs at the other model's
  physics rate (its own timestep), in C, clamped to the other model's torque limit for that
  joint (its removed actuator's force range times gear, a motor's control range times gain
  and gear, or the joint's actuatorfrcrange; robot.yaml's limit where it gives none).
- The base state (orientation, gyro, and for the metrics the linear velocity) comes from the
  model's free joint, or from a named IMU site (`imu_site`); joint angles and velocities from
  the matched joints. The task's sensor noise is added to what the policy sees.
- The policy runs through deploy's PolicyRunner (observation builder, onnxruntime, action
  mapper) at its own rate; physics steps fill each control period (the timestep need not
  divide it).
- Falls: the base's geoms touching the floor, a tilt past the task's limit, or a non-finite
  state.

`variant="hard"` rebuilds the robot's own MJCF (MjSpec) with the other public Go2 MJCF's
parameters (shared/reference/robots.md): joint damping 2.0 N m s/rad and frictionloss 0.2 N m,
timestep 0.002 s, elliptic friction cones with impratio 100, soft feet (solimp 0.015 1 0.031,
friction 0.8, condim 6) and a 45.43 N m knee (calf) limit.

Perturbations (`Perturbation`) are edits of the compiled model, so they apply to any MJCF:
friction (every geom's sliding friction, floor included), latency (MuJoCo's actuator delay on
the PD actuators), strength (scales the PD output before the torque clamp), mass (every
robot body's mass and inertia) and damping (the matched joints').

Episodes of one command run together: one MjData per episode, one batched policy call per
control period.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import mujoco
import numpy as np
from pydantic import Field

from simreal.core.config import StrictModel
from simreal.deploy.policy import OnnxPolicy
from simreal.deploy.runner import PolicyRunner
from simreal.evaluate import Command, tracking_row, tracking_summary
from simreal.robots import Robot

VARIANTS = ("hard",)
HARD = {"damping": 2.0, "frictionloss": 0.2, "timestep": 0.002, "impratio": 100.0,
        "foot_solimp": (0.015, 1.0, 0.031), "foot_friction": 0.8, "foot_condim": 6,
        "knee_torque_limit": 45.43}


class Sim2SimError(ValueError):
    """The other model cannot stand in for the robot; the message names what is missing."""


class Perturbation(StrictModel):
    """Edits of the other model (None or 1: unchanged)."""

    friction: float | None = Field(default=None, gt=0, description="sliding friction of "
                                   "every geom (floor and robot)")
    latency: float = Field(default=0.0, ge=0, description="s from policy command to driver")
    strength: float = Field(default=1.0, gt=0, description="scale of the drivers' output")
    mass: float = Field(default=1.0, gt=0, description="scale of every robot body's mass "
                        "and inertia")
    damping: float | None = Field(default=None, ge=0, description="N m s/rad on each "
                                  "matched joint")

    def edits(self) -> dict[str, float]:
        return {k: v for k, v in self.model_dump().items()
                if v is not None and v != Perturbation.model_fields[k].default}


# --- the model ----------------------------------------------------------------------------------
def load_spec(robot: Robot, mjcf: str | Path | None, variant: str | None
              ) -> tuple[mujoco.MjSpec, str]:
    """(spec, source) of the other model: a file, or a variant of the robot's own MJCF."""
    if (mjcf is None) == (variant is None):
        raise Sim2SimError("give the other model: an MJCF file or a variant "
                           f"({', '.join(VARIANTS)})")
    if mjcf is not None:
        path = Path(mjcf)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such MJCF")
        try:
            return mujoco.MjSpec.from_file(str(path)), str(path)
        except Exception as exc:  # mujoco raises its own errors for a malformed file
            raise Sim2SimError(f"{path}: not a loadable MJCF: {exc}") from None
    if variant not in VARIANTS:
        raise Sim2SimError(f"unknown variant {variant!r} (known: {', '.join(VARIANTS)})")
    spec = mujoco.MjSpec.from_file(str(robot.mjcf_path))
    hard_variant(spec, robot)
    return spec, f"{robot.name} variant {variant}"


# the hard variant's groups of edits, each one a separate effect (bench/ablate_hard.py turns
# them on one at a time and all but one at a time)
HARD_PARTS = ("joint_friction", "timestep", "cone", "foot_softness", "foot_friction",
              "knee_limit")


def hard_variant(spec: mujoco.MjSpec, robot: Robot, parts: Iterable[str] = HARD_PARTS) -> None:
    """The robot's MJCF with the other public Go2 MJCF's parameters (HARD), in place: all of
    them, or the groups named in `parts` (HARD_PARTS)."""
    parts = set(parts)
    unknown = parts - set(HARD_PARTS)
    if unknown:
        raise Sim2SimError(f"unknown hard-variant parts {sorted(unknown)} (known: "
                           f"{', '.join(HARD_PARTS)})")
    model = spec.compile()
    if "joint_friction" in parts:
        for joint in robot.spec.joints:
            j = spec.joint(joint.name)
            j.damping = [HARD["damping"], *list(j.damping)[1:]]  # MuJoCo 4: a 3-vector
            j.frictionloss = HARD["frictionloss"]
    if "timestep" in parts:
        spec.option.timestep = HARD["timestep"]
    if "cone" in parts:
        spec.option.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
        spec.option.impratio = HARD["impratio"]
    for name in _foot_geoms(model, robot):
        g = spec.geom(name)
        if "foot_softness" in parts:
            g.solimp = [*HARD["foot_solimp"], 0.5, 2.0]
        if "foot_friction" in parts:
            g.friction = [HARD["foot_friction"], *list(g.friction)[1:]]
            g.condim = HARD["foot_condim"]
    if "knee_limit" in parts:
        for joint in robot.spec.joints:
            if "calf" in joint.name or "knee" in joint.name:
                act = spec.actuator(joint.actuator)
                act.forcerange = [-HARD["knee_torque_limit"], HARD["knee_torque_limit"]]
                act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE


def _foot_geoms(model: mujoco.MjModel, robot: Robot) -> list[str]:
    """Per foot: the named geom of the foot site's body nearest the site."""
    out = []
    for foot in robot.spec.feet:
        if getattr(foot, "geom", None):  # robot.yaml names it
            out.append(foot.geom)
            continue
        sid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, foot.site)
        if sid < 0:
            raise Sim2SimError(f"{robot.mjcf_path}: no foot site {foot.site!r}")
        body = model.site_bodyid[sid]
        geoms = [g for g in range(model.ngeom) if model.geom_bodyid[g] == body
                 and mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM, g)]
        if not geoms:
            raise Sim2SimError(f"{robot.mjcf_path}: foot {foot.name!r} has no named geom")
        dist = [np.linalg.norm(model.geom_pos[g] - model.site_pos[sid]) for g in geoms]
        out.append(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_GEOM,
                                     geoms[int(np.argmin(dist))]))
    return out


def _compile(spec: mujoco.MjSpec, source: str) -> mujoco.MjModel:
    try:
        return spec.compile()
    except Exception as exc:
        raise Sim2SimError(f"{source}: does not compile: {exc}") from None


def _torque_limit(m: mujoco.MjModel, jid: int, fallback: float) -> tuple[float, str]:
    """The other model's torque limit on joint `jid` and where it comes from."""
    for a in range(m.nu):
        if m.actuator_trntype[a] != mujoco.mjtTrn.mjTRN_JOINT or m.actuator_trnid[a, 0] != jid:
            continue
        gear = abs(float(m.actuator_gear[a, 0]))
        if m.actuator_forcelimited[a]:
            return float(np.abs(m.actuator_forcerange[a]).max()) * gear, "actuator forcerange"
        motor = (m.actuator_gaintype[a] == mujoco.mjtGain.mjGAIN_FIXED
                 and m.actuator_biastype[a] == mujoco.mjtBias.mjBIAS_NONE)
        if motor and m.actuator_ctrllimited[a]:
            limit = float(np.abs(m.actuator_ctrlrange[a]).max())
            return limit * abs(float(m.actuator_gainprm[a, 0])) * gear, "motor ctrlrange"
    if m.jnt_actfrclimited[jid]:
        return float(np.abs(m.jnt_actfrcrange[jid]).max()), "joint actuatorfrcrange"
    return fallback, "robot.yaml"


class OtherModel:
    """The other model with robot.yaml's PD drivers in place of its own actuators."""

    def __init__(self, robot: Robot, spec: mujoco.MjSpec, source: str,
                 perturbation: Perturbation | None = None, imu_site: str | None = None):
        self.robot, self.source = robot, source
        p = self.perturbation = perturbation or Perturbation()
        joints = robot.spec.joints
        missing = [j.name for j in joints if spec.joint(j.name) is None]
        if missing:
            raise Sim2SimError(f"{source}: no joint {', '.join(map(repr, missing))} "
                               f"(robot.yaml's joints are matched by name)")
        original = _compile(spec, source)
        jids = [mujoco.mj_name2id(original, mujoco.mjtObj.mjOBJ_JOINT, j.name) for j in joints]
        hinge = [j.name for j, i in zip(joints, jids, strict=True)
                 if int(original.jnt_type[i]) not in (int(mujoco.mjtJoint.mjJNT_HINGE),
                                                      int(mujoco.mjtJoint.mjJNT_SLIDE))]
        if hinge:
            raise Sim2SimError(f"{source}: joints {hinge} are not hinge joints")
        self._check_floor_and_base(original, jids)
        limits = [_torque_limit(original, i, j.torque_limit)
                  for j, i in zip(joints, jids, strict=True)]
        self.torque_limits = {j.name: lim for j, (lim, _) in zip(joints, limits, strict=True)}
        self.torque_limit_sources = {j.name: src
                                     for j, (_, src) in zip(joints, limits, strict=True)}
        self.removed_actuators = self._replace_actuators(spec, original, jids)
        self.model = m = _compile(spec, source)
        self.dt = float(m.opt.timestep)
        if p.latency > 0:  # the delay reads a command history of nsample physics steps
            for j in joints:
                a = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, f"sim2sim_{j.name}")
                m.actuator_delay[a] = p.latency
        self.joint_ids = np.array([mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, j.name)
                                   for j in joints])
        self.qpos_adr = m.jnt_qposadr[self.joint_ids]
        self.dof_adr = m.jnt_dofadr[self.joint_ids]
        self.act_ids = np.array([mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_ACTUATOR,
                                                   f"sim2sim_{j.name}") for j in joints])
        self.default = np.array([j.default for j in joints])
        self._check_floor_and_base(m, list(self.joint_ids))
        self.imu_site = -1
        if imu_site is not None:
            self.imu_site = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, imu_site)
            if self.imu_site < 0:
                raise Sim2SimError(f"{source}: no IMU site {imu_site!r}")
        self._perturb(m)

    def _check_floor_and_base(self, m: mujoco.MjModel, jids: list[int]) -> None:
        src = self.source
        free = [j for j in range(m.njnt) if m.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
        if not free:
            raise Sim2SimError(f"{src}: no free joint: the robot's base must float "
                               "(a <freejoint/> on its base body)")

        def ancestors(body: int) -> set[int]:
            out = set()
            while body > 0:
                out.add(body)
                body = int(m.body_parentid[body])
            return out

        holders = [j for j in free if all(int(m.jnt_bodyid[j]) in ancestors(
            int(m.jnt_bodyid[k])) for k in jids)]
        if not holders:
            raise Sim2SimError(f"{src}: no free joint above the robot's joints (free joints "
                               "on other bodies only)")
        self.free = holders[0]
        self.base = int(m.jnt_bodyid[self.free])
        flat = (int(mujoco.mjtGeom.mjGEOM_PLANE), int(mujoco.mjtGeom.mjGEOM_HFIELD))
        self.floor = [g for g in range(m.ngeom)
                      if m.geom_bodyid[g] == 0 and int(m.geom_type[g]) in flat]
        if not self.floor:
            raise Sim2SimError(f"{src}: no floor: no plane or heightfield geom in the "
                               "worldbody")

    def _replace_actuators(self, spec: mujoco.MjSpec, original: mujoco.MjModel,
                           jids: list[int]) -> list[str]:
        """Remove the model's actuators on the matched joints (and sensors reading them) and
        add robot.yaml's PD drivers: ctrl is the target relative to the default pose."""
        on_joints = [a for a in range(original.nu)
                     if original.actuator_trntype[a] == mujoco.mjtTrn.mjTRN_JOINT
                     and int(original.actuator_trnid[a, 0]) in jids]
        names = [mujoco.mj_id2name(original, mujoco.mjtObj.mjOBJ_ACTUATOR, a) for a in on_joints]
        removed = set()
        for act in list(spec.actuators):
            if act.trntype == mujoco.mjtTrn.mjTRN_JOINT and act.target in {
                    j.name for j in self.robot.spec.joints}:
                removed.add(act.name)
                spec.delete(act)
        for sensor in list(spec.sensors):
            if sensor.objtype == mujoco.mjtObj.mjOBJ_ACTUATOR and sensor.objname in removed:
                spec.delete(sensor)
        s = self.perturbation.strength
        nsample = math.ceil(self.perturbation.latency / float(spec.option.timestep)) + 2
        for j in self.robot.spec.joints:
            act = spec.add_actuator(name=f"sim2sim_{j.name}", target=j.name,
                                    trntype=mujoco.mjtTrn.mjTRN_JOINT)
            act.gaintype = mujoco.mjtGain.mjGAIN_FIXED
            act.gainprm = [s * j.kp] + [0.0] * 9
            act.biastype = mujoco.mjtBias.mjBIAS_AFFINE
            act.biasprm = [s * j.kp * j.default, -s * j.kp, -s * j.kd] + [0.0] * 7
            act.dyntype = mujoco.mjtDyn.mjDYN_NONE
            act.gear = [1.0, 0, 0, 0, 0, 0]
            act.ctrllimited = mujoco.mjtLimited.mjLIMITED_FALSE
            limit = self.torque_limits[j.name]
            act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
            act.forcerange = [-limit, limit]
            if self.perturbation.latency > 0:
                act.nsample = nsample
                act.interp = 0  # zero-order hold
        return [n or f"actuator {i}" for i, n in zip(on_joints, names, strict=True)]

    def _perturb(self, m: mujoco.MjModel) -> None:
        p = self.perturbation
        if p.friction is not None:
            m.geom_friction[:, 0] = p.friction
        if p.damping is not None:
            m.dof_damping[self.dof_adr] = p.damping
        if p.mass != 1.0:
            robot_bodies = [b for b in range(1, m.nbody) if self.base in _chain(m, b)]
            m.body_mass[robot_bodies] *= p.mass
            m.body_inertia[robot_bodies] *= p.mass
            data = mujoco.MjData(m)
            mujoco.mj_setConst(m, data)  # derived constants (subtree masses, ...)

    def describe(self) -> dict[str, Any]:
        m = self.model
        return {"model": self.source, "timestep": self.dt,
                "base_body": mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, self.base),
                "imu": (mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_SITE, self.imu_site)
                        if self.imu_site >= 0 else "free joint"),
                "removed_actuators": self.removed_actuators,
                "torque_limits": self.torque_limits,
                "perturbation": self.perturbation.edits()}


def _chain(m: mujoco.MjModel, body: int) -> set[int]:
    out = set()
    while body > 0:
        out.add(body)
        body = int(m.body_parentid[body])
    return out


def _quat_to_matrix(q: np.ndarray) -> np.ndarray:
    mat = np.zeros(9)
    mujoco.mju_quat2Mat(mat, q)
    return mat.reshape(3, 3)


# --- episodes -----------------------------------------------------------------------------------
class Episodes:
    """N episodes of one held command on the other model, one MjData each."""

    def __init__(self, other: OtherModel, policy: OnnxPolicy, n: int, seed: int,
                 noise: dict[str, float], tilt_limit_deg: float = 60.0):
        self.o, self.policy, self.n = other, policy, n
        self.rng = np.random.default_rng(seed)
        self.noise = noise
        self.cos_tilt = math.cos(math.radians(tilt_limit_deg))
        m = other.model
        self.datas = [mujoco.MjData(m) for _ in range(n)]
        self.qpos0 = int(m.jnt_qposadr[other.free])
        self.dof0 = int(m.jnt_dofadr[other.free])
        self.base_geoms = np.array([g for g in range(m.ngeom) if m.geom_bodyid[g] == other.base])
        self.floor = np.array(other.floor)
        self.rate = policy.contract.control_rate_hz

    def reset(self) -> None:
        o, m = self.o, self.o.model
        for i, d in enumerate(self.datas):
            mujoco.mj_resetData(m, d)
            d.qpos[o.qpos_adr] = o.default
            yaw = self.rng.uniform(-math.pi, math.pi)
            d.qpos[self.qpos0 + 3:self.qpos0 + 7] = [math.cos(yaw / 2), 0, 0, math.sin(yaw / 2)]
            mujoco.mj_forward(m, d)
            if i == 0:
                drop = self._clearance(d) - 0.001
            d.qpos[self.qpos0 + 2] -= drop
            mujoco.mj_forward(m, d)

    def _clearance(self, d: mujoco.MjData) -> float:
        m = self.o.model
        mine = [g for g in range(m.ngeom) if self.o.base in _chain(m, int(m.geom_bodyid[g]))
                and m.geom_conaffinity[g] | m.geom_contype[g]]
        return min(mujoco.mj_geomDistance(m, d, g, f, 10.0, None)
                   for g in mine for f in self.o.floor)

    def base_state(self, d: mujoco.MjData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(orientation quaternion w x y z, gyro in the IMU frame, linear velocity in the base
        frame) from the free joint, or the IMU site."""
        q = d.qpos[self.qpos0 + 3:self.qpos0 + 7]
        rot = _quat_to_matrix(q)
        v_body = rot.T @ d.qvel[self.dof0:self.dof0 + 3]
        site = self.o.imu_site
        if site < 0:
            return q.copy(), d.qvel[self.dof0 + 3:self.dof0 + 6].copy(), v_body
        m = self.o.model
        mujoco.mj_kinematics(m, d)
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, d.site_xmat[site])
        vel = np.zeros(6)
        mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_SITE, site, vel, 1)
        return quat, vel[:3].copy(), v_body

    def run(self, command: Command, episode_s: float, settle_s: float) -> dict[str, Any]:
        o, m, n = self.o, self.o.model, self.n
        runner = PolicyRunner(self.policy, o.robot, batch=n)
        self.reset()
        horizon = round(episode_s * self.rate)
        period = 1.0 / self.rate
        cmd = np.tile(np.asarray(command, dtype=np.float32), (n, 1))
        nj = len(o.default)
        active = np.ones(n, dtype=bool)
        fell = np.zeros(n, dtype=bool)
        lin = np.zeros((horizon, n))
        ang = np.zeros((horizon, n))
        valid = np.zeros((horizon, n), dtype=bool)
        vel = np.zeros((horizon, n, 3))  # measured vx, vy (base frame), yaw rate
        quat, gyro = np.zeros((n, 4)), np.zeros((n, 3))
        jpos, jvel = np.zeros((n, nj)), np.zeros((n, nj))
        effort = np.zeros((n, nj))
        for i, d in enumerate(self.datas):
            quat[i], gyro[i], _ = self.base_state(d)
        steps = 0
        for t in range(horizon):
            for i, d in enumerate(self.datas):
                if active[i]:
                    jpos[i], jvel[i] = d.qpos[o.qpos_adr], d.qvel[o.dof_adr]
                    effort[i] = d.actuator_force[o.act_ids]
            signals = self._noisy({"orientation": quat, "angular_velocity": gyro,
                                   "joint_pos": jpos, "joint_vel": jvel})
            signals.update(velocity_command=cmd, default_joint_pos=o.default.astype(np.float32),
                           joint_effort=effort.astype(np.float32))
            _, target = runner.act(signals)
            ctrl = target - o.default
            nstep = round((t + 1) * period / o.dt) - steps
            steps += nstep
            for i, d in enumerate(self.datas):
                if not active[i]:
                    continue
                d.ctrl[o.act_ids] = ctrl[i]
                if nstep > 0:
                    mujoco.mj_step(m, d, nstep)
                quat[i], gyro[i], v_body = self.base_state(d)
                w_body = d.qvel[self.dof0 + 3:self.dof0 + 6]
                lin[t, i] = np.linalg.norm(cmd[i, :2] - v_body[:2])
                ang[t, i] = abs(cmd[i, 2] - w_body[2])
                vel[t, i] = v_body[0], v_body[1], w_body[2]
                if self._fallen(d):
                    fell[i] = True
                    active[i] = False
                else:
                    valid[t, i] = True
            if not active.any():
                break
        settle_steps = round(settle_s * self.rate)
        return tracking_row(command, lin, ang, valid, fell, settle_steps, vel)

    def _noisy(self, s: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = {}
        for name, value in s.items():
            std = self.noise.get(name, 0.0)
            value = value + std * self.rng.standard_normal(value.shape) if std else value
            if name == "orientation":
                value = value / np.linalg.norm(value, axis=-1, keepdims=True)
            out[name] = value.astype(np.float32)
        return out

    def _fallen(self, d: mujoco.MjData) -> bool:
        q = d.qpos[self.qpos0 + 3:self.qpos0 + 7]
        if not (np.isfinite(d.qpos).all() and np.isfinite(d.qvel).all()):
            return True
        rot = _quat_to_matrix(q / np.linalg.norm(q))
        if rot[2, 2] < self.cos_tilt:  # the base's z axis tilted past the limit
            return True
        if d.ncon:
            c = d.contact
            g1, g2 = c.geom1[:d.ncon], c.geom2[:d.ncon]
            touch = (np.isin(g1, self.base_geoms) & np.isin(g2, self.floor)) | \
                (np.isin(g2, self.base_geoms) & np.isin(g1, self.floor))
            return bool(touch.any())
        return False


def run_sim2sim(policy: str | Path, robot: Robot, mjcf: str | Path | None = None,
                variant: str | None = None, commands: list[Command] | None = None,
                episodes: int = 10, seed: int = 0, imu_site: str | None = None,
                perturbation: Perturbation | None = None, episode_s: float = 20.0,
                settle_s: float = 2.0) -> dict[str, Any]:
    """The tracking table of `policy` on the other model (module docstring)."""
    from simreal.evaluate import TRACKING_COMMANDS
    from simreal.sim.registry import get_task

    onnx_policy = OnnxPolicy(policy)
    contract = onnx_policy.contract
    contract.check(robot)
    if "velocity_command" not in contract.commands:
        raise Sim2SimError(f"{policy}: sim2sim runs velocity-tracking policies (the contract "
                           "has no velocity_command)")
    spec, source = load_spec(robot, mjcf, variant)
    other = OtherModel(robot, spec, source, perturbation, imu_site)
    try:
        cfg = get_task(contract.task).config_class()
    except ValueError:
        cfg = None
    noise = dict(getattr(cfg, "noise", {}) or {})
    tilt = float(getattr(cfg, "tilt_limit_deg", 60.0))
    rows = []
    for i, command in enumerate(commands or list(TRACKING_COMMANDS)):
        eps = Episodes(other, onnx_policy, episodes, seed + i, noise, tilt)
        rows.append(eps.run(command, episode_s, settle_s))
    return {"policy": str(policy), "robot": robot.name, **other.describe(),
            "episodes_per_command": episodes, "episode_s": episode_s, "settle_s": settle_s,
            "control_rate_hz": contract.control_rate_hz, **tracking_summary(rows)}
