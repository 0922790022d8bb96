"""DDS type identity on loopback: publishers whose definitions differ from ours in sign only are
heard (Unitree's SDK declares LowState's temperatures uint8, unitree_ros2 int8), and a type that
does not fit is reported at once, naming the topic and both type names.

Every loop is bounded in count and time; CYCLONEDDS_URI is the loopback configuration."""

import ctypes as ct
import logging
import re
import struct
import time
from dataclasses import dataclass

import cyclonedds.idl as idl
import cyclonedds.idl.annotations as annotate
import cyclonedds.idl.types as types
import pytest
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic

from simreal.deploy import cdr, dds
from simreal.deploy import unitree as u
from simreal.deploy.messages import TYPE_VARIANTS, add_type_variant
from simreal.deploy.transport import QoS

LOWSTATE = "unitree_go::msg::dds_::LowState_"


@pytest.fixture(autouse=True)
def loopback(monkeypatch):
    monkeypatch.setenv("CYCLONEDDS_URI", dds.LOOPBACK_CONFIG)


# --- Unitree's SDK types as unitree_sdk2py 1.0.1 declares them (dotted names, autoid) ---------
@dataclass
@annotate.final
@annotate.autoid("sequential")
class IMUState_(idl.IdlStruct, typename="unitree_go.msg.dds_.IMUState_"):
    quaternion: types.array[types.float32, 4]
    gyroscope: types.array[types.float32, 3]
    accelerometer: types.array[types.float32, 3]
    rpy: types.array[types.float32, 3]
    temperature: types.uint8


@dataclass
@annotate.final
@annotate.autoid("sequential")
class MotorState_(idl.IdlStruct, typename="unitree_go.msg.dds_.MotorState_"):
    mode: types.uint8
    q: types.float32
    dq: types.float32
    ddq: types.float32
    tau_est: types.float32
    q_raw: types.float32
    dq_raw: types.float32
    ddq_raw: types.float32
    temperature: types.uint8
    lost: types.uint32
    reserve: types.array[types.uint32, 2]


@dataclass
@annotate.final
@annotate.autoid("sequential")
class BmsState_(idl.IdlStruct, typename="unitree_go.msg.dds_.BmsState_"):
    version_high: types.uint8
    version_low: types.uint8
    status: types.uint8
    soc: types.uint8
    current: types.int32
    cycle: types.uint16
    bq_ntc: types.array[types.uint8, 2]
    mcu_ntc: types.array[types.uint8, 2]
    cell_vol: types.array[types.uint16, 15]


@dataclass
@annotate.final
@annotate.autoid("sequential")
class LowState_(idl.IdlStruct, typename="unitree_go.msg.dds_.LowState_"):
    head: types.array[types.uint8, 2]
    level_flag: types.uint8
    frame_reserve: types.uint8
    sn: types.array[types.uint32, 2]
    version: types.array[types.uint32, 2]
    bandwidth: types.uint16
    imu_state: IMUState_
    motor_state: types.array[MotorState_, 20]
    bms_state: BmsState_
    foot_force: types.array[types.int16, 4]
    foot_force_est: types.array[types.int16, 4]
    tick: types.uint32
    wireless_remote: types.array[types.uint8, 40]
    bit_flag: types.uint8
    adc_reel: types.float32
    temperature_ntc1: types.uint8
    temperature_ntc2: types.uint8
    power_v: types.float32
    power_a: types.float32
    fan_frequency: types.array[types.uint16, 4]
    reserve: types.uint32
    crc: types.uint32


@dataclass
@annotate.final
@annotate.autoid("sequential")
class MotorCmd_(idl.IdlStruct, typename="unitree_go.msg.dds_.MotorCmd_"):
    mode: types.uint8
    q: types.float32
    dq: types.float32
    tau: types.float32
    kp: types.float32
    kd: types.float32
    reserve: types.array[types.uint32, 3]


@dataclass
@annotate.final
@annotate.autoid("sequential")
class BmsCmd_(idl.IdlStruct, typename="unitree_go.msg.dds_.BmsCmd_"):
    off: types.uint8
    reserve: types.array[types.uint8, 3]


@dataclass
@annotate.final
@annotate.autoid("sequential")
class LowCmd_(idl.IdlStruct, typename="unitree_go.msg.dds_.LowCmd_"):
    head: types.array[types.uint8, 2]
    level_flag: types.uint8
    frame_reserve: types.uint8
    sn: types.array[types.uint32, 2]
    version: types.array[types.uint32, 2]
    bandwidth: types.uint16
    motor_cmd: types.array[MotorCmd_, 20]
    bms_cmd: BmsCmd_
    wireless_remote: types.array[types.uint8, 40]
    led: types.array[types.uint8, 12]
    fan: types.array[types.uint8, 2]
    gpio: types.uint8
    reserve: types.uint32
    crc: types.uint32


