"""A robot's wire interface: which topics carry its state and commands, and their codecs.

Four interfaces, by robot kind and flavour:

- joint robots (legged, arm), generic: sensor_msgs/JointState `/joint_states` and
  sensor_msgs/Imu `/imu/data` in; std_msgs/Float64MultiArray joint position targets out on
  `/forward_position_controller/commands` (ros2_control's forward command controller).
- legged, native (Unitree Go2): `unitree_go/LowState` `/lowstate` in, `LowCmd` `/lowcmd` out
  (DDS `rt/lowstate`, `rt/lowcmd`) with per-joint kp, kd and the firmware's CRC.
- quadrotor, generic: nav_msgs/Odometry `/odom` in; Float64MultiArray rotor speed fractions
  out on `/rotor_commands`.
- quadrotor, native (PX4): px4_msgs VehicleOdometry `/fmu/out/vehicle_odometry` in;
  ActuatorMotors `/fmu/in/actuator_motors` and OffboardControlMode
  `/fmu/in/offboard_control_mode` out.

Each interface works both ways: the node decodes state and encodes commands; a robot-side
simulator (hardware-in-the-loop) encodes state with `state_messages` and decodes commands with
`command_of`, through the same codecs. Topic names are defaults that the node configuration
can override by key.

Damping, the command of the DAMP and ESTOP modes: joint robots get their measured pose as the
position target (generic: the drivers' PD then only resists motion) or zero stiffness with
damping gain `damping_kd` (Unitree native); a quadrotor's motors stop (zero command; NaN,
PX4's "disarmed", natively).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from simreal.deploy import codecs, px4, unitree
from simreal.deploy import messages as m
from simreal.deploy.safety import Mode
from simreal.deploy.transport import QoS
from simreal.robots import Robot

Signals = dict[str, np.ndarray]


@dataclass(frozen=True)
class TopicSpec:
    key: str  # the name the configuration overrides it by
    default: str  # ROS 2 topic name
    type: type
    qos: QoS


class RobotInterface(ABC):
    name = ""
    state_topics: tuple[TopicSpec, ...] = ()
    command_topics: tuple[TopicSpec, ...] = ()
    provides: frozenset[str] = frozenset()  # the signals decoding gives

    def __init__(self, robot: Robot):
        self.robot = robot

    # --- node side ----------------------------------------------------------------------
    @abstractmethod
    def decode(self, key: str, msg: Any) -> Signals:
        """Signals from one state message (ValueError when it cannot be used)."""

    @abstractmethod
    def encode(self, command: np.ndarray, mode: Mode, signals: Signals) -> list[tuple[str, Any]]:
        """(topic key, message) to publish for this period's safe command."""

    def measured(self, signals: Signals) -> np.ndarray | None:
        """The robot's pose in command space (the start of a soft-start ramp), if it has one."""
        return None

    @abstractmethod
    def damping(self, signals: Signals) -> np.ndarray:
        """The command vector of DAMP and ESTOP for the current state."""

    # --- robot side (a simulated robot speaking this interface) ------------------------------
    @abstractmethod
    def state_messages(self, signals: Mapping[str, np.ndarray], t: float | None = None
                       ) -> list[tuple[str, Any]]:
        """(topic key, message) a robot publishes for its current signals, in publishing
        order: the first of `state_topics`, which paces a lock-step node, comes last."""

    @abstractmethod
    def command_of(self, key: str, msg: Any) -> dict[str, np.ndarray]:
        """What a robot applies from a command message (policy order)."""


def _now_us() -> int:
    return time.monotonic_ns() // 1000


def _last_finite(held: np.ndarray | None, pose: np.ndarray) -> np.ndarray:
    """`pose` where finite, else the last finite value held for that joint (else 0): a damping
    command must never carry NaN, which a driver's PD would turn into NaN torque even at kp 0
    (0 * NaN is NaN) during a burst of corrupted sensor data."""
    base = np.zeros_like(pose, dtype=np.float64) if held is None else held
    return np.where(np.isfinite(pose), pose, base)


