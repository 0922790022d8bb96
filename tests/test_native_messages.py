"""Robot-native messages (Unitree unitree_go, PX4 px4_msgs): CDR byte equality with rosbags,
the Unitree firmware CRC, frame conversions and the codecs both sides use."""

import dataclasses
from typing import get_args, get_type_hints

import crcmod.predefined
import numpy as np
import pytest
from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import array
from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from simreal.core.spatial import quat_to_matrix
from simreal.deploy import messages as m
from simreal.deploy import px4, unitree
from simreal.deploy.clayout import c_bytes, c_struct

# The ROS 2 definitions, as published in Unitree's unitree_ros2 (unitree_go/msg) and in
# px4_msgs (generated from PX4-Autopilot msg/versioned, MESSAGE_VERSION 0).
MSG_DEFS = {
    "unitree_go/msg/IMUState": "float32[4] quaternion\nfloat32[3] gyroscope\n"
                               "float32[3] accelerometer\nfloat32[3] rpy\nint8 temperature\n",
    "unitree_go/msg/MotorState": "uint8 mode\nfloat32 q\nfloat32 dq\nfloat32 ddq\n"
                                 "float32 tau_est\nfloat32 q_raw\nfloat32 dq_raw\n"
                                 "float32 ddq_raw\nint8 temperature\nuint32 lost\n"
                                 "uint32[2] reserve\n",
    "unitree_go/msg/BmsState": "uint8 version_high\nuint8 version_low\nuint8 status\n"
                               "uint8 soc\nint32 current\nuint16 cycle\nint8[2] bq_ntc\n"
                               "int8[2] mcu_ntc\nuint16[15] cell_vol\n",
    "unitree_go/msg/LowState": "uint8[2] head\nuint8 level_flag\nuint8 frame_reserve\n"
                               "uint32[2] sn\nuint32[2] version\nuint16 bandwidth\n"
                               "IMUState imu_state\nMotorState[20] motor_state\n"
                               "BmsState bms_state\nint16[4] foot_force\n"
                               "int16[4] foot_force_est\nuint32 tick\n"
                               "uint8[40] wireless_remote\nuint8 bit_flag\nfloat32 adc_reel\n"
                               "int8 temperature_ntc1\nint8 temperature_ntc2\nfloat32 power_v\n"
                               "float32 power_a\nuint16[4] fan_frequency\nuint32 reserve\n"
                               "uint32 crc\n",
    "unitree_go/msg/MotorCmd": "uint8 mode\nfloat32 q\nfloat32 dq\nfloat32 tau\nfloat32 kp\n"
                               "float32 kd\nuint32[3] reserve\n",
    "unitree_go/msg/BmsCmd": "uint8 off\nuint8[3] reserve\n",
    "unitree_go/msg/LowCmd": "uint8[2] head\nuint8 level_flag\nuint8 frame_reserve\n"
                             "uint32[2] sn\nuint32[2] version\nuint16 bandwidth\n"
                             "MotorCmd[20] motor_cmd\nBmsCmd bms_cmd\n"
                             "uint8[40] wireless_remote\nuint8[12] led\nuint8[2] fan\n"
                             "uint8 gpio\nuint32 reserve\nuint32 crc\n",
    "px4_msgs/msg/VehicleOdometry": "uint32 MESSAGE_VERSION = 0\nuint64 timestamp\n"
                                    "uint64 timestamp_sample\nuint8 pose_frame\n"
                                    "uint8 POSE_FRAME_NED = 1\nfloat32[3] position\n"
                                    "float32[4] q\nuint8 velocity_frame\nfloat32[3] velocity\n"
                                    "float32[3] angular_velocity\n"
                                    "float32[3] position_variance\n"
                                    "float32[3] orientation_variance\n"
                                    "float32[3] velocity_variance\nuint8 reset_counter\n"
                                    "int8 quality\n",
    "px4_msgs/msg/ActuatorMotors": "uint32 MESSAGE_VERSION = 0\nuint64 timestamp\n"
                                   "uint64 timestamp_sample\nuint16 reversible_flags\n"
                                   "uint8 NUM_CONTROLS = 12\nfloat32[12] control\n",
    "px4_msgs/msg/OffboardControlMode": "uint64 timestamp\nbool position\nbool velocity\n"
                                        "bool acceleration\nbool attitude\nbool body_rate\n"
                                        "bool thrust_and_torque\nbool direct_actuator\n",
}

STORE = get_typestore(Stores.ROS2_HUMBLE)
for _name, _text in MSG_DEFS.items():
    STORE.register(get_types_from_msg(_text, _name))

