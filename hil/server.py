"""The real-time loop of a simulated robot behind its topics (hil/robot.py's SimRobot).

`RobotServer` paces the simulation to real time on an absolute schedule of physics steps
(catching up after a late wake-up, restarting the schedule when more than `max_lag_s` behind),
takes commands every step, publishes state at `state_rate_hz`, and keeps the garbage collector
out of the steps (young collections in the slack). Hooks let a harness (hil/) inject link and
sensor faults (`Link`, `sensor_filter`), shift the robot's clock (`clock`), act at scenario
times (`on_tick`: pushes) and record every message (`Observer`). With the robot's
`object_pose` set it also publishes the object's pose as a camera-based estimator would
(hil/perception.py), through the same link.

Run alone (no faults, no recording): `python -m simreal.hil.server --robot go2 --interface native`.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from simreal.deploy.arm import OBJECT_POSE
from simreal.deploy.interfaces import RobotInterface
from simreal.hil.perception import ObjectPoseCamera
from simreal.hil.robot import RobotSimConfig, SimRobot

log = logging.getLogger("simreal.hil.server")


class Observer(Protocol):
    """What a harness learns from the robot (hil/ records it)."""

    def sent(self, topic: str, msg: Any, data: bytes) -> None: ...
    def received(self, topic: str, msg: Any, t_ns: int) -> None: ...
    def event(self, kind: str, **fields: Any) -> None: ...
    def truth(self, sim: SimRobot) -> None: ...


class Link(Protocol):
    """The path between the robot's application and the wire (a harness injects faults)."""

    def send(self, topic: str, msg: Any, data: bytes, write: Callable[[Any], None]) -> None: ...
    def receive(self, topic: str, msgs: list[Any]) -> list[Any]: ...
    def pump(self) -> None: ...


class DirectLink:
    """No faults: every message goes out and comes in as it is."""

    def send(self, topic: str, msg: Any, data: bytes, write: Callable[[Any], None]) -> None:
        write(msg)

    def receive(self, topic: str, msgs: list[Any]) -> list[Any]:
        return msgs

    def pump(self) -> None:
        pass


class NullObserver:
    def sent(self, topic: str, msg: Any, data: bytes) -> None:
        pass

    def received(self, topic: str, msg: Any, t_ns: int) -> None:
        pass

    def event(self, kind: str, **fields: Any) -> None:
        pass

    def truth(self, sim: SimRobot) -> None:
        pass


def with_bytes(msg: Any, data: bytes) -> Any:
    """The message, serializing to `data` from now on (a DataWriter serializes what it writes:
    bytes already made for the log are not made twice)."""
    msg.serialize = lambda *args, **kwargs: data
    return msg


def topic_names(interface: RobotInterface, overrides: Mapping[str, str] | None = None
                ) -> dict[str, str]:
    specs = interface.state_topics + interface.command_topics
    names = {s.key: s.default for s in specs}
    names.update({k: v for k, v in (overrides or {}).items() if k in names})
    return names


