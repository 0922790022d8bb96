"""A simulated robot behind the robot's own topics: the robot side of hardware-in-the-loop.

One robot in a plain `mujoco.MjData`, compiled from the same MJCF the policy was trained on (one
model; only its time step may be made finer, and the joint drivers' gains are written per
command, as a motor driver takes them). It publishes the robot's state topics and obeys its
command topics through deploy/interfaces.py's robot side (`state_messages`, `command_of`), so
the bytes on the wire are those of the real robot's interface, generic or native:

- quadrotor: rotor speed commands (Float64MultiArray fractions, or PX4 ActuatorMotors, obeyed
  only while OffboardControlMode with direct_actuator keeps arriving) drive the first-order
  motor model and thrust map of robot.yaml's `rotor_model` (sim/rotors.py, as in training),
  integrated every physics step. The crazyflie MJCF has no floor: the vehicle rests on a launch
  pad at its initial pose until its rotors lift its weight.
- legged: joint PD as the motor drivers run it, evaluated by MuJoCo at every physics step
  (500 Hz by default: the time step is made finer than training's where it is coarser), with
  the gains of each command (Unitree LowCmd: its q, dq, kp, kd, tau, and a LowCmd whose CRC is
  wrong is ignored, as the firmware does; generic: robot.yaml's kp and kd), clamped to the
  MJCF's torque limits. Legged robots start standing on the floor in their default pose.
- arm (generic only): the same joint drivers with robot.yaml's gains on ros2_control's
  topics, `/joint_states` out and the forward position controller's Float64MultiArray (or,
  with `arm_command: joint_trajectory`, a JointTrajectory) in; gravity is compensated as in
  training (the MJCF's gravcomp). The arm starts in its default pose; the MJCF's cube rests on
  the table. With `object_pose` set, the robot process also plays the perception node of an
  arm-lift setup: the cube's pose as a camera-based estimator publishes it (hil/perception.py).

The robot's own safety, as real drivers have it: when no valid command arrived for
`command_timeout_s` (robot time), joints go to damping (kp 0, kd `damping_kd`) and rotors stop;
it clears when commands return. Until the first command the robot is held still (physics does
not run), as on a stand, while its state is published.

hil/server.py runs it in real time behind the topics; hil/ adds faults and recording.

Run alone (no faults, no recording): `python -m simreal.hil.server --robot go2 --interface native`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import mujoco
import numpy as np
from pydantic import Field

from simreal.core.config import StrictModel
from simreal.deploy.arm import ArmCommand
from simreal.deploy.interfaces import InterfaceError, InterfaceSettings, RobotInterface
from simreal.deploy.registry import UnknownInterfaceError, build_interface, flavours_of
from simreal.hil.perception import ObjectPoseConfig, in_base_frame
from simreal.robots import Robot
from simreal.sim import rotors
from simreal.sim.mjcf import compile_model

log = logging.getLogger("simreal.hil.robot")

GRAVITY = 9.81
LEGGED_PD_DT = 0.002  # s: the joint PD runs at 500 Hz or faster on the robot side
# a held base (hold_base): its free joint's armature, so that the legs swing as from a fixed
# trunk (the mass matrix sees an immovable base) and the IMU reads gravity; the pose and
# velocity are also restored after every step (calibration/replay.py does the same)
HOLD_ARMATURE = 1e6


class HilRobotError(ValueError):
    """A simulated robot that cannot be built; the message names the setting."""


class RobotSimConfig(StrictModel):
    """The simulated robot's settings (the `robot:` section of a HIL scenario)."""

    physics_dt: float | None = Field(
        default=None, gt=0, description="s; default: the robot's, at most 0.002 s for joint "
        "robots (PD at 500 Hz or more)")
    state_rate_hz: float | None = Field(
        default=None, gt=0, description="state publishing rate; default twice the control "
        "rate, at most the physics rate")
    command_timeout_s: float | None = Field(
        default=None, gt=0, description="robot time without a valid command before the "
        "driver's failsafe (joints damp, rotors stop); default 0.25 s legged, 0.5 s quadrotor")
    damping_kd: float = Field(default=1.0, ge=0, description="N m s/rad in the failsafe")
    initial_position: tuple[float, float, float] | None = Field(
        default=None, description="base position (m, world); default: the MJCF's, and for "
        "legged robots standing on the floor")
    motor_index: dict[str, int] = Field(default_factory=dict,
                                        description="Unitree motor index by joint name")
    motor_map: list[int] | None = Field(default=None, description="PX4 motor slot per rotor")
    max_lag_s: float = Field(default=0.1, gt=0,
                             description="behind real time by more than this: slip")
    hold_base: bool = Field(default=False, description="the base held in its initial pose, "
                            "as a robot hung from a gantry with its legs in the air (give "
                            "initial_position above the ground); see HOLD_ARMATURE")
    arm_command: ArmCommand = Field(
        default="forward_position", description="arm: the controller the robot runs (the "
        "node's arm_command; a HIL scenario takes it from its node section)")
    joint_strength: list[float] | None = Field(
        default=None, description="per joint (robot.yaml order), the drivers' torque scale: "
        "the torque they apply, and report, is this times their PD law's (a motor constant "
        "off its nominal; a hidden parameter for calibration tests); default 1")
    object_pose: ObjectPoseConfig | None = Field(
        default=None, description="an arm: publish the object's pose on /object_pose as a "
        "camera-based estimator would (hil/perception.py), for policies that read it")


