"""Calibration logs: MCAP files of ROS 2 CDR messages, read back into time series.

A log is what `simreal record` writes (calibration/record.py, with hil/mcap_log.py's writer) or
any MCAP / rosbag2 recording of a robot's topics: it is read with `rosbags` (AnyReader), each
message decoded by deploy's own message classes (`cls.deserialize`, the bytes of the wire) and
turned into signals by the robot's interface (deploy/interfaces.py): `decode` for state
messages, `command_of` for commands, the very functions the deploy node and the HIL robot use.

Times are seconds from the experiment's first command (the `/calibration/experiment` event, or
the first command message of a log without it). A state message's time is its log time (when
the recorder took it), a command's is when it was sent: the latency the fit estimates is
therefore the robot's command-to-driver delay plus the link's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simreal.deploy import messages as m
from simreal.deploy import px4, unitree
from simreal.deploy.interfaces import InterfaceError, InterfaceSettings, RobotInterface
from simreal.deploy.registry import build_interface
from simreal.hil.messages import String
from simreal.robots import Robot

EVENT_TOPIC = "/calibration/experiment"
CALIBRATED_KINDS = ("legged", "quadrotor")  # robot kinds the calibration fits (params.py)
TYPES: dict[str, type] = {m.ros_type(c): c for c in (
    *m.ROS_TYPES, *unitree.MESSAGE_TYPES, *px4.MESSAGE_TYPES, String)}


class LogError(ValueError):
    """A log that cannot be used; the message names the file and what is missing."""


def interface_for(robot: Robot, name: str, damping_kd: float = 1.0) -> RobotInterface:
    """The robot's wire interface of flavour `name` (deploy/registry.py's class, robot.yaml's
    gains; no simulator)."""
    if robot.spec.kind not in CALIBRATED_KINDS:
        raise LogError(f"robot {robot.name!r} is {robot.spec.kind!r}: calibration covers "
                       "legged robots and quadrotors")
    try:
        return build_interface(robot, name, InterfaceSettings(damping_kd=damping_kd))
    except InterfaceError as exc:
        raise LogError(str(exc)) from None


@dataclass
class Series:
    """Samples of one topic: times (s) and named signals, one row per message."""

    t: np.ndarray
    values: dict[str, np.ndarray]

    def window(self, t0: float, t1: float) -> Series:
        keep = (self.t >= t0) & (self.t < t1)
        return Series(self.t[keep], {k: v[keep] for k, v in self.values.items()})


@dataclass
class ExperimentLog:
    path: Path
    robot: str
    experiment: str
    interface: str
    meta: dict[str, Any]
    states: dict[str, Series]  # by state topic key
    commands: Series  # the motor commands, in policy order
    t0_ns: int
    extra: dict[str, int] = field(default_factory=dict)  # other topics: message counts

    def signal(self, name: str) -> Series:
        """The series of the state topic that carries `name` (joint_pos, orientation, ...)."""
        for series in self.states.values():
            if name in series.values:
                return Series(series.t, {name: series.values[name]})
        raise LogError(f"{self.path}: no state topic carries {name!r}")

    def phases(self, name: str) -> list[tuple[float, float]]:
        return [(float(a), float(b)) for n, a, b in self.meta.get("phases", []) if n == name]


def _stack(rows: list[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    keys = [k for k in rows[0] if all(k in r for r in rows)]
    return {k: np.array([np.asarray(r[k], dtype=np.float64) for r in rows]) for k in keys}


def read_log(path: str | Path, robot: Robot, interface: str | None = None) -> ExperimentLog:
    """Read one MCAP (or rosbag2 folder) of a calibration experiment on `robot`."""
    from rosbags.highlevel import AnyReader

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such log")
    raw: list[tuple[str, str, int, bytes]] = []
    try:
        with AnyReader([path]) as reader:
            for conn, t_ns, data in reader.messages():
                raw.append((conn.topic, conn.msgtype, t_ns, bytes(data)))
    except Exception as exc:  # rosbags raises its own error classes per storage format
        raise LogError(f"{path}: not a readable MCAP / rosbag2 log: {exc}") from None
    meta: dict[str, Any] = {}
    for topic, msgtype, _t_ns, data in raw:
        if topic == EVENT_TOPIC and msgtype == "std_msgs/msg/String":
            ev = json.loads(String.deserialize(data).data)
            if ev.get("event") == "experiment":
                meta = ev
    if meta.get("robot") not in (None, robot.name):
        raise LogError(f"{path}: recorded on robot {meta['robot']!r}, not {robot.name!r}")
    iface_name = interface or meta.get("interface") or "generic"
    iface = interface_for(robot, iface_name)
    topics = {s.default: s.key for s in iface.state_topics + iface.command_topics}
    topics.update({v: k for k, v in (meta.get("topics") or {}).items()})
    state_keys = {s.key for s in iface.state_topics}
    command_keys = {s.key for s in iface.command_topics}
    state_rows: dict[str, list[tuple[int, dict]]] = {k: [] for k in state_keys}
    cmd_rows: list[tuple[int, dict]] = []
    extra: dict[str, int] = {}
    for topic, msgtype, t_ns, data in raw:
        key = topics.get(topic)
        if key is None or msgtype not in TYPES:
            extra[topic] = extra.get(topic, 0) + 1
            continue
        msg = TYPES[msgtype].deserialize(data)
        try:
            if key in state_keys:
                state_rows[key].append((t_ns, iface.decode(key, msg)))
            elif key in command_keys:
                cmd = iface.command_of(key, msg)
                if "direct_actuator" in cmd:  # PX4's offboard heartbeat: no command
                    continue
                if not bool(cmd.pop("crc_ok", True)):  # the Go2 firmware ignores it
                    continue
                cmd_rows.append((t_ns, cmd))
        except ValueError as exc:
            raise LogError(f"{path}: {topic}: message at {t_ns} ns cannot be decoded: "
                           f"{exc}") from None
    if not cmd_rows:
        raise LogError(f"{path}: no command messages on "
                       f"{sorted(t for t, k in topics.items() if k in command_keys)}")
    empty = [k for k, rows in state_rows.items() if not rows]
    if empty:
        raise LogError(f"{path}: no state messages for {empty} (topics "
                       f"{sorted(t for t, k in topics.items() if k in empty)})")
    t0_ns = int(meta.get("t0_ns") or min(t for t, _ in cmd_rows))

    def series(rows: list[tuple[int, dict]]) -> Series:
        rows = sorted(rows, key=lambda r: r[0])
        return Series(np.array([(t - t0_ns) * 1e-9 for t, _ in rows]),
                      _stack([r for _, r in rows]))

    cmds = series(cmd_rows)
    if "q" in cmds.values:  # joint commands: the gains the robot applied (generic: robot.yaml)
        n = cmds.values["q"].shape[1]
        for k, attr in (("kp", "kp"), ("kd", "kd")):
            if k not in cmds.values:
                cmds.values[k] = np.tile([getattr(j, attr) for j in robot.spec.joints],
                                         (len(cmds.t), 1))
        for k in ("dq", "tau"):
            cmds.values.setdefault(k, np.zeros((len(cmds.t), n)))
    return ExperimentLog(path, robot.name, str(meta.get("experiment", "")), iface_name, meta,
                         {k: series(v) for k, v in state_rows.items()}, cmds, t0_ns, extra)
