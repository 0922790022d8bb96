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

from simreal.deploy import cdr


def ros_topic(name: str) -> str:
    """The DDS topic of a ROS 2 topic: `/joint_states` -> `rt/joint_states`."""
    return "rt/" + name.lstrip("/")


def ros_typename(ros_type: str) -> str:
    """The DDS type name of a ROS 2 type: `pkg/msg/Type` -> `pkg::msg::dds_::Type_`."""
    return _t(ros_type)


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
class PointStamped(IdlStruct, typename=_t("geometry_msgs/msg/PointStamped")):
    header: Header = field(default_factory=Header)
    point: Point = field(default_factory=Point)


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


# --- arms: pose inputs and joint trajectory commands -----------------------------------------
@dataclass
@annotate.final
class Float64(IdlStruct, typename=_t("std_msgs/msg/Float64")):
    data: float64 = 0.0


@dataclass
@annotate.final
class PoseStamped(IdlStruct, typename=_t("geometry_msgs/msg/PoseStamped")):
    header: Header = field(default_factory=Header)
    pose: Pose = field(default_factory=Pose)


@dataclass
@annotate.final
class Duration(IdlStruct, typename=_t("builtin_interfaces/msg/Duration")):
    sec: int32 = 0
    nanosec: uint32 = 0


@dataclass
@annotate.final
class JointTrajectoryPoint(IdlStruct, typename=_t("trajectory_msgs/msg/JointTrajectoryPoint")):
    positions: sequence[float64] = field(default_factory=list)
    velocities: sequence[float64] = field(default_factory=list)
    accelerations: sequence[float64] = field(default_factory=list)
    effort: sequence[float64] = field(default_factory=list)
    time_from_start: Duration = field(default_factory=Duration)


@dataclass
@annotate.final
class JointTrajectory(IdlStruct, typename=_t("trajectory_msgs/msg/JointTrajectory")):
    header: Header = field(default_factory=Header)
    joint_names: sequence[str] = field(default_factory=list)
    points: sequence[JointTrajectoryPoint] = field(default_factory=list)


# --- type variants: one message, several XTypes definitions with the same bytes ---------------
TYPE_VARIANTS: dict[type, tuple[type, ...]] = {}


def add_type_variant(cls: type, *variants: type) -> None:
    """Declare IDL classes that put `cls` on the wire byte for byte under the same type name but
    with another XTypes type identifier (Unitree's SDK declares temperatures uint8 where
    unitree_ros2 says int8): Cyclone matches endpoints by type identifier, so a DDS reader of
    `cls` alone never hears a publisher of a variant. deploy/dds.py reads through every variant
    (never writes through one); each variant must decode into `cls` objects."""
    for v in variants:
        if v.__idl_typename__ != cls.__idl_typename__:
            raise ValueError(f"{v.__name__} is named {v.__idl_typename__}, not "
                             f"{cls.__idl_typename__}: a variant differs in definition only")
        if cdr.fixed_struct(v).format.lower() != cdr.fixed_struct(cls).format.lower():
            raise ValueError(f"{v.__name__}: not the wire layout of {cls.__name__} (field "
                             "types may differ in signedness only)")
    TYPE_VARIANTS[cls] = TYPE_VARIANTS.get(cls, ()) + tuple(variants)


def ros_type(cls: type) -> str:
    """The ROS 2 type name of a message class: `sensor_msgs/msg/JointState`."""
    return cls.__idl_typename__.replace("::dds_::", "/").replace("::", "/").rstrip("_")


# the ROS 2 type name of each standard message class
ROS_TYPES: dict[type, str] = {
    cls: ros_type(cls)
    for cls in (Time, Header, Vector3, Point, PointStamped, Quaternion, Pose, Twist,
                PoseWithCovariance, TwistWithCovariance, JointState, Imu, Odometry, Bool,
                MultiArrayDimension, MultiArrayLayout, Float64MultiArray, Float64, PoseStamped,
                Duration, JointTrajectoryPoint, JointTrajectory)
}


# --- fast codecs for the messages of every control cycle (deploy/cdr.py) ---------------------
def _w_header(w: cdr.Writer, h: Header) -> None:
    w.time(h.stamp.sec, h.stamp.nanosec)
    w.string(h.frame_id)


def _r_header(r: cdr.Reader) -> Header:
    sec, nanosec = r.time()
    return Header(Time(sec, nanosec), r.string())


def _w_joint_state(w: cdr.Writer, m: JointState) -> None:
    _w_header(w, m.header)
    w.strings(m.name)
    w.double_seq(m.position)
    w.double_seq(m.velocity)
    w.double_seq(m.effort)


def _r_joint_state(r: cdr.Reader) -> JointState:
    header = _r_header(r)
    names = r.strings()
    return JointState(header, names, r.double_seq(), r.double_seq(), r.double_seq())


def _w_imu(w: cdr.Writer, m: Imu) -> None:
    _w_header(w, m.header)
    q, a, c = m.orientation, m.angular_velocity, m.linear_acceleration
    w.doubles([q.x, q.y, q.z, q.w, *m.orientation_covariance, a.x, a.y, a.z,
               *m.angular_velocity_covariance, c.x, c.y, c.z, *m.linear_acceleration_covariance])


def _r_imu(r: cdr.Reader) -> Imu:
    header = _r_header(r)
    d = r.doubles(37)
    return Imu(header, Quaternion(*d[0:4]), d[4:13], Vector3(*d[13:16]), d[16:25],
               Vector3(*d[25:28]), d[28:37])


def _w_odometry(w: cdr.Writer, m: Odometry) -> None:
    _w_header(w, m.header)
    w.string(m.child_frame_id)
    p, q = m.pose.pose.position, m.pose.pose.orientation
    v, a = m.twist.twist.linear, m.twist.twist.angular
    w.doubles([p.x, p.y, p.z, q.x, q.y, q.z, q.w, *m.pose.covariance, v.x, v.y, v.z,
               a.x, a.y, a.z, *m.twist.covariance])


def _r_odometry(r: cdr.Reader) -> Odometry:
    header, child = _r_header(r), r.string()
    d = r.doubles(85)
    return Odometry(header, child,
                    PoseWithCovariance(Pose(Point(*d[0:3]), Quaternion(*d[3:7])), d[7:43]),
                    TwistWithCovariance(Twist(Vector3(*d[43:46]), Vector3(*d[46:49])),
                                        d[49:85]))


def _w_multi_array(w: cdr.Writer, m: Float64MultiArray) -> None:
    w.u32(len(m.layout.dim))
    for d in m.layout.dim:
        w.string(d.label)
        w.u32(d.size)
        w.u32(d.stride)
    w.u32(m.layout.data_offset)
    w.double_seq(m.data)


def _r_multi_array(r: cdr.Reader) -> Float64MultiArray:
    dims = []
    for _ in range(r.u32()):
        label = r.string()
        dims.append(MultiArrayDimension(label, *r.uu()))
    return Float64MultiArray(MultiArrayLayout(dims, r.u32()), r.double_seq())


cdr.install(JointState, _w_joint_state, _r_joint_state)
cdr.install(Imu, _w_imu, _r_imu)
cdr.install(Odometry, _w_odometry, _r_odometry)
cdr.install(Float64MultiArray, _w_multi_array, _r_multi_array)
