"""Joint PD actuators as a legged robot's motor drivers run them, inside MuJoCo's step.

Each joint's actuator in the MJCF is a general actuator with gain kp and affine bias
(kp q_default, -kp, -kd), clamped to +-torque_limit (forcerange):

    torque = clamp(kp (ctrl + q_default - q) - kd qdot, +-torque_limit)

so MuJoCo evaluates the PD law at every physics step, in C, with no Python loop per physics
step (explicitly, with the MJCF's Euler integrator: kd dt / inertia stays far below the
explicit limit of 2 at the Go2's gains and armature). ctrl is the position target
relative to the default pose. Per-environment parameters are written into the batch's
expanded model fields, so randomizing them costs no model rebuild:

- motor strength s multiplies the driver's output (gain and bias), before the torque clamp;
- kp and kd scale factors model gain error;
- a joint offset d models an encoder calibration error: the driver and the policy both see
  q + d, so the driver servoes the true joint to target - d;
- a command latency, MuJoCo's actuator delay (zero-order hold on the command history the
  MJCF's nsample keeps): the driver applies the command the policy sent that long ago.
"""

from __future__ import annotations

import mujoco
import torch

from simreal.robots import Robot
from simreal.sim.backends import Backend


class ActuatorMismatch(ValueError):
    """The MJCF's actuators disagree with robot.yaml's joints."""


class PDActuators:
    def __init__(self, robot: Robot, backend: Backend):
        spec = robot.spec
        model = backend.model
        self.ids = torch.tensor([_actuator_id(model, j.actuator) for j in spec.joints])
        self.n = len(spec.joints)
        self.kp = torch.tensor([j.kp for j in spec.joints], dtype=torch.float64)
        self.kd = torch.tensor([j.kd for j in spec.joints], dtype=torch.float64)
        self.default = torch.tensor([j.default for j in spec.joints], dtype=torch.float64)
        self.torque_limit = torch.tensor([j.torque_limit for j in spec.joints],
                                         dtype=torch.float64)
        _check_model(robot, model, self)
        self.physics_dt = float(model.opt.timestep)
        ids = self.ids
        capacity = model.actuator_history[ids.cpu().numpy(), 0]
        # the zero-order hold reads the command `delay / dt` physics steps back, which the
        # history holds for up to nsample - 1 steps (measured)
        self.max_latency = float((capacity.min() - 1) * self.physics_dt) if len(ids) else 0.0
        self._gain = backend.model_field("actuator_gainprm")
        self._bias = backend.model_field("actuator_biasprm")
        self._delay = backend.model_field("actuator_delay")
        n_env = backend.num_envs
        self.strength = torch.ones(n_env, self.n, dtype=torch.float64)
        self.kp_scale = torch.ones(n_env, self.n, dtype=torch.float64)
        self.kd_scale = torch.ones(n_env, self.n, dtype=torch.float64)
        self.offset = torch.zeros(n_env, self.n, dtype=torch.float64)
        self.latency = torch.zeros(n_env, dtype=torch.float64)

    def write(self, env_ids: torch.Tensor) -> None:
        """Write envs `env_ids`' strength, gains, offsets and latency into the model fields."""
        s = self.strength[env_ids]
        kp = self.kp * self.kp_scale[env_ids] * s
        kd = self.kd * self.kd_scale[env_ids] * s
        rows = env_ids[:, None]
        cols = self.ids[None, :]
        dtype = self._gain.dtype  # the backend's float type (float32 on mjwarp)
        self._gain[rows, cols, 0] = kp.to(dtype)
        self._bias[rows, cols, 0] = (kp * (self.default - self.offset[env_ids])).to(dtype)
        self._bias[rows, cols, 1] = (-kp).to(dtype)
        self._bias[rows, cols, 2] = (-kd).to(dtype)
        if self.max_latency > 0:
            lat = self.latency[env_ids].clamp(0.0, self.max_latency)
            self._delay[rows, cols] = lat[:, None].expand(-1, self.n).to(dtype)


def _actuator_id(model: mujoco.MjModel, name: str) -> int:
    aid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, name)
    if aid < 0:
        raise ActuatorMismatch(f"model has no actuator {name!r}")
    return aid