DEFAULT_TIMEOUT = {"quadrotor": 0.5, "legged": 0.25, "arm": 0.25}
OBJECT_ROLES = ("object_position", "object_orientation")  # robot.yaml sensor roles


def robot_side_interface(robot: Robot, interface: str, cfg: RobotSimConfig) -> RobotInterface:
    """The interface object whose robot side (state_messages, command_of) this robot speaks:
    deploy/registry.py's class for the robot's kind and `interface`, with robot.yaml's gains
    (what the drivers run when a command carries none)."""
    kind = robot.spec.kind
    if kind not in DEFAULT_TIMEOUT:
        raise HilRobotError(f"robot {robot.name!r} is {kind!r}: the HIL robot simulates "
                            "quadrotors, legged robots and arms")
    try:
        return build_interface(robot, interface, InterfaceSettings.of(cfg))
    except UnknownInterfaceError as exc:
        have, article = flavours_of(kind), "an" if kind[0] in "aeiou" else "a"
        raise HilRobotError(f"interface: robot {robot.name!r} is {article} {kind}, which has "
                            f"only the {' and '.join(have)} interface"
                            f"{'s' if len(have) > 1 else ''} ({exc})") from None
    except InterfaceError as exc:
        raise HilRobotError(f"robot.{exc.setting}: {exc}" if exc.setting else str(exc)
                            ) from None


def _id(model: mujoco.MjModel, kind: mujoco.mjtObj, name: str) -> int:
    i = mujoco.mj_name2id(model, kind, name)
    if i < 0:
        raise HilRobotError(f"model has no {kind.name[6:].lower()} {name!r}")
    return i


class _Sensors:
    """Named readings of MJCF sensors (robot.yaml roles and joint sensors) from sensordata."""

    def __init__(self, model: mujoco.MjModel, robot: Robot):
        self.index: dict[str, np.ndarray] = {}
        spec = robot.spec

        def cols(names: list[str]) -> np.ndarray:
            out = []
            for name in names:
                s = _id(model, mujoco.mjtObj.mjOBJ_SENSOR, name)
                adr, dim = int(model.sensor_adr[s]), int(model.sensor_dim[s])
                out.extend(range(adr, adr + dim))
            return np.array(out, dtype=np.int64)

        for role, name in spec.sensors.items():
            self.index[role] = cols([name])
        if spec.joints:
            self.index["joint_pos"] = cols([j.position_sensor for j in spec.joints])
            self.index["joint_vel"] = cols([j.velocity_sensor for j in spec.joints])
            if all(j.torque_sensor for j in spec.joints):
                self.index["joint_effort"] = cols([j.torque_sensor for j in spec.joints])

    def read(self, sensordata: np.ndarray) -> dict[str, np.ndarray]:
        return {k: sensordata[i].copy() for k, i in self.index.items()}


