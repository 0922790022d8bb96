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

Which class serves a (robot kind, flavour) is deploy/registry.py's table; every class is built
from the robot and an `InterfaceSettings` by `from_settings`, and carries what the node, the HIL
robot and calibration need to know about it (`raw_command`, `raw_damping`, `status`,
`nonfinite_disarms`, `heartbeat_keys`, `command_problem`), so none of them asks which class it is.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from simreal.deploy import codecs, px4, unitree
from simreal.deploy import messages as m
from simreal.deploy.safety import Mode
from simreal.deploy.transport import QoS
from simreal.robots import Robot

if TYPE_CHECKING:
    from simreal.deploy.limits import CommandLimits

Signals = dict[str, np.ndarray]
Messages = list[tuple[str, Any]]  # (topic key, message)


class InterfaceError(ValueError):
    """An interface that cannot be built from its settings; `setting` names the settings field
    at fault (motor_map, motor_index, ...) where one is, so each caller can point at its own
    configuration (the node's YAML, a HIL scenario's `robot:` section)."""

    setting: str | None = None

    def __init__(self, message: str, setting: str | None = None):
        super().__init__(message)
        self.setting = setting


@dataclass(frozen=True, eq=False)
class InterfaceSettings:
    """What an interface may need beyond the robot description. The node's NodeConfig and the
    HIL robot's RobotSimConfig carry these fields under the same names (`of`); each class
    reads the ones it needs in `from_settings`."""

    kp: np.ndarray | None = None  # per joint; None: robot.yaml's (the node: the contract's)
    kd: np.ndarray | None = None
    damping_kd: float = 1.0  # N m s/rad, a native joint interface's damping gain
    motor_index: Mapping[str, int] | None = None  # Unitree motor index by joint name
    motor_map: Sequence[int] | None = None  # PX4 motor slot per rotor
    arm_command: str = "forward_position"  # deploy/arm.py ArmCommand
    reads: frozenset[str] = frozenset()  # the signals the policy reads (optional topics)

    @classmethod
    def of(cls, config: Any, **overrides: Any) -> InterfaceSettings:
        """The fields `config` has (a NodeConfig, a RobotSimConfig), then `overrides`."""
        found = {f.name: getattr(config, f.name) for f in fields(cls) if hasattr(config, f.name)}
        return cls(**{**found, **overrides})


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
    # command topics that keep the robot listening rather than carry a command (PX4's
    # offboard_control_mode; command_of gives {"direct_actuator": bool}): the robot obeys the
    # others only while these keep arriving, and latency is measured on the others
    heartbeat_keys: ClassVar[frozenset[str]] = frozenset()
    # a non-finite value in a command means "stop this motor" to the robot (PX4: disarmed),
    # not a fault
    nonfinite_disarms: ClassVar[bool] = False

    def __init__(self, robot: Robot):
        self.robot = robot

    @classmethod
    def from_settings(cls, robot: Robot, settings: InterfaceSettings) -> RobotInterface:
        """The one constructor the node, the HIL robot and calibration call (deploy/registry.py
        `make_interface`); InterfaceError names the setting that does not fit."""
        return cls(robot)

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

    # --- straight to the drivers (calibration experiments: no safety layer) ----------------
    def raw_command(self, cmd: Mapping[str, np.ndarray]) -> Messages:
        """(topic key, message) carrying an experiment's command: `q` (with `kp`, `kd` where
        the interface sends gains) for joints, `rotor_speed` for rotors."""
        raise NotImplementedError(f"no command encoding for interface {type(self).__name__}")

    def raw_damping(self, signals: Mapping[str, np.ndarray]) -> Messages:
        """What an experiment sends when it stops: joints damped, rotors stopped."""
        raise NotImplementedError(f"no damping command for interface {type(self).__name__}")

    # --- reporting and checks ------------------------------------------------------------------
    def status(self) -> dict[str, int]:
        """Counters for the node's status line (name -> value)."""
        return {}

    def command_problem(self, cmd: Mapping[str, np.ndarray], limits: CommandLimits) -> str:
        """What is wrong with a sent command (`command_of`'s reading) beyond its range, which
        the caller checks: '' when nothing."""
        return ""


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

    def __init__(self, robot: Robot, need_effort: bool = False):
        super().__init__(robot)
        self.joint_names = [j.name for j in robot.spec.joints]
        self.order = codecs.JointOrder(self.joint_names)
        self._held: np.ndarray | None = None  # the last finite measured pose (damping)
        self.need_effort = need_effort

    @classmethod
    def from_settings(cls, robot: Robot, settings: InterfaceSettings) -> JointGeneric:
        return cls(robot, need_effort="joint_effort" in settings.reads)

    def decode(self, key: str, msg: Any) -> Signals:
        if key == "joint_states":
            signals = codecs.joint_state_signals(msg, self.order, need_effort=self.need_effort)
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

    def raw_command(self, cmd: Mapping[str, np.ndarray]) -> Messages:
        return [("command", codecs.multi_array(cmd["q"], "joint_position"))]

    def raw_damping(self, signals: Mapping[str, np.ndarray]) -> Messages:
        if "joint_pos" not in signals:
            return []  # no pose to hold yet: send nothing
        return self.raw_command({"q": signals["joint_pos"]})


