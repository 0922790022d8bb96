"""ROS 2 standard messages <-> named signals, for the node and for a robot-side simulator.

Signals are 1-D float64 numpy arrays named as the observation terms read them (deploy/terms.py):
`joint_pos`, `joint_vel`, `joint_effort` (policy joint order), `orientation` (w, x, y, z, body
to world), `angular_velocity` (body), `linear_acceleration` (body), `position` and
`linear_velocity` (world). ROS quaternions are (x, y, z, w); nav_msgs/Odometry gives its twist
in the child (body) frame, which the decoder rotates into the world frame.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from simreal.deploy import messages as m


def stamp(t: float | None = None) -> m.Time:
    """A ROS time from seconds (wall clock by default)."""
    t = time.time() if t is None else t
    sec = int(t)
    return m.Time(sec, int(round((t - sec) * 1e9)) % 1_000_000_000)


def _q_wxyz(q: m.Quaternion) -> np.ndarray:
    return np.array([q.w, q.x, q.y, q.z])


def _q_ros(q: Sequence[float]) -> m.Quaternion:
    return m.Quaternion(float(q[1]), float(q[2]), float(q[3]), float(q[0]))


def _v(v: m.Vector3 | m.Point) -> np.ndarray:
    return np.array([v.x, v.y, v.z])


def _vec(v: Sequence[float]) -> m.Vector3:
    return m.Vector3(float(v[0]), float(v[1]), float(v[2]))


def rotate(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Body vector v in the world frame, for orientation q (w, x, y, z): v + w t + u x t with
    t = 2 u x v, u = (x, y, z); in Python floats (np.cross on 3-vectors cost ~15 us a call,
    in a state decoder that runs every period)."""
    w, x, y, z = (float(c) for c in q)
    a, b, c = (float(e) for e in v)
    tx, ty, tz = 2.0 * (y * c - z * b), 2.0 * (z * a - x * c), 2.0 * (x * b - y * a)
    return np.array([a + w * tx + (y * tz - z * ty), b + w * ty + (z * tx - x * tz),
                     c + w * tz + (x * ty - y * tx)])


# --- joint state ------------------------------------------------------------------------------
class JointOrder:
    """Maps a JointState's names onto the policy's joint order (cached per name list)."""

    def __init__(self, names: Sequence[str]):
        self.names = list(names)
        self._key: tuple[str, ...] | None = None
        self._index: np.ndarray | None = None

    def index(self, msg_names: Sequence[str]) -> np.ndarray:
        key = tuple(msg_names)
        if key != self._key:
            where = {n: i for i, n in enumerate(key)}
            missing = [n for n in self.names if n not in where]
            if missing:
                raise ValueError(f"joint_states lacks joints {missing} (it has {list(key)})")
            self._key, self._index = key, np.array([where[n] for n in self.names])
        return self._index


def joint_state_signals(msg: m.JointState, order: JointOrder, need_velocity: bool = True,
                        need_effort: bool = False) -> dict[str, np.ndarray]:
    idx = order.index(msg.name)
    n = len(msg.name)
    if len(msg.position) != n:
        raise ValueError(f"joint_states has {n} names but {len(msg.position)} positions")
    keys, rows = ["joint_pos"], [msg.position]
    if len(msg.velocity) == n:
        keys.append("joint_vel")
        rows.append(msg.velocity)
    elif need_velocity:
        raise ValueError("joint_states carries no velocity, and the policy reads joint_vel")
    if len(msg.effort) == n:
        keys.append("joint_effort")
        rows.append(msg.effort)
    elif need_effort:  # many drivers leave effort empty
        raise ValueError(f"joint_states carries {len(msg.effort)} efforts for {n} joints, and "
                         "the policy reads joint_effort (leg odometry's torque stance rule)")
    table = np.array(rows, dtype=np.float64)[:, idx]  # one array, rows in policy order
    return dict(zip(keys, table, strict=True))