class RobotServer:
    """Runs a SimRobot in real time behind its topics on a transport (deploy/transport.py)."""

    def __init__(self, sim: SimRobot, transport: Any, topics: Mapping[str, str] | None = None,
                 state_rate_hz: float | None = None, link: Link | None = None,
                 observer: Observer | None = None,
                 sensor_filter: Callable[[dict[str, np.ndarray], float], dict] | None = None,
                 clock: Callable[[float], float] | None = None,
                 on_tick: Callable[[float], None] | None = None,
                 truth_rate_hz: float | None = None):
        self.sim = sim
        iface = sim.interface
        self.topics = topic_names(iface, topics)
        self.link = link or DirectLink()
        self.observer = observer or NullObserver()
        self.sensor_filter = sensor_filter
        self.clock = clock or (lambda t: t)  # scenario time -> the stamp offset of the robot
        self.on_tick = on_tick
        rate = state_rate_hz or sim.cfg.state_rate_hz or 2 * sim.control_rate
        self.publish_every = max(1, round(1.0 / (rate * sim.dt)))
        self.truth_every = max(1, round(1.0 / ((truth_rate_hz or sim.control_rate) * sim.dt)))
        self.camera: ObjectPoseCamera | None = None
        self.state_specs = iface.state_topics
        if sim.cfg.object_pose is not None:
            self.camera = ObjectPoseCamera(sim.cfg.object_pose)
            self.state_specs = (*iface.state_topics, OBJECT_POSE)
            self.topics[OBJECT_POSE.key] = (topics or {}).get(OBJECT_POSE.key,
                                                              OBJECT_POSE.default)
        self.pubs = {s.key: transport.publisher(self.topics[s.key], s.type, s.qos)
                     for s in self.state_specs}
        self.subs = {s.key: transport.subscription(self.topics[s.key], s.type, s.qos)
                     for s in iface.command_topics}
        # PX4's offboard heartbeat first: it enables the motor commands of the same period
        self._take_order = sorted(self.subs, key=lambda k: k != "offboard_control_mode")
        self.ticks = 0
        self.late_ticks = 0  # ticks that started more than one physics step late
        self.slips = 0  # times the schedule was given up and restarted (far behind)
        self.max_late_s = 0.0
        self.t0: float | None = None  # monotonic time of the first command
        self._started_at: float | None = None

    def _publish(self, t_scn: float) -> None:
        sim = self.sim
        signals = sim.signals()
        if self.sensor_filter is not None:
            signals = self.sensor_filter(signals, t_scn)
        offset = self.clock(t_scn)
        for key, msg in sim.interface.state_messages(signals, time.time() + offset):
            if offset:
                msg = _shift_native_stamp(msg, offset)
            data = msg.serialize()
            topic = self.topics[key]
            self.observer.sent(topic, msg, data)
            self.link.send(topic, with_bytes(msg, data), data, self.pubs[key].write)

    def _perceive(self, now: float, t_scn: float) -> None:
        """The perception stand-in: capture a frame when one is due, publish those ready."""
        cam = self.camera
        assert cam is not None
        if cam.due(now):
            pos, quat = self.sim.object_pose()
            cam.capture(now, time.time() + self.clock(t_scn), pos, quat)
        topic = self.topics[OBJECT_POSE.key]
        for msg in cam.ready(now):
            data = msg.serialize()
            self.observer.sent(topic, msg, data)
            self.link.send(topic, with_bytes(msg, data), data, self.pubs[OBJECT_POSE.key].write)

    def _take(self) -> None:
        sim = self.sim
        for key in self._take_order:
            topic = self.topics[key]
            msgs = self.link.receive(topic, self.subs[key].take())
            t_ns = time.time_ns()  # one time for what one take delivers
            for msg in msgs:
                self.observer.received(topic, msg, t_ns)
                was_started, was_failsafe = sim.started, sim.failsafe_active
                if not sim.apply(key, msg):
                    self.observer.event("command_rejected", topic=topic)
                elif was_failsafe and not sim.failsafe_active:
                    self.observer.event("failsafe_cleared", robot_time=sim.time)
                elif not was_started and sim.started:
                    self._started_at = time.monotonic()
                    self.t0 = self.t0 or self._started_at
                    self.observer.event("started", t0=self.t0)
                    print(json.dumps({"event": "started", "t0": self.t0}), flush=True)

    def run(self, stop: threading.Event, max_s: float | None = None,
            t0: float | None = None) -> dict[str, Any]:
        """Serve until `stop` is set or max_s (wall) passed; `t0` (monotonic) is scenario time
        zero when a harness gives it (else the first command)."""
        self.t0 = t0
        gc_was_enabled = gc.isenabled()
        gc.disable()  # collections run in the slack between steps, never in the middle of one
        try:
            return self._run(stop, max_s)
        finally:
            if gc_was_enabled:
                gc.enable()

    def _run(self, stop: threading.Event, max_s: float | None) -> dict[str, Any]:
        sim = self.sim
        start = begin = time.monotonic()
        k = 0
        while not stop.is_set() and (max_s is None or time.monotonic() - begin < max_s):
            deadline = start + k * sim.dt
            now = time.monotonic()
            if deadline > now:
                time.sleep(deadline - now)
            now = time.monotonic()
            late = now - deadline
            self.max_late_s = max(self.max_late_s, late)
            if late > sim.dt:
                self.late_ticks += 1
            if late > sim.cfg.max_lag_s:  # too far behind to catch up: restart the schedule
                self.slips += 1
                start, k = now, 0
            t_scn = now - self.t0 if self.t0 is not None else -1.0
            self._take()
            event = sim.step()
            if event == "failsafe":
                self.observer.event(event, robot_time=sim.time,
                                    since_command_s=sim.failsafe_after)
            elif event is not None:
                self.observer.event(event, robot_time=sim.time)
            if self.ticks % self.publish_every == 0:
                self._publish(t_scn)
            if self.camera is not None:
                self._perceive(now, t_scn)
            if sim.started and self.ticks % self.truth_every == 0:
                self.observer.truth(sim)
            self.link.pump()
            if self.on_tick is not None:
                self.on_tick(t_scn)
            self.ticks += 1
            k += 1
            if start + k * sim.dt - time.monotonic() > 0.5 * sim.dt:
                gc.collect(0 if self.ticks % 500 else 1)
        wall = time.monotonic() - self._started_at if self._started_at else None
        return {"ticks": self.ticks, "robot_time_s": sim.time, "physics_dt": sim.dt,
                "late_ticks": self.late_ticks, "slips": self.slips,
                "max_late_ms": self.max_late_s * 1e3,
                "real_time_factor": sim.time / wall if wall else None,
                "commands_applied": sim.commands_applied,
                "commands_rejected": sim.commands_rejected,
                "failsafe_active": sim.failsafe_active}