def _joint_gains(robot: Robot, given: np.ndarray | None, name: str) -> np.ndarray | None:
    """`given` gains, else robot.yaml's (None when a joint has none)."""
    if given is not None:
        return given
    values = [getattr(j, name) for j in robot.spec.joints]
    return None if any(v is None for v in values) else np.array(values, dtype=np.float64)


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

    @classmethod
    def from_settings(cls, robot: Robot, settings: InterfaceSettings) -> Go2Native:
        kp = _joint_gains(robot, settings.kp, "kp")
        kd = _joint_gains(robot, settings.kd, "kd")
        if kp is None or kd is None:
            raise InterfaceError(f"robot {robot.name!r}: the Unitree interface sends kp and kd "
                                 "per joint; give them in the contract (action.kp/kd) or "
                                 "robot.yaml")
        try:
            return cls(robot, kp, kd, settings.damping_kd, settings.motor_index)
        except ValueError as exc:
            raise InterfaceError(str(exc), "motor_index") from None

    def decode(self, key: str, msg: Any) -> Signals:
        if not unitree.crc_ok(msg):
            self.crc_errors += 1  # counted, not fatal: DDS checks integrity on the wire
        signals = unitree.state_signals(msg, self.index)
        self._held = _last_finite(self._held, signals["joint_pos"])
        return signals

    def encode(self, command: np.ndarray, mode: Mode, signals: Signals) -> list[tuple[str, Any]]:
        if mode in (Mode.DAMP, Mode.ESTOP):
            # `command` is the node's damping pose, brought inside the joint ranges (a fallen
            # robot's hip can rest past its range): kp 0 makes q moot, but no target leaves them
            msg = unitree.low_cmd(self.index, command, np.zeros_like(self.kp), self.damping_kd)
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

    def raw_command(self, cmd: Mapping[str, np.ndarray]) -> Messages:
        return [("lowcmd", unitree.low_cmd(self.index, cmd["q"], cmd["kp"], cmd["kd"]))]

    def raw_damping(self, signals: Mapping[str, np.ndarray]) -> Messages:
        n = len(self.index)
        q = signals.get("joint_pos", np.zeros(n))
        return self.raw_command({"q": q, "kp": np.zeros(n), "kd": self.damping_kd})

    def status(self) -> dict[str, int]:
        return {"crc_errors": self.crc_errors}

    def command_problem(self, cmd: Mapping[str, np.ndarray], limits: CommandLimits) -> str:
        if not cmd["crc_ok"]:
            return "LowCmd CRC wrong"
        if limits.kp is None or limits.kd is None:
            return ""  # no gains to hold the command's to (from_settings refuses this)
        kp_max = limits.kp * (1 + 1e-6) + 1e-6
        kd_max = np.maximum(limits.kd, self.damping_kd) * (1 + 1e-6) + 1e-6
        if (cmd["kp"] > kp_max).any() or (cmd["kd"] > kd_max).any():
            return f"gains kp {cmd['kp'].tolist()} kd {cmd['kd'].tolist()} above the contract's"
        if np.abs(cmd["tau"]).max() > 0 or np.abs(cmd["dq"]).max() > 0:
            return "feed-forward torque or velocity target sent"
        return ""


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

    def raw_command(self, cmd: Mapping[str, np.ndarray]) -> Messages:
        return [("command", codecs.multi_array(cmd["rotor_speed"], "rotor_speed_fraction"))]

    def raw_damping(self, signals: Mapping[str, np.ndarray]) -> Messages:
        return self.raw_command({"rotor_speed": np.zeros(len(self.robot.actuator_names))})


