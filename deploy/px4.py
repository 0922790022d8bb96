"""PX4's native ROS 2 interface (uXRCE-DDS): px4_msgs VehicleOdometry in, ActuatorMotors out.

PX4 publishes `/fmu/out/vehicle_odometry` and, in offboard mode with `direct_actuator`, obeys
`/fmu/in/actuator_motors`; it holds offboard mode only while `/fmu/in/offboard_control_mode`
keeps arriving (PX4 asks for more than 2 Hz), so the node sends one with every command. Field
layouts follow px4_msgs as generated from PX4-Autopilot's msg/versioned/*.msg (MESSAGE_VERSION
0, so the topic names carry no version suffix); tests check our bytes against rosbags' CDR for
those definitions.

Frames: PX4 uses NED (world) and FRD (body); our signals use ENU and FLU, as ROS (REP 103) and
the simulator do. World NED -> ENU swaps x and y and negates z; body FRD -> FLU negates y and z.
ActuatorMotors.control is normalized thrust; our rotor command is the fraction of maximum
rotor speed, and thrust goes with its square, so control = speed fraction squared. NaN in a
control slot means "disarmed (stop the motor)" to PX4.

All three messages are fixed-size and go on and off the wire through hand-written codecs
(deploy/cdr.py `install_fixed`), as the messages of every control cycle should.

(No `from __future__ import annotations` here: cyclonedds reads the field types at run time.)
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import cyclonedds.idl.annotations as annotate
import numpy as np
from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import array, float32, int8, uint8, uint16, uint64

from simreal.deploy import cdr
from simreal.deploy.messages import ros_typename

NUM_CONTROLS = 12
POSE_FRAME_NED, POSE_FRAME_FRD = 1, 2
VELOCITY_FRAME_NED, VELOCITY_FRAME_FRD, VELOCITY_FRAME_BODY_FRD = 1, 2, 3


def _nan(n: int) -> list[float]:
    return [math.nan] * n


@dataclass
@annotate.final
class VehicleOdometry(IdlStruct, typename=ros_typename("px4_msgs/msg/VehicleOdometry")):
    timestamp: uint64 = 0  # us since PX4 boot
    timestamp_sample: uint64 = 0
    pose_frame: uint8 = POSE_FRAME_NED
    position: array[float32, 3] = field(default_factory=lambda: _nan(3))
    q: array[float32, 4] = field(default_factory=lambda: _nan(4))  # w, x, y, z; body FRD
    velocity_frame: uint8 = VELOCITY_FRAME_NED
    velocity: array[float32, 3] = field(default_factory=lambda: _nan(3))
    angular_velocity: array[float32, 3] = field(default_factory=lambda: _nan(3))  # body FRD
    position_variance: array[float32, 3] = field(default_factory=lambda: _nan(3))
    orientation_variance: array[float32, 3] = field(default_factory=lambda: _nan(3))
    velocity_variance: array[float32, 3] = field(default_factory=lambda: _nan(3))
    reset_counter: uint8 = 0
    quality: int8 = 0


@dataclass
@annotate.final
class ActuatorMotors(IdlStruct, typename=ros_typename("px4_msgs/msg/ActuatorMotors")):
    timestamp: uint64 = 0
    timestamp_sample: uint64 = 0
    reversible_flags: uint16 = 0
    control: array[float32, 12] = field(default_factory=lambda: _nan(NUM_CONTROLS))


@dataclass
@annotate.final
class OffboardControlMode(IdlStruct,
                          typename=ros_typename("px4_msgs/msg/OffboardControlMode")):
    timestamp: uint64 = 0
    position: bool = False
    velocity: bool = False
    acceleration: bool = False
    attitude: bool = False
    body_rate: bool = False
    thrust_and_torque: bool = False
    direct_actuator: bool = False


MESSAGE_TYPES = (VehicleOdometry, ActuatorMotors, OffboardControlMode)


# --- wire codecs: every primitive in wire order (deploy/cdr.py) -----------------------------
def _flat_odometry(m: VehicleOdometry) -> list:
    return [m.timestamp, m.timestamp_sample, m.pose_frame, *m.position, *m.q, m.velocity_frame,
            *m.velocity, *m.angular_velocity, *m.position_variance, *m.orientation_variance,
            *m.velocity_variance, m.reset_counter, m.quality]


def _build_odometry(v: tuple) -> VehicleOdometry:
    return VehicleOdometry(v[0], v[1], v[2], list(v[3:6]), list(v[6:10]), v[10],
                           list(v[11:14]), list(v[14:17]), list(v[17:20]), list(v[20:23]),
                           list(v[23:26]), v[26], v[27])


def _flat_motors(m: ActuatorMotors) -> list:
    return [m.timestamp, m.timestamp_sample, m.reversible_flags, *m.control]


def _build_motors(v: tuple) -> ActuatorMotors:
    return ActuatorMotors(v[0], v[1], v[2], list(v[3:]))


def _flat_offboard(m: OffboardControlMode) -> list:
    return [m.timestamp, m.position, m.velocity, m.acceleration, m.attitude, m.body_rate,
            m.thrust_and_torque, m.direct_actuator]


cdr.install_fixed(VehicleOdometry, _flat_odometry, _build_odometry)
cdr.install_fixed(ActuatorMotors, _flat_motors, _build_motors)
cdr.install_fixed(OffboardControlMode, _flat_offboard, lambda v: OffboardControlMode(*v))

# --- frames ---------------------------------------------------------------------------------
NED_TO_ENU = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
FRD_TO_FLU = np.diag([1.0, -1.0, -1.0])  # its own inverse
_S = math.sqrt(0.5)
Q_NED_TO_ENU = np.array([0.0, _S, _S, 0.0])  # w, x, y, z: pi about (x + y)/sqrt(2)
Q_FLU_TO_FRD = np.array([0.0, 1.0, 0.0, 0.0])  # pi about x


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product of (w, x, y, z) quaternions."""
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    return np.array([aw * bw - ax * bx - ay * by - az * bz,
                     aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx,
                     aw * bz + ax * by - ay * bx + az * bw])