# --- joint robots -----------------------------------------------------------------------------
class JointGeneric(RobotInterface):
    name = "generic"
    state_topics = (TopicSpec("joint_states", "/joint_states", m.JointState, QoS.SENSOR),
                    TopicSpec("imu", "/imu/data", m.Imu, QoS.SENSOR))
    command_topics = (TopicSpec("command", "/forward_position_controller/commands",
                                m.Float64MultiArray, QoS.COMMAND),)
    provides = frozenset({"joint_pos", "joint_vel", "joint_effort", "orientation",
                          "angular_velocity", "linear_acceleration"})

    def __init__(self, robot: Robot):
        super().__init__(robot)
        self.joint_names = [j.name for j in robot.spec.joints]
        self.order = codecs.JointOrder(self.joint_names)
        self._held: np.ndarray | None = None  # the last finite measured pose (damping)

    def decode(self, key: str, msg: Any) -> Signals:
        if key == "joint_states":
            signals = codecs.joint_state_signals(msg, self.order)
            self._held = _last_finite(self._held, signals["joint_pos"])
            return signals
        return codecs.imu_signals(msg)

    def encode(self, command: np.ndarray, mode: Mode, signals: Signals) -> list[tuple[str, Any]]:
        return [("command", codecs.multi_array(command, "joint_position"))]

    def measured(self, signals: Signals) -> np.ndarray | None:
        return signals["joint_pos"]

    def damping(self, signals: Signals) -> np.ndarray:
        return _last_finite(self._held, signals["joint_pos"])

    def state_messages(self, signals: Mapping[str, np.ndarray], t: float | None = None
                       ) -> list[tuple[str, Any]]:
        return [("imu", codecs.imu(signals["orientation"], signals["angular_velocity"],
                                   signals.get("linear_acceleration"), t)),
                ("joint_states", codecs.joint_state(self.joint_names, signals["joint_pos"],
                                                    signals["joint_vel"],
                                                    signals.get("joint_effort"), t))]

    def command_of(self, key: str, msg: Any) -> dict[str, np.ndarray]:
        return {"q": codecs.multi_array_values(msg, len(self.joint_names))}


class Go2Native(RobotInterface):
    name = "native"
    state_topics = (TopicSpec("lowstate", "/lowstate", unitree.LowState, QoS.SENSOR),)
    command_topics = (TopicSpec("lowcmd", "/lowcmd", unitree.LowCmd, QoS.COMMAND),)
    provides = frozenset({"joint_pos", "joint_vel", "joint_effort", "orientation",
                          "angular_velocity", "linear_acceleration"})

    def __init__(self, robot: Robot, kp: np.ndarray, kd: np.ndarray, damping_kd: float,
                 motor_index: Mapping[str, int] | None = None):
        super().__init__(robot)
        self.joint_names = [j.name for j in robot.spec.joints]
        self.index = unitree.motor_indices(self.joint_names, motor_index)
        self.kp, self.kd = np.asarray(kp, dtype=np.float64), np.asarray(kd, dtype=np.float64)
        self.damping_kd = np.full(len(self.index), float(damping_kd))
        self.crc_errors = 0
        self._tick = 0
        self._held: np.ndarray | None = None  # the last finite measured pose (damping)

    def decode(self, key: str, msg: Any) -> Signals:
        if not unitree.crc_ok(msg):
            self.crc_errors += 1  # counted, not fatal: DDS checks integrity on the wire
        signals = unitree.state_signals(msg, self.index)
        self._held = _last_finite(self._held, signals["joint_pos"])
        return signals

    def encode(self, command: np.ndarray, mode: Mode, signals: Signals) -> list[tuple[str, Any]]:
        if mode in (Mode.DAMP, Mode.ESTOP):
            msg = unitree.low_cmd(self.index, self.damping(signals), np.zeros_like(self.kp),
                                  self.damping_kd)
        else:
            msg = unitree.low_cmd(self.index, command, self.kp, self.kd)
        return [("lowcmd", msg)]

    def measured(self, signals: Signals) -> np.ndarray | None:
        return signals["joint_pos"]

    def damping(self, signals: Signals) -> np.ndarray:
        return _last_finite(self._held, signals["joint_pos"])

    def state_messages(self, signals: Mapping[str, np.ndarray], t: float | None = None
                       ) -> list[tuple[str, Any]]:
        self._tick += 1
        return [("lowstate", unitree.low_state(signals, self.index, self._tick))]

    def command_of(self, key: str, msg: Any) -> dict[str, np.ndarray]:
        out = unitree.cmd_targets(msg, self.index)
        out["crc_ok"] = np.array(unitree.crc_ok(msg))
        return out


