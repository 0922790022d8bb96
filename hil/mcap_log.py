"""One MCAP file of a HIL run, as ROS 2 records it: rosbags, Foxglove and PlotJuggler read it.

Profile `ros2`; every channel is a ROS 2 topic name (`/joint_states`, `/lowstate`,
`/fmu/out/vehicle_odometry`) with message encoding `cdr` (the bytes on the wire, encapsulation
header included) and a schema of encoding `ros2msg`: the message definition followed by each
type it uses, separated by a line of 80 `=` and `MSG: pkg/Type`, as rosbag2 writes them. The
definitions are generated from the IDL classes the bytes were made with (deploy/messages.py,
unitree.py, px4.py), so schema and bytes cannot disagree. Channel metadata carries
`offered_qos_profiles` (best effort for sensor data, reliable for commands).

Besides the robot's topics the harness adds `/hil/events` (std_msgs/String, one JSON object per
event: faults injected, mode changes, process crashes and restarts), `/hil/ground_truth`
(nav_msgs/Odometry: the simulated base's true pose and velocity, twist in the body frame) and
`/hil/actuators` (sensor_msgs/JointState: the driver's targets and measured joint angles or
rotor speeds, efforts).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, get_type_hints

from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import array, sequence
from mcap.writer import CompressionType, Writer

from simreal.deploy.messages import ros_type

SEPARATOR = "=" * 80
PRIMITIVES = {"bool", "byte", "char", "int8", "uint8", "int16", "uint16", "int32", "uint32",
              "int64", "uint64", "float32", "float64"}
_PLAIN = {bool: "bool", str: "string", int: "int64", float: "float64"}

QOS_PROFILE = {  # rosbag2's offered_qos_profiles (history keep last, durability volatile)
    "sensor": "- history: 1\n  depth: 5\n  reliability: 2\n  durability: 2\n"
              "  deadline:\n    sec: 0\n    nsec: 0\n  lifespan:\n    sec: 0\n    nsec: 0\n"
              "  liveliness: 1\n  liveliness_lease_duration:\n    sec: 0\n    nsec: 0\n"
              "  avoid_ros_namespace_conventions: false\n",
    "command": "- history: 1\n  depth: 10\n  reliability: 1\n  durability: 2\n"
               "  deadline:\n    sec: 0\n    nsec: 0\n  lifespan:\n    sec: 0\n    nsec: 0\n"
               "  liveliness: 1\n  liveliness_lease_duration:\n    sec: 0\n    nsec: 0\n"
               "  avoid_ros_namespace_conventions: false\n",
}


def _short(cls: type) -> str:
    """`sensor_msgs/msg/JointState` -> `sensor_msgs/JointState`, as .msg files name types."""
    pkg, _, name = ros_type(cls).split("/")
    return f"{pkg}/{name}"


def _field_type(hint: Any, deps: list[type]) -> str:
    if isinstance(hint, type) and issubclass(hint, IdlStruct):
        deps.append(hint)
        return _short(hint)
    if hint in _PLAIN:
        return _PLAIN[hint]
    meta = getattr(hint, "__metadata__", ())
    if not meta:
        raise TypeError(f"cannot write a message definition for {hint!r}")
    m = meta[0]
    if isinstance(m, str) and m in PRIMITIVES:
        return m
    if isinstance(m, array):
        return f"{_field_type(m.subtype, deps)}[{m.length}]"
    if isinstance(m, sequence):
        inner = _field_type(m.subtype, deps)
        return f"{inner}[<={m.max_length}]" if m.max_length else f"{inner}[]"
    raise TypeError(f"cannot write a message definition for {hint!r}")


def _fields(cls: type) -> tuple[str, list[type]]:
    hints = get_type_hints(cls, include_extras=True)
    deps: list[type] = []
    lines = [f"{_field_type(hints[f.name], deps)} {f.name}" for f in dataclasses.fields(cls)]
    return "\n".join(lines) + "\n", deps


def message_definition(cls: type) -> str:
    """The ros2msg schema text of an IDL message class, with its dependencies."""
    text, deps = _fields(cls)
    parts, seen, queue = [text], {cls}, list(deps)
    while queue:
        dep = queue.pop(0)
        if dep in seen:
            continue
        seen.add(dep)
        dep_text, more = _fields(dep)
        parts.append(f"{SEPARATOR}\nMSG: {_short(dep)}\n{dep_text}")
        queue.extend(more)
    return "\n".join(parts)


@dataclasses.dataclass(frozen=True)
class LogMessage:
    topic: str
    msg_type: type
    qos: str  # "sensor" | "command"
    log_time: int  # ns: when the receiver got it (or when it was sent, if never received)
    publish_time: int  # ns: when its sender wrote it
    data: bytes  # CDR, encapsulation header included


def write_mcap(path: str | Path, messages: Iterable[LogMessage],
               metadata: dict[str, str] | None = None) -> int:
    """Write messages (any order: sorted by log time here) atomically; returns how many."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    msgs = sorted(messages, key=lambda m: (m.log_time, m.publish_time))
    schemas: dict[type, int] = {}
    channels: dict[str, int] = {}
    seq: dict[int, int] = {}
    with open(tmp, "wb") as f:
        w = Writer(f, compression=CompressionType.ZSTD)
        w.start(profile="ros2", library="simreal hil")
        for m in msgs:
            if m.msg_type not in schemas:
                schemas[m.msg_type] = w.register_schema(
                    name=ros_type(m.msg_type), encoding="ros2msg",
                    data=message_definition(m.msg_type).encode())
            if m.topic not in channels:
                channels[m.topic] = w.register_channel(
                    topic=m.topic, message_encoding="cdr", schema_id=schemas[m.msg_type],
                    metadata={"offered_qos_profiles": QOS_PROFILE[m.qos]})
            cid = channels[m.topic]
            seq[cid] = seq.get(cid, 0) + 1
            w.add_message(channel_id=cid, log_time=m.log_time, publish_time=m.publish_time,
                          data=m.data, sequence=seq[cid])
        if metadata:
            w.add_metadata("simreal_hil", metadata)
        w.finish()
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return len(msgs)
