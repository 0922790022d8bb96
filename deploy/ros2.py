"""The rclpy transport: the same node inside a ROS 2 graph, where ROS 2 is installed.

A thin shell, kept so on purpose: rclpy cannot be installed from PyPI, so nothing here runs in
this project's tests. Everything else the node does (codecs, safety, observation, inference,
the loop) is transport-independent code that the Cyclone DDS transport exercises in the tests.

How it stays thin: subscriptions ask rclpy for the serialized message (`raw=True`) and decode
it with our own message classes, and publishers hand rclpy the bytes our classes serialize.
Those bytes are ROS 2's CDR (tests compare them with rosbags' serializer), so rclpy moves them
unchanged. rclpy only needs the message type for its type support: the ROS package of every
type in use must be installed (sensor_msgs, nav_msgs, geometry_msgs, std_msgs; unitree_go from
Unitree's unitree_ros2 for the Go2's native interface; px4_msgs for PX4's).

Not run here: everything in this file. Run on a ROS 2 (Humble or later) machine.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections import deque
from typing import Any

from simreal.deploy.messages import ros_type
from simreal.deploy.transport import DEPTH, Publisher, QoS, Subscription, TransportBase

INSTALL_HINT = (
    "rclpy is not importable: the ros2 transport needs a ROS 2 installation (source "
    "/opt/ros/<distro>/setup.bash, or build ros_ws/src/simreal_ros with colcon). Without ROS 2, "
    "use --transport dds: the same node on the same wire through Cyclone DDS.")


class RclpyUnavailable(RuntimeError):
    pass


def _rclpy() -> Any:
    try:
        return importlib.import_module("rclpy")
    except ImportError as exc:
        raise RclpyUnavailable(f"{INSTALL_HINT} ({exc})") from None


def ros_message_class(msg_type: type) -> Any:
    """The rclpy message class of one of our IDL classes, e.g. sensor_msgs.msg.JointState."""
    pkg, _, name = ros_type(msg_type).split("/")
    try:
        return getattr(importlib.import_module(f"{pkg}.msg"), name)
    except (ImportError, AttributeError) as exc:
        raise RclpyUnavailable(f"ROS 2 message {pkg}/msg/{name} is not installed ({exc}); "
                               f"build or install the {pkg} package") from None


class _RawSubscription:
    def __init__(self, msg_type: type, depth: int):
        self._type = msg_type
        self._queue: deque[bytes] = deque(maxlen=depth)
        self._cond = threading.Condition()

    def callback(self, data: bytes) -> None:  # rclpy's executor thread
        with self._cond:
            self._queue.append(bytes(data))
            self._cond.notify_all()

    def take(self) -> list[Any]:
        with self._cond:
            items = list(self._queue)
            self._queue.clear()
        return [self._type.deserialize(d) for d in items]

    def wait(self, timeout_s: float) -> bool:
        end = time.monotonic() + timeout_s
        with self._cond:
            while not self._queue:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True


class _RawPublisher:
    def __init__(self, pub: Any):
        self._pub = pub

    def write(self, msg: Any) -> None:
        self._pub.publish(msg.serialize())


class RclpyTransport(TransportBase):
    """An rclpy node whose executor spins in a background thread."""

    name = "ros2"

    def __init__(self, node_name: str = "simreal_deploy", domain_id: int | None = None,
                 node: Any = None):
        rclpy = _rclpy()
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

        self._rclpy = rclpy
        self._owns_context = node is None
        if node is None:
            if not rclpy.ok():
                rclpy.init(domain_id=domain_id)
            node = rclpy.create_node(node_name)
        self.node = node
        self._qos = {
            QoS.SENSOR: QoSProfile(reliability=ReliabilityPolicy.BEST_EFFORT,
                                   history=HistoryPolicy.KEEP_LAST, depth=DEPTH[QoS.SENSOR],
                                   durability=DurabilityPolicy.VOLATILE),
            QoS.COMMAND: QoSProfile(reliability=ReliabilityPolicy.RELIABLE,
                                    history=HistoryPolicy.KEEP_LAST, depth=DEPTH[QoS.COMMAND],
                                    durability=DurabilityPolicy.VOLATILE),
        }
        self._executor = SingleThreadedExecutor()
        self._executor.add_node(node)
        self._thread = threading.Thread(target=self._executor.spin, daemon=True,
                                        name="rclpy-executor")
        self._thread.start()

    def publisher(self, topic: str, msg_type: type, qos: QoS = QoS.COMMAND) -> Publisher:
        pub = self.node.create_publisher(ros_message_class(msg_type), topic, self._qos[QoS(qos)])
        return _RawPublisher(pub)

    def subscription(self, topic: str, msg_type: type, qos: QoS = QoS.SENSOR) -> Subscription:
        sub = _RawSubscription(msg_type, DEPTH[QoS(qos)])
        self.node.create_subscription(ros_message_class(msg_type), topic, sub.callback,
                                      self._qos[QoS(qos)], raw=True)
        return sub

    def close(self) -> None:
        self._executor.shutdown()
        if self._owns_context:
            self.node.destroy_node()
            self._rclpy.try_shutdown()