def _shift_native_stamp(msg: Any, offset_s: float) -> Any:
    """A jump of the robot's clock in robot-native stamps (PX4 timestamps in us, the Unitree
    tick in ms, CRC renewed), as the generic messages get it in their header stamps."""
    from simreal.deploy import px4, unitree

    if isinstance(msg, px4.VehicleOdometry):
        us = max(0, msg.timestamp + int(offset_s * 1e6))
        msg.timestamp = msg.timestamp_sample = us
    elif isinstance(msg, unitree.LowState):
        msg.tick = (msg.tick + int(offset_s * 1e3)) & 0xFFFFFFFF
        unitree.with_crc(msg)
    return msg


# --- a robot process without a harness ------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    from simreal.deploy import dds
    from simreal.robots import load_robot_dir

    p = argparse.ArgumentParser(prog="python -m simreal.hil.server",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--robot", required=True, help="registered robot name or robot folder")
    p.add_argument("--interface", choices=["generic", "native"], default="generic")
    p.add_argument("--domain-id", type=int, default=0)
    p.add_argument("--network", action="store_true", help="leave loopback (CYCLONEDDS_URI)")
    p.add_argument("--state-rate-hz", type=float,
                   help="state publishing rate (default twice the control rate)")
    p.add_argument("--max-s", type=float, help="stop after this many seconds")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="simreal hil robot: %(message)s")
    if Path(args.robot).is_dir():
        robot = load_robot_dir(args.robot)
    else:
        from simreal.robots.registry import get_robot
        robot = get_robot(args.robot)
    if not args.network:
        dds.use_loopback()

    sim = SimRobot(robot, args.interface, RobotSimConfig(state_rate_hz=args.state_rate_hz))
    bus = dds.Transport(domain_id=args.domain_id, network=args.network)
    server = RobotServer(sim, bus)
    stop = threading.Event()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda *_: stop.set())
    log.info("%s (%s) on %s: physics %g ms, waiting for commands", robot.name, args.interface,
             server.topics, sim.dt * 1e3)
    summary = server.run(stop, args.max_s)
    bus.close()
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    sys.exit(main())