# --- drives: what the robot's motor drivers do with a command ---------------------------------
class RotorDrive:
    """Rotor speeds (fractions of max rpm) through the first-order motor model to thrust."""

    def __init__(self, robot: Robot, model: mujoco.MjModel):
        spec = robot.spec
        self.model_cfg = spec.rotor_model
        self.ids = np.array([_id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, r.actuator)
                             for r in spec.rotors])
        self.speed = np.zeros(len(self.ids))
        self.command = np.zeros(len(self.ids))
        self.alpha = rotors.lag_alpha(float(model.opt.timestep), self.model_cfg.time_constant)

    def set(self, cmd: Mapping[str, np.ndarray]) -> None:
        self.command = np.clip(np.nan_to_num(cmd["rotor_speed"], nan=0.0), 0.0, 1.0)

    def failsafe(self) -> None:
        self.command = np.zeros_like(self.command)  # motors stop

    def before_step(self, data: mujoco.MjData) -> None:
        self.speed = rotors.lag_step(self.speed, self.command, self.alpha)
        data.ctrl[self.ids] = rotors.thrust(self.speed, self.model_cfg.max_thrust)

    def thrust(self) -> np.ndarray:
        return rotors.thrust(self.speed, self.model_cfg.max_thrust)

    def applied(self) -> dict[str, np.ndarray]:
        return {"target": self.command.copy(), "measured": self.speed.copy(),
                "effort": self.thrust()}

    def state(self) -> dict[str, list[float]]:
        return {"speed": self.speed.tolist(), "command": self.command.tolist()}

    def restore(self, s: Mapping[str, list[float]]) -> None:
        self.speed, self.command = np.array(s["speed"]), np.array(s["command"])


class JointDrive:
    """Per-joint PD with feed-forward, as a motor driver runs it:
    tau = clamp(kp (q* - q) + kd (dq* - dq) + tau_ff, +-torque_limit), evaluated by MuJoCo at
    every physics step: the MJCF's affine actuators get gain kp and bias
    (kd dq* + tau_ff, -kp, -kd) and ctrl q*."""

    def __init__(self, robot: Robot, model: mujoco.MjModel, damping_kd: float,
                 strength: list[float] | None = None):
        self.model = model
        spec = robot.spec
        self.ids = np.array([_id(model, mujoco.mjtObj.mjOBJ_ACTUATOR, j.actuator)
                             for j in spec.joints])
        bad = [j.actuator for j, a in zip(spec.joints, self.ids, strict=True)
               if model.actuator_biastype[a] != mujoco.mjtBias.mjBIAS_AFFINE]
        if bad:
            raise HilRobotError(f"{robot.mjcf_path}: actuators {bad} are not affine PD "
                                "(biastype affine); the HIL joint driver writes their gains")
        self.kp_default = np.array([j.kp for j in spec.joints], dtype=np.float64)
        self.kd_default = np.array([j.kd for j in spec.joints], dtype=np.float64)
        self.damping_kd = float(damping_kd)
        self.strength = np.ones(len(self.ids)) if strength is None else \
            np.asarray(strength, dtype=np.float64)
        if self.strength.shape != (len(self.ids),):
            raise HilRobotError(f"robot.joint_strength: {len(self.strength)} values for "
                                f"{len(self.ids)} joints")
        n = len(self.ids)
        self.q, self.dq, self.tau = np.array([j.default for j in spec.joints]), np.zeros(n), \
            np.zeros(n)
        self.kp, self.kd = self.kp_default.copy(), self.kd_default.copy()
        self._write()

    def set(self, cmd: Mapping[str, np.ndarray]) -> None:
        n = len(self.ids)
        self.q = np.asarray(cmd["q"], dtype=np.float64)
        self.dq = np.asarray(cmd.get("dq", np.zeros(n)), dtype=np.float64)
        self.tau = np.asarray(cmd.get("tau", np.zeros(n)), dtype=np.float64)
        self.kp = np.asarray(cmd.get("kp", self.kp_default), dtype=np.float64)
        self.kd = np.asarray(cmd.get("kd", self.kd_default), dtype=np.float64)
        self._write()

    def failsafe(self) -> None:
        n = len(self.ids)
        self.set({"q": self.q, "dq": np.zeros(n), "tau": np.zeros(n), "kp": np.zeros(n),
                  "kd": np.full(n, self.damping_kd)})

    def _write(self) -> None:
        m, a = self.model, self.ids
        s = self.strength
        m.actuator_gainprm[a, 0] = s * self.kp
        m.actuator_biasprm[a, 0] = s * (self.kd * self.dq + self.tau)
        m.actuator_biasprm[a, 1] = -s * self.kp
        m.actuator_biasprm[a, 2] = -s * self.kd

    def before_step(self, data: mujoco.MjData) -> None:
        data.ctrl[self.ids] = self.q

    def applied(self) -> dict[str, np.ndarray]:
        return {"target": self.q.copy(), "kp": self.kp.copy(), "kd": self.kd.copy()}

    def state(self) -> dict[str, list[float]]:
        return {k: getattr(self, k).tolist() for k in ("q", "dq", "tau", "kp", "kd")}

    def restore(self, s: Mapping[str, list[float]]) -> None:
        for k in ("q", "dq", "tau", "kp", "kd"):
            setattr(self, k, np.array(s[k]))
        self._write()


