"""The deploy node as a ROS 2 node: `ros2 run simreal_ros deploy_node` calls `ros_main`.

Kept apart from deploy/ros2.py (the transport) so that imports point one way: this entry point
builds on the application (deploy/app.py), which picks a transport; the transport knows
neither. Not run here (no ROS 2): `config_from_parameters` is tested, `ros_main` is not.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Any

from simreal.deploy.app import load_config, prepare, run
from simreal.deploy.node import DeployError
from simreal.deploy.ros2 import RclpyTransport, RclpyUnavailable, _rclpy
from simreal.robots.registry import get_robot

IGNORED_PARAMETERS = {"use_sim_time", "start_type_description_service"}


def config_from_parameters(params: dict[str, Any]) -> tuple[str, str, Any]:
    """(policy path, robot name or folder, NodeConfig) from a node's flat ROS parameters.

    ROS 2 parameter files nest with dots (`safety.watchdog_periods`); this rebuilds the nested
    configuration, so that the same NodeConfig validation (unknown keys are errors) applies.
    """
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
    try:
        rclpy = _rclpy()
    except RclpyUnavailable as exc:
        print(f"simreal_ros: {exc}", file=sys.stderr)
        return 1
    from rclpy.signals import SignalHandlerOptions

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
