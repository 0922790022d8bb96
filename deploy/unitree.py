"""Unitree Go2's low-level interface: unitree_go LowState and LowCmd with the firmware's CRC.

The robot publishes `unitree_go/msg/LowState` on `rt/lowstate` and obeys
`unitree_go/msg/LowCmd` on `rt/lowcmd` (DDS domain 0, Cyclone DDS, the ROS 2 type names
`unitree_go::msg::dds_::LowState_`): the same wire as ROS 2 nodes built with Unitree's
`unitree_ros2` messages. Field layouts follow Unitree's published definitions (the unitree_go
.msg files of unitree_ros2 and the IDL of unitree_sdk2); tests check our bytes against rosbags'
CDR for those definitions.

The firmware ignores a LowCmd whose `crc` is wrong. The CRC is computed over the message's C
memory image (deploy/clayout.py), all of it but the trailing crc field, read as little-endian
32-bit words, each word fed most significant bit first to the CRC-32 with polynomial
0x04C11DB7, initial value 0xFFFFFFFF, no reflection and no final XOR (CRC-32/MPEG-2). Sizes
of the images, as Unitree's SDK states them: LowCmd 812 bytes, LowState 1180 bytes.

Motor order on the robot: FR, FL, RR, RL legs, each hip, thigh, calf (indices 0-11 of 20).
`motor_indices` maps a policy's joint names onto it.

Both messages are fixed-size: they go on and off the wire through hand-written codecs
(deploy/cdr.py `install_fixed`, one `struct` call each way), and the CRC packs the same flat
list of values into the C image (deploy/clayout.py `c_struct`). Decoded uint8 arrays are
`bytes`, as cyclonedds' generic deserializer gives them.

Unitree's SDK declares LowState's six temperature fields uint8 where unitree_ros2 (and
LowState here) says int8: `LowStateSdk` is that definition, a type variant that the DDS
transport also reads through (deploy/dds.py); LowCmd is the same in both.

(No `from __future__ import annotations` here: cyclonedds reads the field types at run time.)
"""

import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

import cyclonedds.idl.annotations as annotate
import numpy as np
from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import array, float32, int8, int16, int32, uint8, uint16, uint32

from simreal.deploy import cdr
from simreal.deploy.clayout import c_struct
from simreal.deploy.messages import add_type_variant, ros_typename

NUM_MOTORS = 20
HEAD = (0xFE, 0xEF)
LEVEL_LOW = 0xFF  # low-level (joint) control
MODE_SERVO = 0x01  # motor enabled, PD + feed-forward torque
POS_STOP = 2.146e9  # Unitree's "no position target" value
VEL_STOP = 16000.0  # Unitree's "no velocity target" value
LEGS = ("FR", "FL", "RR", "RL")
PARTS = ("hip", "thigh", "calf")


def _z(n: int, v: float | int = 0) -> list:
    return [v] * n


@dataclass
@annotate.final
class IMUState(IdlStruct, typename=ros_typename("unitree_go/msg/IMUState")):
    quaternion: array[float32, 4] = field(default_factory=lambda: [1.0, 0.0, 0.0, 0.0])  # wxyz
    gyroscope: array[float32, 3] = field(default_factory=lambda: _z(3, 0.0))  # rad/s, body
    accelerometer: array[float32, 3] = field(default_factory=lambda: _z(3, 0.0))  # m/s^2
    rpy: array[float32, 3] = field(default_factory=lambda: _z(3, 0.0))
    temperature: int8 = 0


@dataclass
@annotate.final
class MotorState(IdlStruct, typename=ros_typename("unitree_go/msg/MotorState")):
    mode: uint8 = 0
    q: float32 = 0.0
    dq: float32 = 0.0
    ddq: float32 = 0.0
    tau_est: float32 = 0.0
    q_raw: float32 = 0.0
    dq_raw: float32 = 0.0
    ddq_raw: float32 = 0.0
    temperature: int8 = 0
    lost: uint32 = 0
    reserve: array[uint32, 2] = field(default_factory=lambda: _z(2))


@dataclass
@annotate.final
class BmsState(IdlStruct, typename=ros_typename("unitree_go/msg/BmsState")):
    version_high: uint8 = 0
    version_low: uint8 = 0
    status: uint8 = 0
    soc: uint8 = 0
    current: int32 = 0
    cycle: uint16 = 0
    bq_ntc: array[int8, 2] = field(default_factory=lambda: _z(2))
    mcu_ntc: array[int8, 2] = field(default_factory=lambda: _z(2))
    cell_vol: array[uint16, 15] = field(default_factory=lambda: _z(15))