class _ArmTool:
    """An arm's tool centre point: pose and linear velocity from robot.yaml's ee_* sensors,
    angular velocity of the site that carries them (tool frame)."""

    ROLES = ("ee_position", "ee_orientation", "ee_linear_velocity")

    def __init__(self, sensors: _Sensors, robot: Robot):
        missing = [r for r in self.ROLES if r not in sensors.index]
        if missing or robot.spec.kinematics is None:
            raise HilRobotError(f"{robot.yaml_path}: an arm's HIL truth needs sensors "
                                f"{list(self.ROLES)} and kinematics.tool_site (missing: "
                                f"{missing or ['kinematics']})")
        self.sensors = sensors
        self.site_name = robot.spec.kinematics.tool_site
        self.site: int | None = None

    def truth(self, model: mujoco.MjModel, data: mujoco.MjData) -> dict[str, np.ndarray]:
        if self.site is None:
            self.site = _id(model, mujoco.mjtObj.mjOBJ_SITE, self.site_name)
        s = data.sensordata
        idx = self.sensors.index
        vel = np.zeros(6)
        mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_SITE, self.site, vel, 1)
        return {"position": s[idx["ee_position"]].copy(),
                "orientation": s[idx["ee_orientation"]].copy(),
                "linear_velocity": s[idx["ee_linear_velocity"]].copy(),
                "angular_velocity": vel[:3].copy()}