def sdk_low_state(tick: int, temperature: int = 40) -> LowState_:
    return LowState_(
        bytes(u.HEAD), u.LEVEL_LOW, 0, [0, 0], [0, 0], 0,
        IMUState_([1.0, 0.0, 0.0, 0.0], [0.1, 0.2, 0.3], [0.0, 0.0, 9.81], [0.0] * 3,
                  temperature),
        [MotorState_(u.MODE_SERVO, 0.25 * i, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, temperature, 0,
                     [0, 0]) for i in range(u.NUM_MOTORS)],
        BmsState_(1, 2, 3, 80, 0, 0, [temperature] * 2, [temperature] * 2, [3700] * 15),
        [0] * 4, [0] * 4, tick, bytes(40), 0, 0.0, 200, temperature, 25.0, 1.0, [0] * 4, 0, 0)


# --- incompatible types on the same topics -----------------------------------------------------
@dataclass
@annotate.final
class WideLowState(idl.IdlStruct, typename=LOWSTATE):  # same name, a field of another size
    head: types.array[types.uint8, 2]
    level_flag: types.uint16
    tick: types.uint32


@dataclass
@annotate.final
class OtherThing(idl.IdlStruct, typename="other_pkg::msg::dds_::Thing_"):
    value: types.float64


@dataclass
@annotate.final
class WideLowCmd(idl.IdlStruct, typename="unitree_go::msg::dds_::LowCmd_"):
    head: types.array[types.uint8, 2]
    level_flag: types.uint16


# --- an endpoint without type information, as rmw_cyclonedds' (ROS 2) are ---------------------
class _MetaSer(ct.Structure):
    _fields_ = [("data", ct.c_void_p), ("sz", ct.c_uint32)]


class _Descriptor(ct.Structure):  # dds_topic_descriptor_t (Cyclone 0.10 and later)
    _fields_ = [("m_size", ct.c_uint32), ("m_align", ct.c_uint32), ("m_flagset", ct.c_uint32),
                ("m_nkeys", ct.c_uint32), ("m_typename", ct.c_char_p), ("m_keys", ct.c_void_p),
                ("m_nops", ct.c_uint32), ("m_ops", ct.POINTER(ct.c_uint32)),
                ("m_meta", ct.c_char_p), ("type_information", _MetaSer),
                ("type_mapping", _MetaSer), ("restrict_data_representation", ct.c_uint32)]


_ADR, _SIZE_OP = 0x01 << 24, {1: 0x01 << 16, 2: 0x02 << 16, 4: 0x03 << 16, 8: 0x04 << 16}