@dataclass
@annotate.final
class LowState(IdlStruct, typename=ros_typename("unitree_go/msg/LowState")):
    head: array[uint8, 2] = field(default_factory=lambda: list(HEAD))
    level_flag: uint8 = 0
    frame_reserve: uint8 = 0
    sn: array[uint32, 2] = field(default_factory=lambda: _z(2))
    version: array[uint32, 2] = field(default_factory=lambda: _z(2))
    bandwidth: uint16 = 0
    imu_state: IMUState = field(default_factory=IMUState)
    motor_state: array[MotorState, 20] = field(
        default_factory=lambda: [MotorState() for _ in range(NUM_MOTORS)])
    bms_state: BmsState = field(default_factory=BmsState)
    foot_force: array[int16, 4] = field(default_factory=lambda: _z(4))
    foot_force_est: array[int16, 4] = field(default_factory=lambda: _z(4))
    tick: uint32 = 0
    wireless_remote: array[uint8, 40] = field(default_factory=lambda: _z(40))
    bit_flag: uint8 = 0
    adc_reel: float32 = 0.0
    temperature_ntc1: int8 = 0
    temperature_ntc2: int8 = 0
    power_v: float32 = 0.0
    power_a: float32 = 0.0
    fan_frequency: array[uint16, 4] = field(default_factory=lambda: _z(4))
    reserve: uint32 = 0
    crc: uint32 = 0


@dataclass
@annotate.final
class MotorCmd(IdlStruct, typename=ros_typename("unitree_go/msg/MotorCmd")):
    mode: uint8 = 0
    q: float32 = 0.0
    dq: float32 = 0.0
    tau: float32 = 0.0
    kp: float32 = 0.0
    kd: float32 = 0.0
    reserve: array[uint32, 3] = field(default_factory=lambda: _z(3))


@dataclass
@annotate.final
class BmsCmd(IdlStruct, typename=ros_typename("unitree_go/msg/BmsCmd")):
    off: uint8 = 0
    reserve: array[uint8, 3] = field(default_factory=lambda: _z(3))


@dataclass
@annotate.final
class LowCmd(IdlStruct, typename=ros_typename("unitree_go/msg/LowCmd")):
    head: array[uint8, 2] = field(default_factory=lambda: list(HEAD))
    level_flag: uint8 = LEVEL_LOW
    frame_reserve: uint8 = 0
    sn: array[uint32, 2] = field(default_factory=lambda: _z(2))
    version: array[uint32, 2] = field(default_factory=lambda: _z(2))
    bandwidth: uint16 = 0
    motor_cmd: array[MotorCmd, 20] = field(
        default_factory=lambda: [MotorCmd() for _ in range(NUM_MOTORS)])
    bms_cmd: BmsCmd = field(default_factory=BmsCmd)
    wireless_remote: array[uint8, 40] = field(default_factory=lambda: _z(40))
    led: array[uint8, 12] = field(default_factory=lambda: _z(12))
    fan: array[uint8, 2] = field(default_factory=lambda: _z(2))
    gpio: uint8 = 0
    reserve: uint32 = 0
    crc: uint32 = 0


MESSAGE_TYPES = (IMUState, MotorState, BmsState, LowState, MotorCmd, BmsCmd, LowCmd)


# --- Unitree SDK's own LowState: the same bytes, uint8 temperatures ---------------------------
# unitree_sdk2 (and unitree_sdk2py 1.0.1, generated from the same IDL) declares the six
# temperature fields uint8 where unitree_ros2's .msg files (and LowState above) say int8. The
# layouts agree byte for byte, but the XTypes type identifiers differ and Cyclone refuses to
# match the two. The DDS transport reads rt/lowstate through both (deploy/dds.py, type
# variants); these classes are only declared, never built: samples decode into LowState.
@dataclass
@annotate.final
class IMUStateSdk(IdlStruct, typename=ros_typename("unitree_go/msg/IMUState")):
    quaternion: array[float32, 4] = field(default_factory=lambda: [1.0, 0.0, 0.0, 0.0])
    gyroscope: array[float32, 3] = field(default_factory=lambda: _z(3, 0.0))
    accelerometer: array[float32, 3] = field(default_factory=lambda: _z(3, 0.0))
    rpy: array[float32, 3] = field(default_factory=lambda: _z(3, 0.0))
    temperature: uint8 = 0