# --- the simulated robot -----------------------------------------------------------------------
class SimRobot:
    """Physics, drivers and sensors of one robot; no transport, no pacing."""

    def __init__(self, robot: Robot, interface: str = "generic",
                 cfg: RobotSimConfig | None = None):
        self.robot, self.cfg = robot, cfg or RobotSimConfig()
        spec = robot.spec
        self.kind = spec.kind
        self.interface = robot_side_interface(robot, interface, self.cfg)
        self.model = compile_model(robot.mjcf_path)
        trained_dt = float(self.model.opt.timestep)
        dt = self.cfg.physics_dt or (min(trained_dt, LEGGED_PD_DT) if spec.joints else trained_dt)
        self.model.opt.timestep = dt
        self.dt = dt
        self.data = mujoco.MjData(self.model)
        self.sensors = _Sensors(self.model, robot)
        self.base = _id(self.model, mujoco.mjtObj.mjOBJ_BODY, spec.base_body)
        if spec.kind == "arm":  # bolted to the world: the tool's pose is the truth to log
            self._tool = _ArmTool(self.sensors, robot)
            for field in ("initial_position", "hold_base"):
                if getattr(self.cfg, field):
                    raise HilRobotError(f"robot.{field}: {robot.name!r} is an arm, fixed to "
                                        "the world")
        jnt = int(self.model.body_jntadr[self.base])
        free = jnt >= 0 and self.model.jnt_type[jnt] == mujoco.mjtJoint.mjJNT_FREE
        if not free and spec.kind != "arm":
            raise HilRobotError(f"{robot.mjcf_path}: base body {spec.base_body!r} has no free "
                                "joint")
        if self.cfg.object_pose is not None:
            missing = [r for r in OBJECT_ROLES if r not in self.sensors.index]
            if missing:
                raise HilRobotError(f"robot.object_pose: {robot.yaml_path} has no sensors "
                                    f"{missing} (the object whose pose is published)")
        self.root_qpos = int(self.model.jnt_qposadr[jnt]) if free else -1
        self.root_dof = int(self.model.jnt_dofadr[jnt]) if free else -1
        if self.cfg.hold_base:
            self.model.dof_armature[self.root_dof:self.root_dof + 6] += HOLD_ARMATURE
        self.drive: RotorDrive | JointDrive
        if spec.kind == "quadrotor":
            self.drive = RotorDrive(robot, self.model)
            self.weight = float(self.model.body_subtreemass[self.base]) * GRAVITY
        else:
            self.drive = JointDrive(robot, self.model, self.cfg.damping_kd,
                                    self.cfg.joint_strength)
        self.timeout = self.cfg.command_timeout_s or DEFAULT_TIMEOUT[spec.kind]
        self.control_rate = spec.control.rate_hz
        self.reset()

    # --- state ------------------------------------------------------------------------------
    def reset(self) -> None:
        """The initial state: held still until the first command."""
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        spec = self.robot.spec
        for j in spec.joints:
            jid = _id(m, mujoco.mjtObj.mjOBJ_JOINT, j.name)
            d.qpos[m.jnt_qposadr[jid]] = j.default
        if self.root_qpos >= 0:  # a floating base to place (an arm is fixed to the world)
            if self.cfg.initial_position is not None:
                d.qpos[self.root_qpos:self.root_qpos + 3] = self.cfg.initial_position
            elif spec.kind == "legged":
                d.qpos[self.root_qpos + 2] -= self._clearance() - 0.001
        mujoco.mj_forward(m, d)
        self.time = 0.0
        self.started = False  # physics runs from the first valid command on
        self.on_pad = spec.kind == "quadrotor"
        self.pad_pose = d.qpos[self.root_qpos:self.root_qpos + 7].copy() \
            if self.root_qpos >= 0 else np.zeros(7)
        self.last_command_time = -math.inf
        self.failsafe_active = False
        self.failsafe_after = math.nan
        self.offboard_time = -math.inf  # PX4: last OffboardControlMode with direct_actuator
        self.commands_applied = 0
        self.commands_rejected = 0
        self._push_force: tuple[np.ndarray, float] | None = None
        if isinstance(self.drive, RotorDrive):
            self.drive.speed[:] = 0.0
            self.drive.command[:] = 0.0

    def _clearance(self) -> float:
        """Height of the robot's lowest geom above the world's planes and heightfields."""
        m, d = self.model, self.data
        mujoco.mj_forward(m, d)
        flat = (int(mujoco.mjtGeom.mjGEOM_PLANE), int(mujoco.mjtGeom.mjGEOM_HFIELD))
        ground = [g for g in range(m.ngeom)
                  if m.geom_bodyid[g] == 0 and int(m.geom_type[g]) in flat]
        mine = [g for g in range(m.ngeom) if m.geom_bodyid[g] != 0]
        if not ground:
            return 0.001
        return min(mujoco.mj_geomDistance(m, d, g, f, 10.0, None) for g in mine for f in ground)

    def snapshot(self) -> dict[str, Any]:
        sig = mujoco.mjtState.mjSTATE_INTEGRATION
        state = np.empty(mujoco.mj_stateSize(self.model, sig))
        mujoco.mj_getState(self.model, self.data, state, sig)
        return {"mj": state.tolist(), "drive": self.drive.state(), "time": self.time,
                "on_pad": self.on_pad}

    def restore(self, snap: Mapping[str, Any]) -> None:
        sig = mujoco.mjtState.mjSTATE_INTEGRATION
        mujoco.mj_setState(self.model, self.data, np.array(snap["mj"]), sig)
        self.drive.restore(snap["drive"])
        self.time = float(snap["time"])
        self.on_pad = bool(snap["on_pad"])
        mujoco.mj_forward(self.model, self.data)

    # --- commands ---------------------------------------------------------------------------
    def apply(self, key: str, msg: Any) -> bool:
        """Obey one command message; False when the robot ignores it (bad CRC, no offboard,
        wrong size)."""
        try:
            cmd = self.interface.command_of(key, msg)
        except ValueError:
            self.commands_rejected += 1
            return False
        if "crc_ok" in cmd and not bool(cmd["crc_ok"]):
            self.commands_rejected += 1  # the Go2 firmware drops a LowCmd with a wrong CRC
            return False
        if "direct_actuator" in cmd:
            if bool(cmd["direct_actuator"]):
                self.offboard_time = self.time
            return True  # PX4's offboard heartbeat, not a motor command
        if self.interface.heartbeat_keys and self.time - self.offboard_time > self.timeout:
            self.commands_rejected += 1  # PX4 obeys actuator_motors only in offboard mode
            return False
        self.drive.set(cmd)
        self.last_command_time = self.time
        self.commands_applied += 1
        self.started = True
        if self.failsafe_active:
            self.failsafe_active = False
        return True

    # --- physics ------------------------------------------------------------------------------
    def step(self) -> str | None:
        """One physics step (nothing before the first command); returns an event name when the
        driver failsafe engages or clears, or the vehicle lifts off its pad."""
        if not self.started:
            return None
        event = None
        if not self.failsafe_active and self.time - self.last_command_time > self.timeout:
            self.failsafe_active = True
            self.failsafe_after = self.time - self.last_command_time  # robot time, s
            self.drive.failsafe()
            event = "failsafe"
        m, d = self.model, self.data
        self.drive.before_step(d)
        if self._push_force is not None:
            force, until = self._push_force
            d.xfrc_applied[self.base, :3] = force if self.time < until else 0.0
            if self.time >= until:
                self._push_force = None
        mujoco.mj_step(m, d)
        self.time += self.dt
        if self.cfg.hold_base:
            d.qpos[self.root_qpos:self.root_qpos + 7] = self.pad_pose
            d.qvel[self.root_dof:self.root_dof + 6] = 0.0
        if self.on_pad:
            if self.drive.thrust().sum() > self.weight:
                self.on_pad = False
                event = "lift_off"
            else:  # resting on the pad: held in its pose
                d.qpos[self.root_qpos:self.root_qpos + 7] = self.pad_pose
                d.qvel[self.root_dof:self.root_dof + 6] = 0.0
        return event

    def push(self, velocity: np.ndarray | None = None, force: np.ndarray | None = None,
             duration_s: float = 0.1) -> None:
        """A change of the base's linear velocity (m/s, world), or a force (N, world) held for
        duration_s."""
        if self.root_dof < 0:
            raise HilRobotError(f"pushes: {self.robot.name!r} is fixed to the world")
        if velocity is not None:
            self.data.qvel[self.root_dof:self.root_dof + 3] += np.asarray(velocity)
        if force is not None:
            self._push_force = (np.asarray(force, dtype=np.float64), self.time + duration_s)

    # --- readings -----------------------------------------------------------------------------
    def signals(self) -> dict[str, np.ndarray]:
        """What the robot's sensors report (as of the last physics step)."""
        return self.sensors.read(self.data.sensordata)

    def truth(self) -> dict[str, np.ndarray]:
        """The base's true pose and velocity (world position and linear velocity, body angular
        velocity), for logs and reports; the policy never sees it. An arm's is its tool
        centre point's (robot.yaml's ee_* sensors; angular velocity in the tool frame)."""
        if self.root_qpos < 0:
            tool = self._tool.truth(self.model, self.data)
            if "object_position" in self.sensors.index:  # where the object is (arm-lift)
                tool["object_position"] = self.data.sensordata[
                    self.sensors.index["object_position"]].copy()
            return tool
        d = self.data
        q = d.qpos[self.root_qpos + 3:self.root_qpos + 7].copy()
        v_world = d.qvel[self.root_dof:self.root_dof + 3].copy()
        return {"position": d.qpos[self.root_qpos:self.root_qpos + 3].copy(),
                "orientation": q, "linear_velocity": v_world,
                "angular_velocity": d.qvel[self.root_dof + 3:self.root_dof + 6].copy()}

    def object_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """The object's true pose in the base body's frame (position, quaternion w, x, y, z),
        what a perception node publishes."""
        s, idx, d = self.data.sensordata, self.sensors.index, self.data
        return in_base_frame(s[idx["object_position"]], s[idx["object_orientation"]],
                             d.xpos[self.base], d.xquat[self.base])

    def joint_truth(self) -> dict[str, np.ndarray]:
        """Per actuator: the driver's target and the measured value (joint angle or rotor
        speed)."""
        out = self.drive.applied()
        if isinstance(self.drive, JointDrive):
            s = self.signals()
            out["measured"] = s["joint_pos"]
            if "joint_effort" in s:
                out["effort"] = s["joint_effort"]
        return out