class UntypedWriter:
    """A writer through Cyclone's C API whose topic carries a type name and no XTypes type
    information, its payload one flat C struct laid out as `layout` (the XCDR1 bytes of a
    fixed-size message: nested structs of final types add nothing on the wire)."""

    def __init__(self, participant: dds.DomainParticipant, topic: str, type_name: str,
                 layout: struct.Struct):
        from cyclonedds.internal import load_cyclonedds

        lib = load_cyclonedds()
        ops, offset = [], 0
        for count, code in re.findall(r"(\d*)([a-zA-Z?])", layout.format.lstrip("<")):
            n = int(count or 1)
            if code == "x":
                offset += n
                continue
            size = struct.calcsize(code)
            for _ in range(n):
                ops += [_ADR | _SIZE_OP[size], offset]
                offset += size
        ops.append(0)  # DDS_OP_RTS
        self.size = -(-layout.size // 8) * 8
        self._ops = (ct.c_uint32 * len(ops))(*ops)
        self._descriptor = _Descriptor(self.size, 4, 0, 0, type_name.encode(), None, len(ops),
                                       self._ops, b"", _MetaSer(None, 0), _MetaSer(None, 0), 0)
        lib.dds_create_topic.restype = lib.dds_create_writer.restype = ct.c_int32
        lib.dds_create_topic.argtypes = [ct.c_int32, ct.POINTER(_Descriptor), ct.c_char_p,
                                         ct.c_void_p, ct.c_void_p]
        lib.dds_create_writer.argtypes = [ct.c_int32, ct.c_int32, ct.c_void_p, ct.c_void_p]
        lib.dds_write.argtypes = [ct.c_int32, ct.c_void_p]
        self._lib = lib
        t = lib.dds_create_topic(participant._ref, ct.byref(self._descriptor), topic.encode(),
                                 None, None)
        assert t > 0, f"dds_create_topic: {t}"
        self._writer = lib.dds_create_writer(participant._ref, t, None, None)
        assert self._writer > 0, f"dds_create_writer: {self._writer}"

    def write(self, payload: bytes) -> None:
        buf = ct.create_string_buffer(payload.ljust(self.size, b"\0"), self.size)
        assert self._lib.dds_write(self._writer, buf) == 0


def _collect(sub, until, deadline_s: float, write=None, period_s: float = 0.02) -> list:
    """Take from `sub` (writing with `write(i)` first each round) until `until(got)` or the
    deadline; at most deadline_s / period_s rounds."""
    got, end = [], time.monotonic() + deadline_s
    for i in range(int(deadline_s / period_s) + 1):
        if write is not None:
            write(i)
        sub.wait(period_s)
        got += sub.take()
        if until(got) or time.monotonic() > end:
            break
    return got


def _wait_mismatch(transport, deadline_s: float) -> list:
    end = time.monotonic() + deadline_s
    for _ in range(int(deadline_s / 0.02) + 1):
        if transport.mismatches or time.monotonic() > end:
            break
        time.sleep(0.02)
    return transport.mismatches


# --- the types ----------------------------------------------------------------------------------
def test_the_sdk_lowstate_differs_from_ours_in_signedness_and_type_identifier_only():
    sdk_id = LowState_.__idl__.get_type_id()
    assert sdk_id != u.LowState.__idl__.get_type_id()  # why Cyclone refused the match
    assert sdk_id == u.LowStateSdk.__idl__.get_type_id()  # our variant is exactly the SDK's
    assert cdr.fixed_struct(LowState_).format.lower() == cdr.fixed_struct(u.LowState).format.lower()
    assert cdr.fixed_struct(LowState_).format != cdr.fixed_struct(u.LowState).format
    assert TYPE_VARIANTS[u.LowState] == (u.LowStateSdk,)
    # LowCmd: the SDK's definition is unitree_ros2's, one type identifier
    assert LowCmd_.__idl__.get_type_id() == u.LowCmd.__idl__.get_type_id()


def test_a_variant_must_have_the_same_name_and_layout():
    with pytest.raises(ValueError, match="not the wire layout"):
        add_type_variant(u.LowState, WideLowState)
    with pytest.raises(ValueError, match="is named"):
        add_type_variant(u.LowState, OtherThing)
    assert TYPE_VARIANTS[u.LowState] == (u.LowStateSdk,)


def test_the_sdk_variant_decodes_into_lowstate_with_unsigned_temperatures():
    msg = sdk_low_state(tick=7, temperature=200)
    data = msg.serialize()
    got = u.LowStateSdk.deserialize(data)
    assert isinstance(got, u.LowState)
    assert got.motor_state[3].temperature == 200 and got.temperature_ntc1 == 200
    assert got.motor_state[3].q == pytest.approx(0.75) and got.tick == 7
    assert u.LowState.deserialize(data).motor_state[3].temperature == -56  # int8 reading


# --- rt/lowstate: the node's subscription ---------------------------------------------------
def test_node_subscription_hears_a_publisher_with_unitree_sdk_types():
    node, robot = dds.Transport(domain_id=161), dds.Transport(domain_id=161)
    sub = node.subscription("/lowstate", u.LowState, QoS.SENSOR)
    writer = robot.writer("/lowstate", LowState_, qos=dds.SENSOR_QOS)
    t0 = time.monotonic()
    got = _collect(sub, lambda g: len(g) >= 3, 5.0,
                   write=lambda i: writer.write(sdk_low_state(tick=i)))
    assert len(got) >= 3, "a publisher with the SDK's uint8 temperatures was not heard"
    assert time.monotonic() - t0 < 5.0
    s = got[-1]
    assert isinstance(s, u.LowState)
    assert s.imu_state.temperature == 40 and s.motor_state[0].temperature == 40
    assert s.bms_state.bq_ntc == [40, 40] and s.temperature_ntc1 == 200
    assert s.motor_state[4].q == pytest.approx(1.0)
    ticks = [m.tick for m in got]
    assert len(set(ticks)) == len(ticks)  # each sample once
    time.sleep(dds.MATCH_GRACE_S + 0.3)  # the unitree_ros2 reader refused it: that is no error
    assert node.mismatches == [] and robot.mismatches == []


def test_ros2_style_publisher_without_type_information_is_heard_once():
    node, robot = dds.Transport(domain_id=162), dds.Transport(domain_id=162)
    sub = node.subscription("/lowstate", u.LowState, QoS.SENSOR)
    writer = UntypedWriter(robot.participant, "rt/lowstate", LOWSTATE,
                           cdr.fixed_struct(u.LowState))
    signals = {"orientation": [1.0, 0.0, 0.0, 0.0], "angular_velocity": [0.0] * 3,
               "joint_pos": [0.5] * 12, "joint_vel": [0.0] * 12}

    def write(i):
        writer.write(u.LowState.serialize(u.low_state(signals, list(range(12)), tick=i))[4:])

    got = _collect(sub, lambda g: len(g) >= 5, 5.0, write=write)
    assert len(got) >= 5 and got[0].motor_state[0].q == pytest.approx(0.5)
    ticks = [m.tick for m in got]
    assert len(set(ticks)) == len(ticks), f"samples arrived twice: {ticks}"
    time.sleep(dds.MATCH_GRACE_S + 0.3)  # the SDK variant reader refused it (no type info)
    assert node.mismatches == []


def test_a_publisher_of_an_incompatible_definition_is_reported_at_once(caplog):
    node, robot = dds.Transport(domain_id=163), dds.Transport(domain_id=163)
    sub = node.subscription("/lowstate", u.LowState, QoS.SENSOR)
    writer = robot.writer("/lowstate", WideLowState, qos=dds.SENSOR_QOS)
    t0 = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="simreal.deploy.dds"):
        found = _wait_mismatch(node, 4.0)
        writer.write(WideLowState(bytes(2), 1, 2))
        assert sub.take() == []
    elapsed = time.monotonic() - t0
    assert len(found) == 1, "the mismatch was not reported"
    assert elapsed < 3.0, f"reported after {elapsed:.1f} s"
    m = found[0]
    assert m.topic == "rt/lowstate" and m.role == "publisher" and m.their_type == LOWSTATE
    assert m.our_types == (f"{LOWSTATE} (LowState)", f"{LOWSTATE} (LowStateSdk)")
    assert "type consistency" in m.reason
    text = caplog.text
    assert "rt/lowstate" in text and text.count(LOWSTATE) >= 2 and "another definition" in text