def _rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    w, x, y, z = q
    r = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                  [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                  [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])
    return r @ v


def ned_frd_to_enu_flu(q: np.ndarray) -> np.ndarray:
    """Body FRD -> world NED orientation as body FLU -> world ENU, (w, x, y, z)."""
    out = quat_mul(quat_mul(Q_NED_TO_ENU, q), Q_FLU_TO_FRD)
    return out if out[0] >= 0 else -out


def enu_flu_to_ned_frd(q: np.ndarray) -> np.ndarray:
    conj = np.array([1.0, -1.0, -1.0, -1.0])
    out = quat_mul(quat_mul(Q_NED_TO_ENU * conj, q), Q_FLU_TO_FRD * conj)
    return out if out[0] >= 0 else -out


# --- codecs (the node and a robot-side simulator both use these) ----------------------------
def odometry_signals(msg: VehicleOdometry) -> dict[str, np.ndarray]:
    """VehicleOdometry -> position, orientation, linear_velocity (world ENU), angular_velocity
    (body FLU). Raises ValueError on a frame it cannot convert."""
    if msg.pose_frame not in (POSE_FRAME_NED, POSE_FRAME_FRD):
        raise ValueError(f"VehicleOdometry.pose_frame {msg.pose_frame} is not NED or FRD")
    q_px4 = np.asarray(msg.q, dtype=np.float64)
    q = ned_frd_to_enu_flu(q_px4)
    v = np.asarray(msg.velocity, dtype=np.float64)
    if msg.velocity_frame in (VELOCITY_FRAME_NED, VELOCITY_FRAME_FRD):
        v_world = NED_TO_ENU @ v
    elif msg.velocity_frame == VELOCITY_FRAME_BODY_FRD:
        v_world = _rotate(q, FRD_TO_FLU @ v)
    else:
        raise ValueError(f"VehicleOdometry.velocity_frame {msg.velocity_frame} is unknown")
    return {
        "position": NED_TO_ENU @ np.asarray(msg.position, dtype=np.float64),
        "orientation": q,
        "linear_velocity": v_world,
        "angular_velocity": FRD_TO_FLU @ np.asarray(msg.angular_velocity, dtype=np.float64),
    }


def vehicle_odometry(signals: Mapping[str, np.ndarray], timestamp_us: int) -> VehicleOdometry:
    """World ENU / body FLU signals -> VehicleOdometry in NED / FRD (what PX4 publishes)."""
    def f(v: np.ndarray) -> list[float]:
        return [float(x) for x in v]

    return VehicleOdometry(
        timestamp=timestamp_us, timestamp_sample=timestamp_us, pose_frame=POSE_FRAME_NED,
        position=f(NED_TO_ENU.T @ np.asarray(signals["position"], dtype=np.float64)),
        q=f(enu_flu_to_ned_frd(np.asarray(signals["orientation"], dtype=np.float64))),
        velocity_frame=VELOCITY_FRAME_NED,
        velocity=f(NED_TO_ENU.T @ np.asarray(signals["linear_velocity"], dtype=np.float64)),
        angular_velocity=f(FRD_TO_FLU @ np.asarray(signals["angular_velocity"],
                                                   dtype=np.float64)),
        position_variance=[0.0] * 3, orientation_variance=[0.0] * 3,
        velocity_variance=[0.0] * 3)


def actuator_motors(speed_fraction: np.ndarray | None, motor_map: Sequence[int],
                    timestamp_us: int) -> ActuatorMotors:
    """Rotor speed fractions in policy order -> ActuatorMotors (thrust = speed^2); None, or a
    slot no rotor maps to, is NaN: motor stopped."""
    control = _nan(NUM_CONTROLS)
    if speed_fraction is not None:
        for j, i in enumerate(motor_map):
            s = min(max(float(speed_fraction[j]), 0.0), 1.0)
            control[i] = s * s
    return ActuatorMotors(timestamp=timestamp_us, timestamp_sample=timestamp_us,
                          control=control)


def motor_speed_fractions(msg: ActuatorMotors, motor_map: Sequence[int]) -> np.ndarray:
    """ActuatorMotors -> rotor speed fractions in policy order; NaN (stopped) reads as 0."""
    thrust = np.array([msg.control[i] for i in motor_map], dtype=np.float64)
    return np.sqrt(np.clip(np.nan_to_num(thrust, nan=0.0), 0.0, 1.0))


def offboard_control_mode(timestamp_us: int) -> OffboardControlMode:
    return OffboardControlMode(timestamp=timestamp_us, direct_actuator=True)
