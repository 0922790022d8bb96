"""The parameters a calibration estimates, per robot kind, and where each lives in a model.

Legged robots (per joint j, named `<joint>.<kind>`):
- `strength`: the driver's torque scale (a motor constant off its nominal): the torque it
  applies, and reports, is `strength` times its PD law's, before its clamp, as the training
  task's motor strength (sim/actuators.py). The effective PD gains are strength * kp and
  strength * kd. Not an MJCF field (MuJoCo's gear would scale the joint angle the PD sees as
  well): the replay scales the gains it writes, and a calibration carries it into the task's
  motor_strength range.
- `damping`, `frictionloss`, `armature`: the joint's passive viscous damping (N m s/rad),
  Coulomb friction (N m) and reflected rotor inertia (kg m^2), MJCF joint attributes.
- `offset`: the encoder's zero offset (rad): it reads the true angle plus the offset. In the
  MJCF it is the joint's `ref` (MuJoCo turns a body by qpos - ref), with the joint range moved
  by as much, so that the range stays the mechanical stop in true angles; the sensor, the
  driver and the policy all work in measured angles, as on the robot.
- `torque_limit`: the driver's clamp (N m), MJCF actuator forcerange and robot.yaml.
- `latency` (one for the robot): command to driver, seconds.

Quadrotors: `mass` (kg, the base body), `thrust_coefficient` and `torque_coefficient`
(robot.yaml's N/RPM^2 and N m/RPM^2; the motor's top speed is taken as known, so thrust scales
with the coefficient: thrust = max_thrust * (kf / kf_nominal) * speed^2, and the yaw reaction
is the MJCF gear ratio km/kf), `motor_time_constant` (s) and `latency`.

IMU biases (`imu.gyro_bias.x` ...; legged also `imu.accel_bias.*`) come from still periods in
closed form (fit.py), not from the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass

import mujoco
import numpy as np

from simreal.calibration.schema import UNITS
from simreal.robots import Robot

JOINT_KINDS = ("strength", "damping", "frictionloss", "armature", "offset", "torque_limit")
QUAD_KINDS = ("mass", "thrust_coefficient", "torque_coefficient", "motor_time_constant")
AXES = ("x", "y", "z")

MAX_LATENCY = 0.04  # s: the fit's bound


class ParamError(ValueError):
    """A parameter name or value a robot does not have."""


@dataclass(frozen=True)
class Param:
    name: str
    kind: str
    index: int  # joint (policy order) or axis; -1 for robot-wide parameters
    nominal: float
    lower: float
    upper: float
    scale: float  # a typical size: the optimizer's unit for this parameter
    group: int | None = None  # legged: the leg; parameters of different legs never interact

    @property
    def unit(self) -> str:
        return UNITS[self.kind]


def _id(model: mujoco.MjModel, kind: mujoco.mjtObj, name: str) -> int:
    i = mujoco.mj_name2id(model, kind, name)
    if i < 0:
        raise ParamError(f"model has no {kind.name[6:].lower()} {name!r}")
    return i


def imu_params(robot: Robot) -> list[Param]:
    """The IMU biases a still period gives (closed form)."""
    out = [Param(f"imu.gyro_bias.{a}", "gyro_bias", i, 0.0, -1.0, 1.0, 0.01)
           for i, a in enumerate(AXES)]
    if robot.spec.kind == "legged" and "linear_acceleration" in robot.spec.sensors:
        out += [Param(f"imu.accel_bias.{a}", "accel_bias", i, 0.0, -5.0, 5.0, 0.1)
                for i, a in enumerate(AXES)]
    return out


def _leg(name: str) -> int | None:
    for i, leg in enumerate(("FR", "FL", "RR", "RL")):
        if name.startswith(leg + "_"):
            return i
    return None


class ParamSet:
    """An ordered set of simulator parameters of one robot, and how to write them into a
    (batch of) model(s). `kinds` selects which are estimated; the others keep the model's."""

    def __init__(self, robot: Robot, model: mujoco.MjModel, kinds: tuple[str, ...] | None = None):
        self.robot, spec = robot, robot.spec
        self.kind = spec.kind
        self.params: list[Param] = []
        if self.kind == "legged":
            self._init_legged(model, kinds or (*JOINT_KINDS, "latency"))
        elif self.kind == "quadrotor":
            self._init_quad(model, kinds or (*QUAD_KINDS, "latency"))
        else:
            raise ParamError(f"robot {robot.name!r} is {self.kind!r}: calibration covers legged "
                             "robots and quadrotors")
        if "latency" in (kinds or ("latency",)):
            delay = float(model.actuator_delay[self._act[0]]) if len(self._act) else 0.0
            self.params.append(Param("latency", "latency", -1, delay, 0.0, MAX_LATENCY, 0.005))
        self.names = [p.name for p in self.params]
        self.index = {n: i for i, n in enumerate(self.names)}
        self.nominal = np.array([p.nominal for p in self.params])
        self.lower = np.array([p.lower for p in self.params])
        self.upper = np.array([p.upper for p in self.params])
        self.scale = np.array([p.scale for p in self.params])

    # --- catalogues ------------------------------------------------------------------------
    def _init_legged(self, m: mujoco.MjModel, kinds: tuple[str, ...]) -> None:
        joints = self.robot.spec.joints
        self._act = np.array([_id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, j.actuator) for j in joints])
        self._jnt = np.array([_id(m, mujoco.mjtObj.mjOBJ_JOINT, j.name) for j in joints])
        self._dof = m.jnt_dofadr[self._jnt].copy()
        self._qadr = m.jnt_qposadr[self._jnt].copy()
        self.base_fields = {
            "dof_damping": m.dof_damping.copy(),
            "dof_frictionloss": m.dof_frictionloss.copy(),
            "dof_armature": m.dof_armature.copy(), "qpos0": m.qpos0.copy(),
            "jnt_range": m.jnt_range.copy(), "actuator_forcerange": m.actuator_forcerange.copy()}
        for kind in JOINT_KINDS:
            if kind not in kinds:
                continue
            for j, joint in enumerate(joints):
                a, d, jid = self._act[j], self._dof[j], self._jnt[j]
                nominal, lo, hi, scale = {
                    "strength": (1.0, 0.5, 1.5, 0.1),
                    "damping": (m.dof_damping[d], 0.0, 5.0, 0.1),
                    "frictionloss": (m.dof_frictionloss[d], 0.0, 5.0, 0.1),
                    "armature": (m.dof_armature[d], 1e-4, 0.2, 0.01),
                    "offset": (m.qpos0[self._qadr[j]], -0.3, 0.3, 0.02),
                    "torque_limit": (m.actuator_forcerange[a, 1], 0.3 * m.actuator_forcerange[
                        a, 1], 2.0 * m.actuator_forcerange[a, 1], 0.1 * m.actuator_forcerange[
                        a, 1]),
                }[kind]
                if kind == "offset" and m.jnt_type[jid] != mujoco.mjtJoint.mjJNT_HINGE:
                    continue
                self.params.append(Param(f"{joint.name}.{kind}", kind, j, float(nominal),
                                         float(lo), float(hi), float(scale), _leg(joint.name)))

    def _init_quad(self, m: mujoco.MjModel, kinds: tuple[str, ...]) -> None:
        spec = self.robot.spec
        rm = spec.rotor_model
        self._act = np.array([_id(m, mujoco.mjtObj.mjOBJ_ACTUATOR, r.actuator)
                              for r in spec.rotors])
        self._base = _id(m, mujoco.mjtObj.mjOBJ_BODY, spec.base_body)
        self._spin = np.sign(m.actuator_gear[self._act, 5])
        self.base_fields = {"actuator_gear": m.actuator_gear.copy(),
                            "body_mass": m.body_mass.copy()}
        table = {
            "mass": (float(m.body_mass[self._base]), 0.3, 3.0, 0.1),
            "thrust_coefficient": (rm.thrust_coefficient, 0.3, 3.0, 0.1),
            "torque_coefficient": (rm.torque_coefficient, 0.1, 10.0, 0.1),
            "motor_time_constant": (rm.time_constant, 0.1, 5.0, 0.1),
        }
        for kind in QUAD_KINDS:
            if kind in kinds:
                nominal, lo, hi, scale = table[kind]
                self.params.append(Param(kind, kind, -1, nominal, lo * nominal, hi * nominal,
                                         scale * nominal))

    # --- values --------------------------------------------------------------------------------
    def values_of(self, estimates: dict[str, float]) -> np.ndarray:
        """The parameter vector, the nominal where `estimates` has no value."""
        x = self.nominal.copy()
        for name, v in estimates.items():
            if name in self.index:
                x[self.index[name]] = v
        return x

    def get(self, x: np.ndarray, kind: str, default: float | np.ndarray = 0.0) -> np.ndarray:
        """Per-row values of one robot-wide parameter: (nsim,) from (nsim, n)."""
        if kind in self.index:
            return x[:, self.index[kind]]
        return np.broadcast_to(np.asarray(default, dtype=np.float64), x.shape[:1]).copy()

    def fields(self) -> tuple[str, ...]:
        """The model fields write_model writes (expanded per simulation in a batch)."""
        return tuple(self.base_fields)

    def write_model(self, fields: dict[str, np.ndarray], x: np.ndarray) -> None:
        """Write rows of parameter values x (nsim, n) into per-simulation model fields
        (nsim, ...): the base model's values, then each parameter's effect."""
        for name, base in self.base_fields.items():
            fields[name][:] = base
        for i, p in enumerate(self.params):
            v = x[:, i]
            if self.kind == "legged":
                j = p.index
                if p.kind == "strength":
                    continue  # the drivers' gains: strength()
                if p.kind == "damping":
                    fields["dof_damping"][:, self._dof[j]] = v
                elif p.kind == "frictionloss":
                    fields["dof_frictionloss"][:, self._dof[j]] = v
                elif p.kind == "armature":
                    fields["dof_armature"][:, self._dof[j]] = v
                elif p.kind == "offset":
                    q0 = self.base_fields["qpos0"][self._qadr[j]]
                    fields["qpos0"][:, self._qadr[j]] = v
                    rng = self.base_fields["jnt_range"][self._jnt[j]]
                    fields["jnt_range"][:, self._jnt[j], :] = rng[None, :] + (v - q0)[:, None]
                elif p.kind == "torque_limit":
                    fields["actuator_forcerange"][:, self._act[j], 0] = -v
                    fields["actuator_forcerange"][:, self._act[j], 1] = v
            elif p.kind == "mass":
                fields["body_mass"][:, self._base] = v
        if self.kind == "quadrotor":
            rm = self.robot.spec.rotor_model
            kf = self.get(x, "thrust_coefficient", rm.thrust_coefficient)
            km = self.get(x, "torque_coefficient", rm.torque_coefficient)
            ratio = km / kf
            fields["actuator_gear"][:, self._act, 5] = self._spin[None, :] * ratio[:, None]

    def strength(self, x: np.ndarray) -> np.ndarray:
        """Legged: (nsim, njoint) driver torque scales (1 where not estimated)."""
        out = np.ones((len(x), len(self.robot.spec.joints)))
        for i, p in enumerate(self.params):
            if p.kind == "strength":
                out[:, p.index] = x[:, i]
        return out

    def thrust_scale(self, x: np.ndarray) -> np.ndarray:
        """Quadrotor: thrust relative to robot.yaml's map, per row."""
        rm = self.robot.spec.rotor_model
        return self.get(x, "thrust_coefficient", rm.thrust_coefficient) / rm.thrust_coefficient

    def motor_time_constant(self, x: np.ndarray) -> np.ndarray:
        return self.get(x, "motor_time_constant", self.robot.spec.rotor_model.time_constant)

    def latency(self, x: np.ndarray) -> np.ndarray:
        return self.get(x, "latency", 0.0)