def test_a_publisher_of_another_type_name_is_reported():
    node, robot = dds.Transport(domain_id=164), dds.Transport(domain_id=164)
    node.subscription("/lowstate", u.LowState, QoS.SENSOR)
    robot.writer("/lowstate", OtherThing, qos=dds.SENSOR_QOS)
    t0 = time.monotonic()
    found = _wait_mismatch(node, 4.0)
    assert found and time.monotonic() - t0 < 3.0
    m = found[0]
    assert m.their_type == "other_pkg::msg::dds_::Thing_" and LOWSTATE in m.our_types[0]
    assert "other_pkg::msg::dds_::Thing_" in str(m) and LOWSTATE in str(m)


def test_an_untyped_publisher_of_another_type_name_is_reported_after_settling():
    node, robot = dds.Transport(domain_id=165), dds.Transport(domain_id=165)
    sub = node.subscription("/lowstate", u.LowState, QoS.SENSOR)
    writer = UntypedWriter(robot.participant, "rt/lowstate", "other_pkg::msg::dds_::Thing_",
                           struct.Struct("<d"))
    writer.write(struct.pack("<d", 1.0))
    t0 = time.monotonic()
    found = _wait_mismatch(node, dds.MATCH_SETTLE_S + 3.0)
    assert found, "an untyped publisher of another type name went unreported"
    assert time.monotonic() - t0 < dds.MATCH_SETTLE_S + 2.0
    assert found[0].their_type == "other_pkg::msg::dds_::Thing_"
    assert sub.take() == []


# --- rt/lowcmd: what the node writes --------------------------------------------------------------
def test_lowcmd_reaches_an_sdk_subscriber_and_an_incompatible_one_is_reported():
    node, robot = dds.Transport(domain_id=166), dds.Transport(domain_id=166)
    pub = node.publisher("/lowcmd", u.LowCmd, QoS.COMMAND)
    sdk_reader = DataReader(robot.participant, Topic(robot.participant, "rt/lowcmd", LowCmd_),
                            qos=dds.COMMAND_QOS)
    cmd = u.low_cmd([0, 1, 2], [0.1, 0.2, 0.3], [20.0] * 3, [0.5] * 3)
    got, end = [], time.monotonic() + 5.0
    for _ in range(250):
        pub.write(cmd)
        time.sleep(0.02)
        got += sdk_reader.take(N=8)
        if got or time.monotonic() > end:
            break
    assert got, "an SDK LowCmd_ subscriber did not hear the node"
    assert got[0].motor_cmd[1].q == pytest.approx(0.2) and got[0].crc == cmd.crc
    assert node.mismatches == []
    other = dds.Transport(domain_id=166)
    other.reader("/lowcmd", WideLowCmd, qos=dds.COMMAND_QOS)
    found = _wait_mismatch(node, 4.0)
    assert len(found) == 1
    m = found[0]
    assert m.topic == "rt/lowcmd" and m.role == "subscriber"
    assert m.our_types == ("unitree_go::msg::dds_::LowCmd_ (LowCmd)",)
    assert "type consistency" in m.reason