@dataclass
@annotate.final
class MotorStateSdk(IdlStruct, typename=ros_typename("unitree_go/msg/MotorState")):
    mode: uint8 = 0
    q: float32 = 0.0
    dq: float32 = 0.0
    ddq: float32 = 0.0
    tau_est: float32 = 0.0
    q_raw: float32 = 0.0
    dq_raw: float32 = 0.0
    ddq_raw: float32 = 0.0
    temperature: uint8 = 0
    lost: uint32 = 0
    reserve: array[uint32, 2] = field(default_factory=lambda: _z(2))


@dataclass
@annotate.final
class BmsStateSdk(IdlStruct, typename=ros_typename("unitree_go/msg/BmsState")):
    version_high: uint8 = 0
    version_low: uint8 = 0
    status: uint8 = 0
    soc: uint8 = 0
    current: int32 = 0
    cycle: uint16 = 0
    bq_ntc: array[uint8, 2] = field(default_factory=lambda: _z(2))
    mcu_ntc: array[uint8, 2] = field(default_factory=lambda: _z(2))
    cell_vol: array[uint16, 15] = field(default_factory=lambda: _z(15))


@dataclass
@annotate.final
class LowStateSdk(IdlStruct, typename=ros_typename("unitree_go/msg/LowState")):
    head: array[uint8, 2] = field(default_factory=lambda: list(HEAD))
    level_flag: uint8 = 0
    frame_reserve: uint8 = 0
    sn: array[uint32, 2] = field(default_factory=lambda: _z(2))
    version: array[uint32, 2] = field(default_factory=lambda: _z(2))
    bandwidth: uint16 = 0
    imu_state: IMUStateSdk = field(default_factory=IMUStateSdk)
    motor_state: array[MotorStateSdk, 20] = field(
        default_factory=lambda: [MotorStateSdk() for _ in range(NUM_MOTORS)])
    bms_state: BmsStateSdk = field(default_factory=BmsStateSdk)
    foot_force: array[int16, 4] = field(default_factory=lambda: _z(4))
    foot_force_est: array[int16, 4] = field(default_factory=lambda: _z(4))
    tick: uint32 = 0
    wireless_remote: array[uint8, 40] = field(default_factory=lambda: _z(40))
    bit_flag: uint8 = 0
    adc_reel: float32 = 0.0
    temperature_ntc1: uint8 = 0
    temperature_ntc2: uint8 = 0
    power_v: float32 = 0.0
    power_a: float32 = 0.0
    fan_frequency: array[uint16, 4] = field(default_factory=lambda: _z(4))
    reserve: uint32 = 0
    crc: uint32 = 0


# --- flat values: every primitive of a message in wire (and C image) order ------------------
# Offsets into the flat tuples: LowState 349 values (motor i at 23 + 12 i), LowCmd 250 values
# (motor i at 9 + 9 i). Tests check the order against cyclonedds' and rosbags' serializers.
_MOTOR_STATE = attrgetter("mode", "q", "dq", "ddq", "tau_est", "q_raw", "dq_raw", "ddq_raw",
                          "temperature", "lost")
_BMS_STATE = attrgetter("version_high", "version_low", "status", "soc", "current", "cycle")
_MOTOR_CMD = attrgetter("mode", "q", "dq", "tau", "kp", "kd")
_STATE_MOTOR0, _CMD_MOTOR0 = 23, 9
_STATE_MOTOR_LEN, _CMD_MOTOR_LEN = 12, 9


def _flat_low_state(s: LowState) -> list:
    imu, bms = s.imu_state, s.bms_state
    v = [*s.head, s.level_flag, s.frame_reserve, *s.sn, *s.version, s.bandwidth,
         *imu.quaternion, *imu.gyroscope, *imu.accelerometer, *imu.rpy, imu.temperature]
    for m in s.motor_state:
        v += _MOTOR_STATE(m)
        v += m.reserve
    v += _BMS_STATE(bms)
    v += bms.bq_ntc
    v += bms.mcu_ntc
    v += bms.cell_vol
    v += s.foot_force
    v += s.foot_force_est
    v.append(s.tick)
    v += s.wireless_remote
    v += (s.bit_flag, s.adc_reel, s.temperature_ntc1, s.temperature_ntc2, s.power_v, s.power_a)
    v += s.fan_frequency
    v += (s.reserve, s.crc)
    return v


