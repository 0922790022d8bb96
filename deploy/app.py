"""`deploy()`: run a policy on a robot through a transport until stopped; `simreal deploy` calls it.

Network safety: the DDS transport runs on the loopback-only Cyclone configuration unless
`network=True` (`--network`), which uses the environment's CYCLONEDDS_URI (or Cyclone's
default discovery) to reach a real robot. The ros2 transport likewise sets
ROS_LOCALHOST_ONLY=1 / ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST unless `network=True`.

SIGINT and SIGTERM end the loop; the node then sends its damping command and returns.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from simreal.core.config import load_yaml_model, validate_model
from simreal.deploy.loop import (
    cpu_latency_request,
    pin_process,
    run_loop,
    run_triggered,
    set_realtime,
)
from simreal.deploy.node import DeployError, DeployNode, NodeConfig
from simreal.deploy.policy import OnnxPolicy
from simreal.deploy.runner import PolicyRunner
from simreal.deploy.transport import TransportBase
from simreal.robots import Robot, load_robot_dir

log = logging.getLogger("simreal.deploy")


def load_config(source: NodeConfig | Mapping[str, Any] | str | Path | None) -> NodeConfig:
    """A NodeConfig from an object, a mapping or a YAML file; errors name the file and field."""
    if source is None:
        return NodeConfig()
    if isinstance(source, NodeConfig):
        return source
    if isinstance(source, str | Path):
        return load_yaml_model(source, NodeConfig, DeployError, what="node configuration file")
    return validate_model(source, NodeConfig, "node configuration", DeployError)


def make_transport(kind: str, domain_id: int = 0, network: bool = False) -> TransportBase:
    if kind == "dds":
        from simreal.deploy import dds

        if not network:
            if os.environ.get("CYCLONEDDS_URI") not in (None, dds.LOOPBACK_CONFIG):
                log.info("CYCLONEDDS_URI replaced by the loopback-only configuration; pass "
                         "--network to use it")
            dds.use_loopback()
        return dds.Transport(domain_id=domain_id, network=network)
    if kind == "ros2":
        from simreal.deploy.ros2 import RclpyTransport

        if not network:
            os.environ["ROS_LOCALHOST_ONLY"] = "1"  # Humble
            os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"  # Iron and later
        return RclpyTransport(domain_id=domain_id)
    raise DeployError(f"unknown transport {kind!r}; known: dds, ros2")


def prepare(policy: str | Path | OnnxPolicy, robot: Robot | str | Path,
            transport: TransportBase, config: NodeConfig | Mapping | str | Path | None = None
            ) -> DeployNode:
    """Load and check everything, wire the node; refuses (ContractError, DeployError) with
    every mismatch named before anything is sent."""
    cfg = load_config(config)
    policy = policy if isinstance(policy, OnnxPolicy) else OnnxPolicy(policy)
    robot = robot if isinstance(robot, Robot) else load_robot_dir(robot)
    runner = PolicyRunner(policy, robot)
    return DeployNode(runner, transport, cfg)


def run(node: DeployNode, max_cycles: int | None = None,
        stop: threading.Event | None = None) -> dict[str, Any]:
    """Run the node's loop until `stop` is set or max_cycles; then send damping."""
    stop = stop or threading.Event()
    cfg = node.cfg
    warnings = []
    if cfg.cpu is not None or cfg.fifo_priority is not None:
        warnings = set_realtime(cfg.cpu, cfg.fifo_priority)

    def cycle(k: int) -> bool:
        node.cycle(k)
        return not stop.is_set()

    tuned = node.transport.tune_wakeups()
    if tuned:
        log.info("transport threads with a short scheduler slice: %s", ", ".join(tuned))
    with cpu_latency_request(cfg.cpu_dma_latency_us) as pm_warnings:
        warnings += pm_warnings
        try:
            if cfg.trigger == "state":
                primary = node.subs[node.state_keys[0]]
                stats = run_triggered(cycle, primary.wait, 1.0 / node.rate_hz, max_cycles,
                                      warm=node.warm_steps(), prewarm_s=cfg.prewarm_us * 1e-6)
            else:
                stats = run_loop(cycle, node.rate_hz, max_cycles, spin_s=cfg.spin_us * 1e-6)
        finally:
            node.shutdown()
    log.info(node.status_line())
    return {**node.summary(), "loop": stats.summary(), "realtime_warnings": warnings}


def deploy(policy: str | Path, robot: Robot | str | Path,
           transport: Literal["dds", "ros2"] = "dds", domain_id: int = 0,
           interface: Literal["generic", "native"] | None = None, network: bool = False,
           config: NodeConfig | Mapping | str | Path | None = None,
           max_cycles: int | None = None, stop: threading.Event | None = None
           ) -> dict[str, Any]:
    """Run POLICY on ROBOT until SIGINT/SIGTERM (or `stop`, or max_cycles); returns a summary.

    `interface` overrides the configuration's; `robot` is a Robot or the folder of its
    robot.yaml.
    """
    cfg = load_config(config)
    if interface is not None:
        cfg = cfg.model_copy(update={"interface": interface})
    policy_obj = OnnxPolicy(policy)
    robot_obj = robot if isinstance(robot, Robot) else load_robot_dir(robot)
    PolicyRunner(policy_obj, robot_obj)  # refuse a mismatched contract before any network
    if cfg.cpu is not None:  # before the transport, so that its threads (DDS receive) inherit
        pin_process(cfg.cpu)  # the CPU too; run() reports a refusal
    bus = make_transport(transport, domain_id, network)
    try:
        node = prepare(policy_obj, robot_obj, bus, cfg)
        stop = stop or threading.Event()
        restore = _install_signal_handlers(stop)
        try:
            return run(node, max_cycles, stop)
        finally:
            restore()
    finally:
        bus.close()


def _install_signal_handlers(stop: threading.Event):
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: Any) -> None:
        log.info("%s: stopping (damping command next)", signal.Signals(signum).name)
        stop.set()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for s, h in old.items():
            signal.signal(s, h)

    return restore