class Px4Native(RobotInterface):
    name = "native"
    state_topics = (TopicSpec("vehicle_odometry", "/fmu/out/vehicle_odometry",
                              px4.VehicleOdometry, QoS.SENSOR),)
    command_topics = (TopicSpec("actuator_motors", "/fmu/in/actuator_motors",
                                px4.ActuatorMotors, QoS.COMMAND),
                      TopicSpec("offboard_control_mode", "/fmu/in/offboard_control_mode",
                                px4.OffboardControlMode, QoS.COMMAND))
    provides = frozenset({"position", "orientation", "linear_velocity", "angular_velocity"})
    heartbeat_keys = frozenset({"offboard_control_mode"})
    nonfinite_disarms = True

    def __init__(self, robot: Robot, motor_map: Sequence[int] | None = None):
        super().__init__(robot)
        n = len(robot.actuator_names)
        self.motor_map = list(range(n)) if motor_map is None else [int(i) for i in motor_map]
        if len(self.motor_map) != n or len(set(self.motor_map)) != n or \
                not all(0 <= i < px4.NUM_CONTROLS for i in self.motor_map):
            raise ValueError(f"motor_map {self.motor_map} must name {n} distinct PX4 motor "
                             f"slots in 0..{px4.NUM_CONTROLS - 1}")

    @classmethod
    def from_settings(cls, robot: Robot, settings: InterfaceSettings) -> Px4Native:
        try:
            return cls(robot, settings.motor_map)
        except ValueError as exc:
            raise InterfaceError(str(exc), "motor_map") from None

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

    def raw_command(self, cmd: Mapping[str, np.ndarray]) -> Messages:
        t = _now_us()
        return [("offboard_control_mode", px4.offboard_control_mode(t)),
                ("actuator_motors", px4.actuator_motors(cmd["rotor_speed"], self.motor_map, t))]

    def raw_damping(self, signals: Mapping[str, np.ndarray]) -> Messages:
        # zero speed (the node's DAMP sends NaN, "disarmed")
        return self.raw_command({"rotor_speed": np.zeros(len(self.robot.actuator_names))})


# --- user inputs (every robot) -----------------------------------------------------------------
INPUT_TOPICS = (
    TopicSpec("cmd_vel", "/cmd_vel", m.Twist, QoS.COMMAND),  # -> velocity_command
    TopicSpec("target_position", "/target_position", m.PointStamped, QoS.COMMAND),
    # a moving reference (quadrotor-track): pose.position -> target_position and
    # twist.linear -> target_velocity, both world frame, sent at the policy rate
    TopicSpec("reference", "/reference", m.Odometry, QoS.COMMAND),
    # arms (deploy/arm.py): a tool pose -> target_position, target_orientation; a height
    TopicSpec("target_pose", "/target_pose", m.PoseStamped, QoS.COMMAND),
    TopicSpec("lift_height", "/lift_height", m.Float64, QoS.COMMAND),
    TopicSpec("estop", "/simreal/estop", m.Bool, QoS.COMMAND),  # true engages (latched)
    TopicSpec("estop_reset", "/simreal/estop_reset", m.Bool, QoS.COMMAND),  # true resets
)
COMMAND_INPUTS = {"velocity_command": "cmd_vel", "target_position": "target_position",
                  "target_velocity": "reference",
                  "target_orientation": "target_pose", "lift_height": "lift_height"}