_NP = {"uint8": np.uint8, "int8": np.int8, "uint16": np.uint16, "int16": np.int16,
       "uint32": np.uint32, "int32": np.int32, "float32": np.float32, "float64": np.float64}


def to_rosbags(obj):
    cls = STORE.types[m.ros_type(type(obj))]
    hints = get_type_hints(type(obj), include_extras=True)
    kwargs = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, IdlStruct):
            value = to_rosbags(value)
        elif isinstance(value, list) and value and isinstance(value[0], IdlStruct):
            value = [to_rosbags(v) for v in value]
        elif isinstance(value, list):
            sub = get_args(hints[f.name])[1]
            assert isinstance(sub, array)
            value = np.asarray(value, dtype=_NP[get_args(sub.subtype)[1]])
        kwargs[f.name] = value
    return cls(**kwargs)


def _lowstate() -> unitree.LowState:
    s = unitree.LowState(level_flag=0xFF, frame_reserve=3, sn=[7, 9], version=[1, 2],
                         bandwidth=300, tick=123456, bit_flag=5, adc_reel=0.5,
                         temperature_ntc1=-3, temperature_ntc2=40, power_v=28.5, power_a=-1.25,
                         fan_frequency=[1, 2, 3, 4], reserve=11)
    s.imu_state = unitree.IMUState([1.0, 0.0, 0.5, -0.25], [0.125, -0.5, 2.0], [0.0, 0.25, 9.75],
                                   [0.0, 0.5, 1.0], -7)
    for i, motor in enumerate(s.motor_state):
        motor.mode, motor.q, motor.dq, motor.tau_est = 1, 0.25 * i, -0.5 * i, 1.5
        motor.temperature, motor.lost, motor.reserve = 30 + i, i, [i, 2 * i]
    s.bms_state = unitree.BmsState(1, 2, 3, 90, -2000, 17, [-1, 2], [3, -4], list(range(15)))
    s.foot_force, s.foot_force_est = [10, -20, 30, -40], [1, 2, 3, 4]
    s.wireless_remote = list(range(40))
    return unitree.with_crc(s)


def _lowcmd() -> unitree.LowCmd:
    c = unitree.low_cmd([3, 4, 5, 0, 1, 2], np.array([0.5, 1.0, -1.5, -0.5, 1.0, -1.5]),
                        np.full(6, 20.0), np.full(6, 0.5), tau=np.full(6, 0.25))
    c.led, c.fan, c.gpio, c.wireless_remote = list(range(12)), [7, 8], 1, [255] * 40
    return unitree.with_crc(c)


NATIVE_SAMPLES = [
    _lowstate(), _lowcmd(), unitree.LowCmd(), unitree.LowState(),
    px4.VehicleOdometry(1_000_001, 1_000_000, 1, [1.0, -2.0, -0.5], [0.5, 0.5, 0.5, 0.5], 3,
                        [0.25, 0.5, -0.125], [0.0, 1.0, -1.0], [0.01, 0.01, 0.02],
                        [0.001] * 3, [0.1] * 3, 2, -1),
    px4.actuator_motors(np.array([0.5, 0.25, 1.0, 0.0]), [0, 1, 2, 3], 42),
    px4.ActuatorMotors(5, 4, 3, [0.5] * 12),
    px4.offboard_control_mode(77),
]


@pytest.mark.parametrize("msg", NATIVE_SAMPLES, ids=lambda x: type(x).__name__)
def test_native_bytes_equal_rosbags_in_both_directions(msg):
    name = m.ros_type(type(msg))
    ours = msg.serialize()
    theirs = bytes(STORE.serialize_cdr(to_rosbags(msg), name))
    assert ours == theirs
    back = type(msg).deserialize(theirs)  # their bytes, our type (uint8 arrays come as bytes)
    assert back.serialize() == ours
    if hasattr(msg, "crc"):
        assert c_bytes(back) == c_bytes(msg)
    assert bytes(STORE.serialize_cdr(STORE.deserialize_cdr(ours, name), name)) == ours


def test_point_stamped_bytes_equal_rosbags():
    msg = m.PointStamped(m.Header(m.Time(5, 6), "world"), m.Point(1.0, -2.0, 0.5))
    name = m.ros_type(m.PointStamped)
    assert msg.serialize() == bytes(STORE.serialize_cdr(to_rosbags(msg), name))