def _build_low_state(v: Sequence) -> LowState:
    motors = [MotorState(*v[o:o + 10], list(v[o + 10:o + 12]))
              for o in range(_STATE_MOTOR0, _STATE_MOTOR0 + NUM_MOTORS * _STATE_MOTOR_LEN,
                             _STATE_MOTOR_LEN)]
    return LowState(bytes(v[0:2]), v[2], v[3], list(v[4:6]), list(v[6:8]), v[8],
                    IMUState(list(v[9:13]), list(v[13:16]), list(v[16:19]), list(v[19:22]),
                             v[22]),
                    motors,
                    BmsState(*v[263:269], list(v[269:271]), list(v[271:273]),
                             list(v[273:288])),
                    list(v[288:292]), list(v[292:296]), v[296], bytes(v[297:337]),
                    *v[337:343], list(v[343:347]), v[347], v[348])


def _flat_low_cmd(c: LowCmd) -> list:
    v = [*c.head, c.level_flag, c.frame_reserve, *c.sn, *c.version, c.bandwidth]
    for m in c.motor_cmd:
        v += _MOTOR_CMD(m)
        v += m.reserve
    v.append(c.bms_cmd.off)
    v += c.bms_cmd.reserve
    v += c.wireless_remote
    v += c.led
    v += c.fan
    v += (c.gpio, c.reserve, c.crc)
    return v


def _build_low_cmd(v: Sequence, u8: type = bytes) -> LowCmd:
    """`u8`: what uint8 arrays become (bytes off the wire, as cyclonedds decodes them)."""
    motors = [MotorCmd(*v[o:o + 6], list(v[o + 6:o + 9]))
              for o in range(_CMD_MOTOR0, _CMD_MOTOR0 + NUM_MOTORS * _CMD_MOTOR_LEN,
                             _CMD_MOTOR_LEN)]
    return LowCmd(u8(v[0:2]), v[2], v[3], list(v[4:6]), list(v[6:8]), v[8], motors,
                  BmsCmd(v[189], u8(v[190:193])), u8(v[193:233]), u8(v[233:245]),
                  u8(v[245:247]), v[247], v[248], v[249])


_FLAT = {LowState: _flat_low_state, LowCmd: _flat_low_cmd}
cdr.install_fixed(LowState, _flat_low_state, _build_low_state)
cdr.install_fixed(LowCmd, _flat_low_cmd, _build_low_cmd)
# the SDK's LowState decodes (uint8 temperatures read unsigned: 200 stays 200) into LowState
cdr.install_fixed(LowStateSdk, _flat_low_state, _build_low_state)
add_type_variant(LowState, LowStateSdk)

# --- CRC ----------------------------------------------------------------------------------
# CRC-32/MPEG-2 is CRC-32 (zlib's) run on bit-reversed bytes, with its register bit-reversed
# and its final XOR undone: that lets zlib's C loop do the work at robot rate.
_REVERSED_BYTES = bytes(int(f"{b:08b}"[::-1], 2) for b in range(256))


def crc32_mpeg2(data: bytes) -> int:
    """CRC-32/MPEG-2 (poly 0x04C11DB7, init 0xFFFFFFFF, not reflected, no final XOR)."""
    reflected = zlib.crc32(data.translate(_REVERSED_BYTES)) ^ 0xFFFFFFFF
    return int(f"{reflected:032b}"[::-1], 2)


def crc_of_image(image: bytes) -> int:
    """Unitree's CRC of a C memory image: every 32-bit word but the last (the crc field)."""
    words = np.frombuffer(image, dtype="<u4")[:-1]
    return crc32_mpeg2(words.astype(">u4").tobytes())


def _crc_of_values(cls: type, values: list) -> int:
    return crc_of_image(c_struct(cls).pack(*values))


def crc(msg: LowCmd | LowState) -> int:
    """The CRC of a message's C memory image (its `crc` field excluded)."""
    cls = type(msg)
    return _crc_of_values(cls, _FLAT[cls](msg))


def with_crc(msg: LowCmd | LowState) -> LowCmd | LowState:
    msg.crc = crc(msg)
    return msg


def crc_ok(msg: LowCmd | LowState) -> bool:
    return msg.crc == crc(msg)


# --- joint order ----------------------------------------------------------------------------
def motor_indices(joint_names: Sequence[str], overrides: Mapping[str, int] | None = None
                  ) -> list[int]:
    """The robot's motor index of each policy joint.

    A name containing a leg (FR, FL, RR, RL) and a part (hip, thigh, calf), such as
    `FL_thigh_joint`, maps by Unitree's order; `overrides` maps any other name. Every joint
    must map, to distinct motors.
    """
    overrides = dict(overrides or {})
    out, problems = [], []
    for name in joint_names:
        if name in overrides:
            out.append(int(overrides[name]))
            continue
        leg = re.search(r"(?:^|[^A-Za-z])(FR|FL|RR|RL)(?:[^A-Za-z]|$)", name)
        part = [p for p in PARTS if p in name.lower()]
        if leg is None or len(part) != 1:
            problems.append(name)
            continue
        out.append(LEGS.index(leg.group(1)) * 3 + PARTS.index(part[0]))
    if problems:
        raise ValueError(f"joints {problems} have no Unitree motor index: name them like "
                         "'FL_thigh_joint' or give motor_index in the node configuration")
    bad = [i for i in out if not 0 <= i < NUM_MOTORS]
    if bad or len(set(out)) != len(out):
        raise ValueError(f"motor indices {out} must be distinct and in 0..{NUM_MOTORS - 1}")
    return out


