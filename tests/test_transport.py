"""The transport interface: every message the node uses crosses Cyclone DDS between two
participants on loopback (native ones included), the in-process bus behaves the same way, and
the rclpy transport fails with a clear message where ROS 2 is absent."""

import time

import numpy as np
import pytest

from simreal.deploy import codecs, dds, px4, unitree
from simreal.deploy import messages as m
from simreal.deploy.transport import LocalBus, QoS

MESSAGES = [
    codecs.joint_state(["a", "b"], np.array([0.5, -0.25]), np.array([1.0, 2.0]), t=3.5),
    codecs.imu(np.array([1.0, 0.0, 0.0, 0.0]), np.array([0.1, 0.2, 0.3]), t=1.0),
    codecs.odometry(np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 0.0, 0.0]),
                    np.array([0.5, 0.0, 0.0]), np.zeros(3), t=2.0),
    m.Twist(m.Vector3(0.5, 0.0, 0.0), m.Vector3(0.0, 0.0, 0.3)),
    m.PointStamped(m.Header(m.Time(1, 2), "world"), m.Point(0.0, 0.0, 1.0)),
    m.Bool(True),
    codecs.multi_array(np.array([0.1, 0.2, 0.3]), "joint_position"),
    unitree.low_state({"joint_pos": np.zeros(12), "joint_vel": np.zeros(12),
                       "orientation": np.array([1.0, 0, 0, 0]), "angular_velocity": np.zeros(3)},
                      list(range(12)), tick=9),
    unitree.low_cmd(list(range(12)), np.ones(12), np.full(12, 20.0), np.full(12, 0.5)),
    px4.vehicle_odometry({"position": np.ones(3), "orientation": np.array([1.0, 0, 0, 0]),
                          "linear_velocity": np.zeros(3), "angular_velocity": np.zeros(3)}, 5),
    px4.actuator_motors(np.full(4, 0.5), [0, 1, 2, 3], 6),
    px4.offboard_control_mode(7),
]


@pytest.fixture(scope="module")
def participants():
    mp = pytest.MonkeyPatch()
    mp.setenv("CYCLONEDDS_URI", dds.LOOPBACK_CONFIG)
    yield dds.Transport(domain_id=21), dds.Transport(domain_id=21)
    mp.undo()


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda x: type(x).__name__)
def test_every_message_crosses_dds_between_two_participants(participants, msg):
    a, b = participants
    topic = f"/simreal_transport_{type(msg).__name__.lower()}"
    sub = b.subscription(topic, type(msg), QoS.COMMAND)
    pub = a.publisher(topic, type(msg), QoS.COMMAND)
    got, end = [], time.monotonic() + 5.0
    while not got and time.monotonic() < end:  # bounded: discovery, then one sample
        pub.write(msg)
        if sub.wait(0.1):
            got = sub.take()
    assert got, f"nothing arrived on {topic}"
    assert got[0].serialize() == msg.serialize()


def test_subscription_wait_times_out_without_data(participants):
    _, b = participants
    sub = b.subscription("/simreal_transport_silent", m.Bool, QoS.SENSOR)
    start = time.monotonic()
    assert sub.wait(0.05) is False
    assert time.monotonic() - start < 5.0 and sub.take() == []


def test_local_bus_delivers_through_cdr_and_checks_types():
    bus = LocalBus()
    sub = bus.subscription("/x", m.Twist, QoS.COMMAND)
    pub = bus.publisher("/x", m.Twist)
    assert sub.wait(0.0) is False
    for i in range(12):  # COMMAND keeps the last 10
        pub.write(m.Twist(m.Vector3(float(i), 0.0, 0.0)))
    assert sub.wait(0.0)
    got = sub.take()
    assert [g.linear.x for g in got] == [float(i) for i in range(2, 12)]
    assert sub.take() == []
    with pytest.raises(TypeError, match="already carries Twist"):
        bus.publisher("/x", m.Bool)
    with pytest.raises(TypeError, match="expected Twist"):
        pub.write(m.Bool(True))


def test_rclpy_transport_says_what_is_missing():
    from simreal.deploy.ros2 import RclpyTransport, RclpyUnavailable, ros_message_class

    try:
        import rclpy  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("rclpy is installed: this test covers its absence")
    with pytest.raises(RclpyUnavailable, match="needs a ROS 2 installation.*--transport dds"):
        RclpyTransport()
    with pytest.raises(RclpyUnavailable, match="sensor_msgs/msg/JointState is not installed"):
        ros_message_class(m.JointState)


@pytest.mark.parametrize("seed", range(4))
def test_fast_codecs_write_what_cyclonedds_generic_serializer_writes(seed):
    """The hand-written codecs (deploy/cdr.py) against cyclonedds' own machinery, on contents
    that move the alignment around: names of every length, empty and long sequences."""
    rng = np.random.default_rng(seed)
    names = ["j" * int(k) + "é" * (seed % 2) for k in rng.integers(0, 9, size=seed * 3)]
    n = len(names)
    msgs = [
        m.JointState(m.Header(m.Time(int(rng.integers(-5, 5)), 7), "b" * seed), names,
                     rng.normal(size=n).tolist(), rng.normal(size=n).tolist() if seed else [],
                     rng.normal(size=n).tolist()),
        m.Imu(m.Header(m.Time(1, 2), "x" * (seed + 1)), m.Quaternion(*rng.normal(size=4)),
              rng.normal(size=9).tolist(), m.Vector3(*rng.normal(size=3)),
              rng.normal(size=9).tolist(), m.Vector3(*rng.normal(size=3)),
              rng.normal(size=9).tolist()),
        codecs.odometry(rng.normal(size=3), np.array([1.0, 0, 0, 0]), rng.normal(size=3),
                        rng.normal(size=3), frame_id="w" * seed, child_frame_id="c" * (3 - seed)),
        m.Float64MultiArray(m.MultiArrayLayout([m.MultiArrayDimension("d" * k, k, 2 * k)
                                                for k in range(seed)], seed),
                            rng.normal(size=seed * 5).tolist()),
    ]
    for msg in msgs:
        ours = msg.serialize()
        assert ours == type(msg).__idl__.serialize(msg), type(msg).__name__
        assert type(msg).deserialize(ours) == type(msg).__idl__.deserialize(ours)


def test_cached_name_blocks_never_stand_in_for_different_names():
    """JointState names are encoded and parsed once per distinct list (deploy/cdr.py); a
    message whose names differ, even only in a suffix, or whose count differs, is parsed."""
    lists = [["a", "b"], ["a", "bc"], ["a"], ["a", "b", "c"], [], ["é", "b"]]
    lists += [[f"j{i}", f"k{k}"] for i in range(6) for k in range(4)]  # more than the cache
    for frame in ("", "x", "base_link"):  # moves the block's offset
        for names in lists + lists[::-1]:
            msg = m.JointState(m.Header(m.Time(1, 2), frame), names, [0.5] * len(names), [],
                               [])
            data = msg.serialize()
            assert data == m.JointState.__idl__.serialize(msg)
            back = m.JointState.deserialize(data)
            assert back == msg and back.name == names and back.name is not names