def test_native_type_and_topic_names_are_ros2s():
    assert unitree.LowCmd.__idl_typename__ == "unitree_go::msg::dds_::LowCmd_"
    assert px4.VehicleOdometry.__idl_typename__ == "px4_msgs::msg::dds_::VehicleOdometry_"
    assert m.ros_topic("/lowcmd") == "rt/lowcmd"
    assert m.ros_topic("/fmu/in/actuator_motors") == "rt/fmu/in/actuator_motors"


# --- the Unitree CRC ---------------------------------------------------------------------------
def _firmware_crc(words: np.ndarray) -> int:
    """Unitree's crc32_core as published (bit by bit over 32-bit words, MSB first), rewritten
    here as the reference: register init 0xFFFFFFFF, polynomial 0x04C11DB7."""
    reg, poly = 0xFFFFFFFF, 0x04C11DB7
    for word in (int(w) for w in words):
        for bit in range(31, -1, -1):
            top = reg & 0x80000000
            reg = (reg << 1) & 0xFFFFFFFF
            if top:
                reg ^= poly
            if (word >> bit) & 1:
                reg ^= poly
    return reg


def test_crc32_mpeg2_check_value():
    # the CRC catalogue's check value of CRC-32/MPEG-2 for the ASCII string "123456789"
    assert unitree.crc32_mpeg2(b"123456789") == 0x0376E6E7
    ref = crcmod.predefined.mkCrcFun("crc-32-mpeg")  # an independent implementation
    data = bytes(range(256)) * 3
    assert unitree.crc32_mpeg2(data) == ref(data)


def test_c_images_have_the_sizes_unitree_states():
    # unitree_sdk2_python's CRC packer: LowCmd 812 bytes, LowState 1180 bytes
    assert c_struct(unitree.LowCmd).size == 812
    assert c_struct(unitree.LowState).size == 1180
    assert c_struct(unitree.MotorCmd).size == 36 and c_struct(unitree.IMUState).size == 56


@pytest.mark.parametrize("make", [_lowcmd, _lowstate], ids=["LowCmd", "LowState"])
def test_crc_matches_the_firmware_routine(make):
    msg = make()
    words = np.frombuffer(c_bytes(msg), dtype="<u4")[:-1]
    assert msg.crc == _firmware_crc(words) != 0
    assert unitree.crc_ok(msg)
    msg_bad = make()
    if isinstance(msg_bad, unitree.LowCmd):
        msg_bad.motor_cmd[4].q += 0.001
    else:
        msg_bad.imu_state.temperature += 1
    assert not unitree.crc_ok(msg_bad)


def test_crc_covers_c_padding_not_cdr_layout():
    # IMUState ends on a 1-byte field: the C image pads it to 56 bytes, CDR does not
    assert len(_lowstate().serialize()) - 4 != c_struct(unitree.LowState).size
    image = c_bytes(_lowstate())
    assert image[53:56] == b"\x00\x00\x00"  # IMUState's tail padding (24 + 53 .. 24 + 56)


# --- joint order -------------------------------------------------------------------------------
def test_motor_indices_follow_unitree_order():
    names = ["FL_hip_joint", "FR_thigh_joint", "RL_calf_joint", "RR_hip_joint"]
    assert unitree.motor_indices(names) == [3, 1, 11, 6]
    assert unitree.motor_indices(["knee"], {"knee": 13}) == [13]
    with pytest.raises(ValueError, match=r"\['knee'\] have no Unitree motor index"):
        unitree.motor_indices(["knee"])
    with pytest.raises(ValueError, match="distinct"):
        unitree.motor_indices(["FL_hip_joint", "FL_hip"])


def test_lowstate_and_lowcmd_codecs_round_trip():
    index = [3, 4, 5, 0, 1, 2]
    sig = {"joint_pos": np.array([0.1, 0.8, -1.5, -0.1, 0.8, -1.5]),
           "joint_vel": np.linspace(-1, 1, 6), "orientation": np.array([1.0, 0.0, 0.0, 0.0]),
           "angular_velocity": np.array([0.1, -0.2, 0.3])}
    state = unitree.low_state(sig, index, tick=5)
    assert unitree.crc_ok(state)
    back = unitree.state_signals(unitree.LowState.deserialize(state.serialize()), index)
    for key in ("joint_pos", "joint_vel", "angular_velocity", "orientation"):
        assert np.allclose(back[key], sig[key], atol=1e-6), key
    cmd = unitree.LowCmd.deserialize(unitree.low_cmd(index, sig["joint_pos"], np.full(6, 20.0),
                                                     np.full(6, 0.5)).serialize())
    targets = unitree.cmd_targets(cmd, index)
    assert np.allclose(targets["q"], sig["joint_pos"], atol=1e-6)
    assert np.all(targets["kp"] == 20.0) and unitree.crc_ok(cmd)
    assert cmd.motor_cmd[12].q == pytest.approx(unitree.POS_STOP)  # unused motors: no target
    assert cmd.motor_cmd[12].kp == 0.0 and list(cmd.head) == list(unitree.HEAD)


