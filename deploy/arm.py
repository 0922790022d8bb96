"""An arm's ROS 2 interface: joint states in, joint position commands out.

State: sensor_msgs/JointState `/joint_states` (ros2_control's joint_state_broadcaster), in
robot.yaml's joint names; the tool pose the policy observes is computed from the measured
joint angles by forward kinematics of robot.yaml's DH table (robots/kinematics.py), as the
simulator computes it for the actor. A policy that reads an object's pose (arm-lift) also
takes geometry_msgs/PoseStamped `/object_pose` from a perception node, in the robot's base
frame; it is a state topic (the node waits for it and its staleness trips the watchdog).

Commands, one of:
- `forward_position`: std_msgs/Float64MultiArray on `/forward_position_controller/commands`
  (ros2_control's forward command controller), the joint targets in policy order;
- `joint_trajectory`: trajectory_msgs/JointTrajectory on
  `/joint_trajectory_controller/joint_trajectory`, one point per control period with the
  joint names, the targets and `time_from_start` one period.
The last command of a Panda policy is the gripper's finger opening (m): a controller (or a
bridge to franka_gripper's action server) configured with that joint takes it.

Damping (DAMP, ESTOP, shutdown): the measured joint positions as the target, so the joint
controllers hold the arm where it is.

User inputs for arm policies: geometry_msgs/PoseStamped `/target_pose` sets the commanded
tool pose (`target_position`, `target_orientation`); std_msgs/Float64 `/lift_height` sets
`lift_height` (m).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, cast, get_args

import numpy as np

from simreal.deploy import codecs
from simreal.deploy import messages as m
from simreal.deploy.interfaces import (
    InterfaceError,
    InterfaceSettings,
    Messages,
    RobotInterface,
    Signals,
    TopicSpec,
)
from simreal.deploy.safety import Mode
from simreal.deploy.transport import QoS
from simreal.robots import Robot
from simreal.robots.kinematics import forward_kinematics

ArmCommand = Literal["forward_position", "joint_trajectory"]

JOINT_STATES = TopicSpec("joint_states", "/joint_states", m.JointState, QoS.SENSOR)
OBJECT_POSE = TopicSpec("object_pose", "/object_pose", m.PoseStamped, QoS.SENSOR)
FORWARD = TopicSpec("command", "/forward_position_controller/commands", m.Float64MultiArray,
                    QoS.COMMAND)
TRAJECTORY = TopicSpec("trajectory", "/joint_trajectory_controller/joint_trajectory",
                       m.JointTrajectory, QoS.COMMAND)
OBJECT_SIGNALS = frozenset({"object_position", "object_orientation"})


def pose_signals(msg: m.PoseStamped) -> tuple[np.ndarray, np.ndarray]:
    """(position, unit quaternion (w, x, y, z)) of a PoseStamped; ValueError if degenerate."""
    p, q = msg.pose.position, msg.pose.orientation
    quat = np.array([q.w, q.x, q.y, q.z])
    norm = float(np.linalg.norm(quat))
    if not norm > 1e-6:
        raise ValueError(f"pose orientation {quat.tolist()} is not a rotation")
    return np.array([p.x, p.y, p.z]), quat / norm


def pose_stamped(position: np.ndarray, orientation: np.ndarray, t: float | None = None,
                 frame_id: str = "base") -> m.PoseStamped:
    q = orientation
    return m.PoseStamped(m.Header(codecs.stamp(t), frame_id),
                         m.Pose(m.Point(*(float(x) for x in position)),
                                m.Quaternion(float(q[1]), float(q[2]), float(q[3]),
                                             float(q[0]))))


def orientation_command(quat: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """A commanded quaternion on the side (q or -q, the same rotation) nearest the middle of
    its trained range, so that clamping it to the range does not distort it."""
    mid = (np.asarray(low) + np.asarray(high)) / 2
    return -quat if float(quat @ mid) < 0 else quat


def joint_trajectory(names: list[str], positions: np.ndarray, period_s: float,
                     t: float | None = None) -> m.JointTrajectory:
    sec = int(period_s)
    point = m.JointTrajectoryPoint(positions=[float(x) for x in positions],
                                   time_from_start=m.Duration(sec, round((period_s - sec) * 1e9)))
    return m.JointTrajectory(m.Header(codecs.stamp(t), ""), list(names), [point])


def trajectory_targets(msg: m.JointTrajectory, order: codecs.JointOrder) -> np.ndarray:
    """The first point's positions in policy order."""
    if not msg.points:
        raise ValueError("joint trajectory has no points")
    idx = order.index(msg.joint_names)
    positions = np.asarray(msg.points[0].positions, dtype=np.float64)
    if len(positions) != len(msg.joint_names):
        raise ValueError(f"trajectory point has {len(positions)} positions for "
                         f"{len(msg.joint_names)} joints")
    return positions[idx]