def _check_model(robot: Robot, model: mujoco.MjModel, act: PDActuators) -> None:
    """The compiled MJCF must hold robot.yaml's gains, default pose and torque limits."""
    problems = []
    for i, joint in enumerate(robot.spec.joints):
        a = int(act.ids[i])
        kp, kd, q0, lim = joint.kp, joint.kd, joint.default, joint.torque_limit
        expect = {
            "gainprm[0]": (model.actuator_gainprm[a, 0], kp),
            "biasprm[0]": (model.actuator_biasprm[a, 0], kp * q0),
            "biasprm[1]": (model.actuator_biasprm[a, 1], -kp),
            "biasprm[2]": (model.actuator_biasprm[a, 2], -kd),
            "forcerange": (model.actuator_forcerange[a, 1], lim),
        }
        if model.actuator_biastype[a] != mujoco.mjtBias.mjBIAS_AFFINE:
            problems.append(f"{joint.actuator}: needs biastype affine")
        for field, (have, want) in expect.items():
            if abs(float(have) - float(want)) > 1e-6 * max(1.0, abs(want)):
                problems.append(f"{joint.actuator}.{field} is {have:g}, robot.yaml gives {want:g}")
        if model.actuator_forcerange[a, 0] != -model.actuator_forcerange[a, 1] or \
                not model.actuator_forcelimited[a]:
            problems.append(f"{joint.actuator}: forcerange must be +-torque_limit, limited")
    if problems:
        raise ActuatorMismatch(f"{robot.mjcf_path} disagrees with {robot.yaml_path}: " +
                               "; ".join(problems))


class PhysicsMismatch(ValueError):
    """The MJCF's joint or foot parameters disagree with robot.yaml's `physics` nominals."""


def check_physics(robot: Robot, model: mujoco.MjModel) -> None:
    """The compiled MJCF must hold robot.yaml's nominal joint damping, frictionloss and
    armature (physics.joint_*, or a joint's own value) on every joint in `joints`, and its
    nominal foot friction and solimp (physics.foot_*) on every foot's geom. A parameter
    robot.yaml does not give is not checked. The message names each disagreeing field."""
    spec, phys = robot.spec, robot.spec.physics
    problems = []

    def differ(have: float, want: float) -> bool:
        return abs(float(have) - float(want)) > 1e-9 * max(1.0, abs(float(want)))

    for i, joint in enumerate(spec.joints):
        jid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, joint.name)
        if jid < 0:
            continue  # the description's own check names it
        dof = int(model.jnt_dofadr[jid])
        for field in ("damping", "frictionloss", "armature"):
            want = spec.joint_nominal(i, field)
            have = getattr(model, f"dof_{field}")[dof]
            if want is not None and differ(have, want):
                where = (f"joints[{i}].{field}" if getattr(joint, field) is not None
                         else f"physics.joint_{field}.nominal")
                problems.append(f"{joint.name} {field} is {have:g}, robot.yaml {where} gives "
                                f"{want:g}")
    for i, foot in enumerate(spec.feet):
        if foot.geom is None:
            continue
        gid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_GEOM, foot.geom)
        if gid < 0:
            problems.append(f"feet[{i}].geom: no geom {foot.geom!r}")
            continue
        if phys.foot_friction is not None and differ(model.geom_friction[gid, 0],
                                                     phys.foot_friction.nominal):
            problems.append(f"{foot.geom} friction is {model.geom_friction[gid, 0]:g}, "
                            f"robot.yaml physics.foot_friction.nominal gives "
                            f"{phys.foot_friction.nominal:g}")
        if phys.foot_solimp is not None:
            have = [float(x) for x in model.geom_solimp[gid, :3]]
            if any(differ(h, w) for h, w in zip(have, phys.foot_solimp.nominal, strict=True)):
                problems.append(f"{foot.geom} solimp is {' '.join(f'{h:g}' for h in have)}, "
                                f"robot.yaml physics.foot_solimp.nominal gives "
                                f"{' '.join(f'{w:g}' for w in phys.foot_solimp.nominal)}")
    if problems:
        raise PhysicsMismatch(f"{robot.mjcf_path} disagrees with {robot.yaml_path}: " +
                              "; ".join(problems))