# --- PX4 frames ----------------------------------------------------------------------------------
def test_px4_identity_attitude_is_nose_north_in_enu():
    q = px4.ned_frd_to_enu_flu(np.array([1.0, 0.0, 0.0, 0.0]))
    r = quat_to_matrix(q)
    assert np.allclose(r @ [1, 0, 0], [0, 1, 0])  # body forward -> north = ENU y
    assert np.allclose(r @ [0, 0, 1], [0, 0, 1])  # body up -> up


def test_px4_frame_conversion_matches_the_matrices():
    rng = np.random.default_rng(0)
    for _ in range(5):
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        expected = px4.NED_TO_ENU @ quat_to_matrix(q) @ px4.FRD_TO_FLU
        assert np.allclose(quat_to_matrix(px4.ned_frd_to_enu_flu(q)), expected)
        back = px4.enu_flu_to_ned_frd(px4.ned_frd_to_enu_flu(q))
        assert np.allclose(back, q if q[0] >= 0 else -q)


def test_px4_odometry_codec_round_trip_and_body_velocity():
    sig = {"position": np.array([1.0, 2.0, 3.0]),
           "orientation": np.array([np.cos(0.3), 0.0, 0.0, np.sin(0.3)]),
           "linear_velocity": np.array([0.5, -0.25, 0.125]),
           "angular_velocity": np.array([0.1, 0.2, -0.3])}
    msg = px4.VehicleOdometry.deserialize(px4.vehicle_odometry(sig, 10).serialize())
    assert msg.position[2] == pytest.approx(-3.0)  # NED: down
    back = px4.odometry_signals(msg)
    for key, value in sig.items():
        assert np.allclose(back[key], value, atol=1e-6), key
    # the same velocity given in the body FRD frame decodes to the same world velocity
    r_frd = quat_to_matrix(np.asarray(msg.q, dtype=np.float64))
    msg.velocity_frame = px4.VELOCITY_FRAME_BODY_FRD
    msg.velocity = list(r_frd.T @ (px4.NED_TO_ENU.T @ sig["linear_velocity"]))
    assert np.allclose(px4.odometry_signals(msg)["linear_velocity"], sig["linear_velocity"],
                       atol=1e-6)
    msg.pose_frame = 0
    with pytest.raises(ValueError, match="pose_frame 0"):
        px4.odometry_signals(msg)


def test_actuator_motors_is_thrust_and_nan_stops():
    msg = px4.actuator_motors(np.array([0.5, 1.0, 0.0, 2.0]), [2, 0, 1, 3], 1)
    assert msg.control[2] == 0.25 and msg.control[0] == 1.0 and msg.control[3] == 1.0
    assert np.isnan(msg.control[4:]).all()
    assert np.allclose(px4.motor_speed_fractions(msg, [2, 0, 1, 3]), [0.5, 1.0, 0.0, 1.0])
    stopped = px4.actuator_motors(None, [0, 1, 2, 3], 1)
    assert np.isnan(stopped.control).all()


# --- the hand-written codecs (deploy/cdr.py install_fixed) against cyclonedds' own -----------
_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535),
           "int16": (-32768, 32767), "uint32": (0, 2**32 - 1), "int32": (-2**31, 2**31 - 1),
           "uint64": (0, 2**64 - 1)}


def _random_value(hint, rng):
    if hint is bool:
        return bool(rng.integers(2))
    if isinstance(hint, type) and issubclass(hint, IdlStruct):
        return _random_message(hint, rng)
    kind = get_args(hint)[1]
    if isinstance(kind, array):
        return [_random_value(kind.subtype, rng) for _ in range(kind.length)]
    if kind in ("float32", "float64"):
        return float(rng.normal() * 10.0 ** rng.integers(-3, 4))
    lo, hi = _RANGES[kind]
    return int(rng.integers(lo, hi, endpoint=True, dtype=np.uint64 if kind == "uint64"
                            else np.int64))


def _random_message(cls, rng):
    """Every field random (within its type): a misplaced field shows in the bytes."""
    hints = get_type_hints(cls, include_extras=True)
    return cls(**{name: _random_value(hint, rng) for name, hint in hints.items()})