# --- quadrotors --------------------------------------------------------------------------------
class QuadGeneric(RobotInterface):
    name = "generic"
    state_topics = (TopicSpec("odometry", "/odom", m.Odometry, QoS.SENSOR),)
    command_topics = (TopicSpec("command", "/rotor_commands", m.Float64MultiArray,
                                QoS.COMMAND),)
    provides = frozenset({"position", "orientation", "linear_velocity", "angular_velocity"})

    def decode(self, key: str, msg: Any) -> Signals:
        return codecs.odometry_signals(msg)

    def encode(self, command: np.ndarray, mode: Mode, signals: Signals) -> list[tuple[str, Any]]:
        return [("command", codecs.multi_array(command, "rotor_speed_fraction"))]

    def damping(self, signals: Signals) -> np.ndarray:
        return np.zeros(len(self.robot.actuator_names))

    def state_messages(self, signals: Mapping[str, np.ndarray], t: float | None = None
                       ) -> list[tuple[str, Any]]:
        return [("odometry", codecs.odometry(signals["position"], signals["orientation"],
                                             signals["linear_velocity"],
                                             signals["angular_velocity"], t))]

    def command_of(self, key: str, msg: Any) -> dict[str, np.ndarray]:
        return {"rotor_speed": codecs.multi_array_values(msg, len(self.robot.actuator_names))}


class Px4Native(RobotInterface):
    name = "native"
    state_topics = (TopicSpec("vehicle_odometry", "/fmu/out/vehicle_odometry",
                              px4.VehicleOdometry, QoS.SENSOR),)
    command_topics = (TopicSpec("actuator_motors", "/fmu/in/actuator_motors",
                                px4.ActuatorMotors, QoS.COMMAND),
                      TopicSpec("offboard_control_mode", "/fmu/in/offboard_control_mode",
                                px4.OffboardControlMode, QoS.COMMAND))
    provides = frozenset({"position", "orientation", "linear_velocity", "angular_velocity"})

    def __init__(self, robot: Robot, motor_map: Sequence[int] | None = None):
        super().__init__(robot)
        n = len(robot.actuator_names)
        self.motor_map = list(range(n)) if motor_map is None else [int(i) for i in motor_map]
        if len(self.motor_map) != n or len(set(self.motor_map)) != n or \
                not all(0 <= i < px4.NUM_CONTROLS for i in self.motor_map):
            raise ValueError(f"motor_map {self.motor_map} must name {n} distinct PX4 motor "
                             f"slots in 0..{px4.NUM_CONTROLS - 1}")

    def decode(self, key: str, msg: Any) -> Signals:
        return px4.odometry_signals(msg)

    def encode(self, command: np.ndarray, mode: Mode, signals: Signals) -> list[tuple[str, Any]]:
        t = _now_us()
        stopped = mode in (Mode.DAMP, Mode.ESTOP)
        return [("offboard_control_mode", px4.offboard_control_mode(t)),
                ("actuator_motors", px4.actuator_motors(None if stopped else command,
                                                        self.motor_map, t))]

    def damping(self, signals: Signals) -> np.ndarray:
        return np.zeros(len(self.robot.actuator_names))

    def state_messages(self, signals: Mapping[str, np.ndarray], t: float | None = None
                       ) -> list[tuple[str, Any]]:
        return [("vehicle_odometry", px4.vehicle_odometry(signals, _now_us()))]

    def command_of(self, key: str, msg: Any) -> dict[str, np.ndarray]:
        if key == "offboard_control_mode":
            return {"direct_actuator": np.array(bool(msg.direct_actuator))}
        return {"rotor_speed": px4.motor_speed_fractions(msg, self.motor_map)}


# --- user inputs (every robot) -----------------------------------------------------------------
INPUT_TOPICS = (
    TopicSpec("cmd_vel", "/cmd_vel", m.Twist, QoS.COMMAND),  # -> velocity_command
    TopicSpec("target_position", "/target_position", m.PointStamped, QoS.COMMAND),
    # arms (deploy/arm.py): a tool pose -> target_position, target_orientation; a height
    TopicSpec("target_pose", "/target_pose", m.PoseStamped, QoS.COMMAND),
    TopicSpec("lift_height", "/lift_height", m.Float64, QoS.COMMAND),
    TopicSpec("estop", "/simreal/estop", m.Bool, QoS.COMMAND),  # true engages (latched)
    TopicSpec("estop_reset", "/simreal/estop_reset", m.Bool, QoS.COMMAND),  # true resets
)
COMMAND_INPUTS = {"velocity_command": "cmd_vel", "target_position": "target_position",
                  "target_orientation": "target_pose", "lift_height": "lift_height"}
