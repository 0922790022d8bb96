"""ROS 2 standard messages as Cyclone DDS IDL types, on the ROS 2 wire.

ROS 2 (rmw_cyclonedds_cpp) names type `pkg/msg/Type` as `pkg::msg::dds_::Type_` and topic
`/name` as `rt/name`, and serializes plain (final) structs as XCDR1 little-endian; a
participant publishing these types on those topics is on the same wire as ROS 2 nodes. The
field layouts follow the ROS 2 message definitions (common_interfaces); tests compare every
type's bytes with the `rosbags` package's ROS 2 serializer, in both directions.

Needs `cyclonedds` (the `dds` extra), not ROS 2.
"""


from dataclasses import dataclass, field

import cyclonedds.idl.annotations as annotate
from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import array, float64, int32, sequence, uint32


def ros_topic(name: str) -> str:
    """The DDS topic of a ROS 2 topic: `/joint_states` -> `rt/joint_states`."""
    return "rt/" + name.lstrip("/")


def _t(ros_type: str) -> str:
    pkg, kind, name = ros_type.split("/")
    return f"{pkg}::{kind}::dds_::{name}_"


@dataclass
@annotate.final
class Time(IdlStruct, typename=_t("builtin_interfaces/msg/Time")):
    sec: int32 = 0
    nanosec: uint32 = 0


@dataclass
@annotate.final
class Header(IdlStruct, typename=_t("std_msgs/msg/Header")):
    stamp: Time = field(default_factory=Time)
    frame_id: str = ""


@dataclass
@annotate.final
class Vector3(IdlStruct, typename=_t("geometry_msgs/msg/Vector3")):
    x: float64 = 0.0
    y: float64 = 0.0
    z: float64 = 0.0


@dataclass
@annotate.final
class Point(IdlStruct, typename=_t("geometry_msgs/msg/Point")):
    x: float64 = 0.0
    y: float64 = 0.0
    z: float64 = 0.0


@dataclass
@annotate.final
class Quaternion(IdlStruct, typename=_t("geometry_msgs/msg/Quaternion")):
    x: float64 = 0.0
    y: float64 = 0.0
    z: float64 = 0.0
    w: float64 = 1.0


@dataclass
@annotate.final
class Pose(IdlStruct, typename=_t("geometry_msgs/msg/Pose")):
    position: Point = field(default_factory=Point)
    orientation: Quaternion = field(default_factory=Quaternion)


@dataclass
@annotate.final
class Twist(IdlStruct, typename=_t("geometry_msgs/msg/Twist")):
    linear: Vector3 = field(default_factory=Vector3)
    angular: Vector3 = field(default_factory=Vector3)


@dataclass
@annotate.final
class PoseWithCovariance(IdlStruct, typename=_t("geometry_msgs/msg/PoseWithCovariance")):
    pose: Pose = field(default_factory=Pose)
    covariance: array[float64, 36] = field(default_factory=lambda: [0.0] * 36)


@dataclass
@annotate.final
class TwistWithCovariance(IdlStruct, typename=_t("geometry_msgs/msg/TwistWithCovariance")):
    twist: Twist = field(default_factory=Twist)
    covariance: array[float64, 36] = field(default_factory=lambda: [0.0] * 36)


@dataclass
@annotate.final
class JointState(IdlStruct, typename=_t("sensor_msgs/msg/JointState")):
    header: Header = field(default_factory=Header)
    name: sequence[str] = field(default_factory=list)
    position: sequence[float64] = field(default_factory=list)
    velocity: sequence[float64] = field(default_factory=list)
    effort: sequence[float64] = field(default_factory=list)


@dataclass
@annotate.final
class Imu(IdlStruct, typename=_t("sensor_msgs/msg/Imu")):
    header: Header = field(default_factory=Header)
    orientation: Quaternion = field(default_factory=Quaternion)
    orientation_covariance: array[float64, 9] = field(default_factory=lambda: [0.0] * 9)
    angular_velocity: Vector3 = field(default_factory=Vector3)
    angular_velocity_covariance: array[float64, 9] = field(default_factory=lambda: [0.0] * 9)
    linear_acceleration: Vector3 = field(default_factory=Vector3)
    linear_acceleration_covariance: array[float64, 9] = field(
        default_factory=lambda: [0.0] * 9)


@dataclass
@annotate.final
class Odometry(IdlStruct, typename=_t("nav_msgs/msg/Odometry")):
    header: Header = field(default_factory=Header)
    child_frame_id: str = ""
    pose: PoseWithCovariance = field(default_factory=PoseWithCovariance)
    twist: TwistWithCovariance = field(default_factory=TwistWithCovariance)


@dataclass
@annotate.final
class Bool(IdlStruct, typename=_t("std_msgs/msg/Bool")):
    data: bool = False


@dataclass
@annotate.final
class MultiArrayDimension(IdlStruct, typename=_t("std_msgs/msg/MultiArrayDimension")):
    label: str = ""
    size: uint32 = 0
    stride: uint32 = 0


@dataclass
@annotate.final
class MultiArrayLayout(IdlStruct, typename=_t("std_msgs/msg/MultiArrayLayout")):
    dim: sequence[MultiArrayDimension] = field(default_factory=list)
    data_offset: uint32 = 0


@dataclass
@annotate.final
class Float64MultiArray(IdlStruct, typename=_t("std_msgs/msg/Float64MultiArray")):
    layout: MultiArrayLayout = field(default_factory=MultiArrayLayout)
    data: sequence[float64] = field(default_factory=list)


# the ROS 2 type name of each message class
ROS_TYPES: dict[type, str] = {
    cls: cls.__idl_typename__.replace("::dds_::", "/").replace("::", "/").rstrip("_")
    for cls in (Time, Header, Vector3, Point, Quaternion, Pose, Twist, PoseWithCovariance,
                TwistWithCovariance, JointState, Imu, Odometry, Bool, MultiArrayDimension,
                MultiArrayLayout, Float64MultiArray)
}
