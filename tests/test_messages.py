"""Our Cyclone DDS message types put the same bytes on the wire as ROS 2 (rosbags' CDR)."""

import dataclasses

import numpy as np
import pytest
from cyclonedds.idl import IdlStruct
from rosbags.typesys import Stores, get_typestore

from simreal.deploy import messages as m

STORE = get_typestore(Stores.ROS2_HUMBLE)


def to_rosbags(obj):
    cls = STORE.types[m.ROS_TYPES[type(obj)]]
    kwargs = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, IdlStruct):
            value = to_rosbags(value)
        elif isinstance(value, list) and value and isinstance(value[0], IdlStruct):
            value = [to_rosbags(v) for v in value]
        elif isinstance(value, list) and (not value or isinstance(value[0], float)) and \
                f.name not in ("name",):
            value = np.asarray(value, dtype=np.float64)
        kwargs[f.name] = value
    return cls(**kwargs)


def _header():
    return m.Header(m.Time(1_700_000_000, 123_456_789), "base_link")


SAMPLES = [
    m.JointState(_header(), ["FL_hip", "FL_thigh", "FL_calf"], [0.1, 0.8, -1.5],
                 [0.0, -0.25, 3.5], [1.0, 2.0, -3.0]),
    m.JointState(_header(), [], [], [], []),
    m.Imu(_header(), m.Quaternion(0.1, 0.2, 0.3, 0.927), [0.01] * 9, m.Vector3(0.5, -0.2, 1.0),
          [0.02] * 9, m.Vector3(0.0, 0.1, 9.81), [0.03] * 9),
    m.Twist(m.Vector3(0.5, -0.1, 0.0), m.Vector3(0.0, 0.0, 0.7)),
    m.Odometry(_header(), "trunk",
               m.PoseWithCovariance(m.Pose(m.Point(1.0, 2.0, 0.3), m.Quaternion(0, 0, 0.38, 0.92)),
                                    [float(i) for i in range(36)]),
               m.TwistWithCovariance(m.Twist(m.Vector3(0.4, 0, 0), m.Vector3(0, 0, 0.1)),
                                     [0.5] * 36)),
    m.Bool(True),
    m.Bool(False),
    m.Float64MultiArray(m.MultiArrayLayout([m.MultiArrayDimension("joints", 7, 7)], 0),
                        [0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785]),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda x: type(x).__name__)
def test_bytes_equal_rosbags_in_both_directions(msg):
    ours = msg.serialize()
    theirs = bytes(STORE.serialize_cdr(to_rosbags(msg), m.ROS_TYPES[type(msg)]))
    assert ours[:4] == b"\x00\x01\x00\x00"  # XCDR1 little-endian encapsulation
    assert ours == theirs
    assert type(msg).deserialize(theirs) == msg  # their bytes, our type
    back = STORE.deserialize_cdr(ours, m.ROS_TYPES[type(msg)])  # our bytes, their type
    assert bytes(STORE.serialize_cdr(back, m.ROS_TYPES[type(msg)])) == ours


def test_ros2_name_mangling():
    assert m.ros_topic("/joint_states") == "rt/joint_states"
    assert m.ros_topic("cmd_vel") == "rt/cmd_vel"
    assert m.JointState.__idl_typename__ == "sensor_msgs::msg::dds_::JointState_"
    assert m.ROS_TYPES[m.Float64MultiArray] == "std_msgs/msg/Float64MultiArray"