def joint_state(names: Sequence[str], pos: np.ndarray, vel: np.ndarray,
                effort: np.ndarray | None = None, t: float | None = None) -> m.JointState:
    return m.JointState(m.Header(stamp(t), ""), list(names), [float(x) for x in pos],
                        [float(x) for x in vel],
                        [] if effort is None else [float(x) for x in effort])


# --- IMU ------------------------------------------------------------------------------------
def imu_signals(msg: m.Imu) -> dict[str, np.ndarray]:
    q, w, a = msg.orientation, msg.angular_velocity, msg.linear_acceleration
    v = np.array([q.w, q.x, q.y, q.z, w.x, w.y, w.z, a.x, a.y, a.z])
    return {"orientation": v[0:4], "angular_velocity": v[4:7], "linear_acceleration": v[7:10]}


def imu(orientation: np.ndarray, angular_velocity: np.ndarray,
        linear_acceleration: np.ndarray | None = None, t: float | None = None,
        frame_id: str = "imu") -> m.Imu:
    acc = (0.0, 0.0, 9.81) if linear_acceleration is None else linear_acceleration
    return m.Imu(m.Header(stamp(t), frame_id), _q_ros(orientation), [0.0] * 9,
                 _vec(angular_velocity), [0.0] * 9, _vec(acc), [0.0] * 9)


# --- odometry -----------------------------------------------------------------------------------
def odometry_signals(msg: m.Odometry) -> dict[str, np.ndarray]:
    q = _q_wxyz(msg.pose.pose.orientation)
    return {"position": _v(msg.pose.pose.position), "orientation": q,
            "linear_velocity": rotate(q, _v(msg.twist.twist.linear)),
            "angular_velocity": _v(msg.twist.twist.angular)}


def odometry(position: np.ndarray, orientation: np.ndarray, linear_velocity: np.ndarray,
             angular_velocity: np.ndarray, t: float | None = None, frame_id: str = "world",
             child_frame_id: str = "base") -> m.Odometry:
    """World position/velocity and body angular velocity -> Odometry (twist in the body)."""
    q = np.asarray(orientation, dtype=np.float64)
    conj = q * np.array([1.0, -1.0, -1.0, -1.0])
    v_body = rotate(conj, np.asarray(linear_velocity, dtype=np.float64))
    p = position
    return m.Odometry(
        m.Header(stamp(t), frame_id), child_frame_id,
        m.PoseWithCovariance(m.Pose(m.Point(float(p[0]), float(p[1]), float(p[2])),
                                    _q_ros(q)), [0.0] * 36),
        m.TwistWithCovariance(m.Twist(_vec(v_body), _vec(angular_velocity)), [0.0] * 36))


# --- commands ---------------------------------------------------------------------------------
def multi_array(values: np.ndarray, label: str) -> m.Float64MultiArray:
    n = len(values)
    return m.Float64MultiArray(m.MultiArrayLayout([m.MultiArrayDimension(label, n, n)], 0),
                               [float(x) for x in values])


def multi_array_values(msg: m.Float64MultiArray, n: int) -> np.ndarray:
    if len(msg.data) != n:
        raise ValueError(f"command has {len(msg.data)} values, expected {n}")
    return np.asarray(msg.data, dtype=np.float64)


def twist_command(msg: m.Twist) -> np.ndarray:
    """cmd_vel -> (forward m/s, lateral m/s, yaw rate rad/s), the velocity_command signal."""
    return np.array([msg.linear.x, msg.linear.y, msg.angular.z])


def point_command(msg: m.PointStamped) -> np.ndarray:
    return _v(msg.point)


def reference_command(msg: m.Odometry) -> tuple[np.ndarray, np.ndarray]:
    """/reference -> (target_position, target_velocity), world frame."""
    return _v(msg.pose.pose.position), _v(msg.twist.twist.linear)