class ArmGeneric(RobotInterface):
    name = "generic"
    # every topic an arm may use (a node configuration may name any of them)
    state_topics = (JOINT_STATES, OBJECT_POSE)
    command_topics = (FORWARD, TRAJECTORY)
    provides = frozenset({"joint_pos", "joint_vel", "joint_effort", "ee_position",
                          "ee_orientation"}) | OBJECT_SIGNALS

    def __init__(self, robot: Robot, command: ArmCommand = "forward_position",
                 object_pose: bool = False):
        super().__init__(robot)
        if robot.spec.kinematics is None:
            raise ValueError(f"{robot.yaml_path}: kinematics: an arm interface computes the "
                             "tool pose from it; robot.yaml has none")
        self.kinematics = robot.spec.kinematics
        self.joint_names = [j.name for j in robot.spec.joints]
        self.order = codecs.JointOrder(self.joint_names)
        self.period_s = 1.0 / robot.spec.control.rate_hz
        self.command = command
        # this instance's topics: the object pose only when the policy reads it
        self.state_topics = (JOINT_STATES, OBJECT_POSE) if object_pose else (JOINT_STATES,)
        self.command_topics = (FORWARD,) if command == "forward_position" else (TRAJECTORY,)
        self.provides = ArmGeneric.provides if object_pose else \
            ArmGeneric.provides - OBJECT_SIGNALS

    @classmethod
    def from_settings(cls, robot: Robot, settings: InterfaceSettings) -> ArmGeneric:
        """The object pose topic only when the policy reads it (none: the robot side)."""
        if settings.arm_command not in get_args(ArmCommand):
            raise InterfaceError(f"{settings.arm_command!r} is not one of "
                                 f"{get_args(ArmCommand)}", "arm_command")
        try:
            return cls(robot, cast(ArmCommand, settings.arm_command),
                       object_pose=bool(settings.reads & OBJECT_SIGNALS))
        except ValueError as exc:
            raise InterfaceError(str(exc)) from None

    def decode(self, key: str, msg: Any) -> Signals:
        if key == "object_pose":
            pos, quat = pose_signals(msg)
            return {"object_position": pos, "object_orientation": quat}
        s = codecs.joint_state_signals(msg, self.order)
        pos, quat = forward_kinematics(self.kinematics, s["joint_pos"])
        s["ee_position"], s["ee_orientation"] = pos, quat
        return s

    def encode(self, command: np.ndarray, mode: Mode, signals: Signals) -> list[tuple[str, Any]]:
        if self.command == "forward_position":
            return [("command", codecs.multi_array(command, "joint_position"))]
        return [("trajectory", joint_trajectory(self.joint_names, command, self.period_s))]

    def measured(self, signals: Signals) -> np.ndarray | None:
        return signals["joint_pos"]

    def damping(self, signals: Signals) -> np.ndarray:
        return signals["joint_pos"].copy()

    def state_messages(self, signals: Mapping[str, np.ndarray], t: float | None = None
                       ) -> list[tuple[str, Any]]:
        out = []
        if OBJECT_POSE in self.state_topics:
            out.append(("object_pose", pose_stamped(signals["object_position"],
                                                    signals["object_orientation"], t)))
        out.append(("joint_states", codecs.joint_state(self.joint_names, signals["joint_pos"],
                                                       signals["joint_vel"],
                                                       signals.get("joint_effort"), t)))
        return out

    def command_of(self, key: str, msg: Any) -> dict[str, np.ndarray]:
        if key == "trajectory":
            return {"q": trajectory_targets(msg, self.order)}
        return {"q": codecs.multi_array_values(msg, len(self.joint_names))}

    def raw_command(self, cmd: Mapping[str, np.ndarray]) -> Messages:
        return self.encode(np.asarray(cmd["q"]), Mode.RUN, {})

    def raw_damping(self, signals: Mapping[str, np.ndarray]) -> Messages:
        if "joint_pos" not in signals:
            return []  # no pose to hold yet: send nothing
        return self.raw_command({"q": signals["joint_pos"]})