FIXED_TYPES = [unitree.LowState, unitree.LowCmd, px4.VehicleOdometry, px4.ActuatorMotors,
               px4.OffboardControlMode]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("cls", FIXED_TYPES, ids=lambda c: c.__name__)
def test_fast_native_codecs_equal_cyclonedds_and_rosbags(cls, seed):
    msg = _random_message(cls, np.random.default_rng(seed))
    ours = msg.serialize()
    assert ours == cls.__idl__.serialize(msg)  # cyclonedds' generic serializer
    name = m.ros_type(cls)
    assert ours == bytes(STORE.serialize_cdr(to_rosbags(msg), name))
    back = cls.deserialize(ours)
    assert back == cls.__idl__.deserialize(ours)  # same objects (uint8 arrays as bytes)
    assert cls.deserialize(ours[4:], has_header=False) == back
    assert back.serialize() == ours


@pytest.mark.parametrize("seed", range(3))
def test_fast_crc_equals_the_crc_of_the_generic_c_image(seed):
    rng = np.random.default_rng(seed)
    for cls in (unitree.LowState, unitree.LowCmd):
        msg = _random_message(cls, rng)
        assert unitree.crc(msg) == unitree.crc_of_image(c_bytes(msg))
        back = cls.deserialize(unitree.with_crc(msg).serialize())
        assert unitree.crc_ok(back) and unitree.crc(back) == msg.crc


def _reference_low_cmd(index, q, kp, kd, dq, tau):
    """low_cmd as object edits and the generic C image (what the fast path replaced)."""
    msg = unitree.LowCmd()
    for motor in msg.motor_cmd:
        motor.mode, motor.q, motor.dq = unitree.MODE_SERVO, unitree.POS_STOP, unitree.VEL_STOP
    for j, i in enumerate(index):
        motor = msg.motor_cmd[i]
        motor.q, motor.dq, motor.kp, motor.kd, motor.tau = (float(q[j]), float(dq[j]),
                                                            float(kp[j]), float(kd[j]),
                                                            float(tau[j]))
    msg.crc = unitree.crc_of_image(c_bytes(msg))
    return msg


@pytest.mark.parametrize("seed", range(3))
def test_low_cmd_equals_the_reference_construction(seed):
    rng = np.random.default_rng(seed)
    index = [int(i) for i in rng.permutation(unitree.NUM_MOTORS)[:12]]
    q, kp, kd, dq, tau = rng.normal(size=(5, 12))
    fast = unitree.low_cmd(index, q, kp, kd, dq, tau)
    ref = _reference_low_cmd(index, q, kp, kd, dq, tau)
    assert fast == ref and fast.serialize() == ref.serialize()
    zero = unitree.low_cmd(index, q, kp, kd)  # no dq, tau: zeros
    assert zero.serialize() == _reference_low_cmd(index, q, kp, kd, np.zeros(12),
                                                  np.zeros(12)).serialize()
    with pytest.raises(ValueError):
        unitree.low_cmd(index, q[:11], kp, kd)


def test_state_signals_read_the_indexed_motors():
    msg = _random_message(unitree.LowState, np.random.default_rng(7))
    index = [3, 0, 19, 7]
    sig = unitree.state_signals(msg, index)
    assert sig["joint_pos"].tolist() == [msg.motor_state[i].q for i in index]
    assert sig["joint_vel"].tolist() == [msg.motor_state[i].dq for i in index]
    assert sig["joint_effort"].tolist() == [msg.motor_state[i].tau_est for i in index]
    assert sig["orientation"].tolist() == msg.imu_state.quaternion
    assert sig["angular_velocity"].tolist() == msg.imu_state.gyroscope
    assert sig["linear_acceleration"].tolist() == msg.imu_state.accelerometer
    assert all(v.dtype == np.float64 and v.flags.c_contiguous for v in sig.values())


def test_fixed_codecs_refuse_bad_messages_with_the_type_named():
    cmd = unitree.LowCmd()
    cmd.motor_cmd = cmd.motor_cmd[:19]
    with pytest.raises(ValueError, match="LowCmd: cannot serialize"):
        cmd.serialize()
    with pytest.raises(ValueError, match="LowCmd: cannot serialize"):
        unitree.LowCmd(level_flag=256).serialize()
    data = unitree.LowState().serialize()
    with pytest.raises(ValueError, match="LowState: 1000 bytes of payload, the message has 1176"):
        unitree.LowState.deserialize(data[:1004])