# --- codecs (the node and a robot-side simulator both use these) ----------------------------
_Q_DQ_TAU = attrgetter("q", "dq", "tau_est")


def state_signals(msg: LowState, index: Sequence[int]) -> dict[str, np.ndarray]:
    """LowState -> named signals in policy joint order (orientation w, x, y, z)."""
    motors = msg.motor_state
    imu = msg.imu_state
    joints = np.array([_Q_DQ_TAU(motors[i]) for i in index], dtype=np.float64).T.copy()
    body = np.array([*imu.quaternion, *imu.gyroscope, *imu.accelerometer], dtype=np.float64)
    return {"joint_pos": joints[0], "joint_vel": joints[1], "joint_effort": joints[2],
            "orientation": body[0:4], "angular_velocity": body[4:7],
            "linear_acceleration": body[7:10]}


def low_state(signals: Mapping[str, np.ndarray], index: Sequence[int], tick: int = 0
              ) -> LowState:
    """Named signals -> LowState with its CRC (what a simulated Go2 publishes)."""
    msg = LowState(level_flag=LEVEL_LOW, tick=tick & 0xFFFFFFFF)
    q = signals["orientation"]
    msg.imu_state = IMUState([float(v) for v in q],
                             [float(v) for v in signals["angular_velocity"]],
                             [float(v) for v in signals.get("linear_acceleration", (0, 0, 9.81))],
                             _rpy(np.asarray(q, dtype=np.float64)))
    effort = signals.get("joint_effort")
    for j, i in enumerate(index):
        m = msg.motor_state[i]
        m.mode = MODE_SERVO
        m.q = float(signals["joint_pos"][j])
        m.dq = float(signals["joint_vel"][j])
        m.tau_est = 0.0 if effort is None else float(effort[j])
    return with_crc(msg)


def _idle_low_cmd() -> list:
    msg = LowCmd()
    for m in msg.motor_cmd:
        m.mode, m.q, m.dq = MODE_SERVO, POS_STOP, VEL_STOP
    return _flat_low_cmd(msg)


_IDLE_LOW_CMD = _idle_low_cmd()  # every motor: no target, zero gains


def _floats(x: np.ndarray | Sequence[float] | None, n: int) -> list[float]:
    return [0.0] * n if x is None else np.asarray(x, dtype=np.float64).tolist()


def low_cmd(index: Sequence[int], q: np.ndarray, kp: np.ndarray, kd: np.ndarray,
            dq: np.ndarray | None = None, tau: np.ndarray | None = None) -> LowCmd:
    """Per-joint PD targets in policy order -> LowCmd with its CRC.

    Motors the policy does not drive get Unitree's "no target" values with zero gains.
    (Built as flat values, CRC from those, then the message: a control cycle's cost.)
    """
    n = len(index)
    v = _IDLE_LOW_CMD.copy()
    for i, qj, dqj, tj, kpj, kdj in zip(index, _floats(q, n), _floats(dq, n), _floats(tau, n),
                                         _floats(kp, n), _floats(kd, n), strict=True):
        o = _CMD_MOTOR0 + _CMD_MOTOR_LEN * i
        v[o + 1:o + 6] = qj, dqj, tj, kpj, kdj
    v[-1] = _crc_of_values(LowCmd, v)
    return _build_low_cmd(v, u8=list)


def cmd_targets(msg: LowCmd, index: Sequence[int]) -> dict[str, np.ndarray]:
    """LowCmd -> per-joint q, dq, kp, kd, tau in policy order (what the robot side applies)."""
    motors = msg.motor_cmd
    return {key: np.array([getattr(motors[i], key) for i in index], dtype=np.float64)
            for key in ("q", "dq", "kp", "kd", "tau")}


def _rpy(q: np.ndarray) -> list[float]:
    w, x, y, z = q
    roll = np.arctan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
    pitch = np.arcsin(np.clip(2 * (w * y - z * x), -1.0, 1.0))
    yaw = np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    return [float(roll), float(pitch), float(yaw)]
