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

from deploy.messages import ros_type
from deploy.transport import DEPTH, Publisher, QoS, Subscription, TransportBase

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


# --- the ROS 2 node's entry point (ros_ws/src/simreal_ros calls this) -------------------------
IGNORED_PARAMETERS = {"use_sim_time", "start_type_description_service"}


def config_from_parameters(params: dict[str, Any]) -> tuple[str, str, Any]:
    """(policy path, robot name or folder, NodeConfig) from a node's flat ROS parameters.

    ROS 2 parameter files nest with dots (`safety.watchdog_periods`); this rebuilds the nested
    configuration, so that the same NodeConfig validation (unknown keys are errors) applies.
    """
    from deploy.app import load_config
    from deploy.node import DeployError

    nested: dict[str, Any] = {}
    for name, value in params.items():
        if name in IGNORED_PARAMETERS or name.startswith("qos_overrides."):
            continue
        parts = name.split(".")
        node = nested
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = list(value) if isinstance(value, tuple | list) else value
    policy, robot = nested.pop("policy", ""), nested.pop("robot", "")
    if not policy or not robot:
        raise DeployError("ROS parameters 'policy' (path of the .onnx) and 'robot' (name or "
                          "folder) are required")
    return str(policy), str(robot), load_config(nested)


def ros_main(args: list[str] | None = None) -> int:
    """`ros2 run simreal_ros deploy_node --ros-args --params-file ...`: the deploy node as a ROS 2
    node. SIGINT/SIGTERM stop it after a damping command. Not run here (no ROS 2)."""
    import logging
    import signal
    import sys
    import threading

    try:
        rclpy = _rclpy()
    except RclpyUnavailable as exc:
        print(f"simreal_ros: {exc}", file=sys.stderr)
        return 1
    from rclpy.signals import SignalHandlerOptions

    from deploy.app import prepare, run
    from simreal.registry import get_robot

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="[simreal_deploy] %(message)s")
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("simreal_deploy", allow_undeclared_parameters=True,
                             automatically_declare_parameters_from_overrides=True)
    transport = None
    try:
        params = {name: p.value for name, p in node.get_parameters_by_prefix("").items()}
        policy, robot, cfg = config_from_parameters(params)
        transport = RclpyTransport(node=node)
        deploy_node = prepare(policy, get_robot(robot), transport, cfg)
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        summary = run(deploy_node, None, stop)
        node.get_logger().info(f"stopped: {summary['cycles']} cycles, mode {summary['mode']}")
        return 0
    except (ValueError, FileNotFoundError) as exc:  # contract, robot, configuration errors
        node.get_logger().error(str(exc))
        return 2
    finally:
        if transport is not None:
            transport.close()
        node.destroy_node()
        rclpy.try_shutdown()
